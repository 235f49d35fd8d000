// Reading one element of a foreign tensor: get(1, 2) of a live 2 x 3 float32 view, and import +
// get(1, 2) + dispose of one against the same import + dispose without the read and against a reader
// written by hand with the runtime's own FFI (the struct's data pointer read, the float read at its
// offset, the producer's deleter called), in thread CPU time, the cases interleaved batch by batch.
// Benchmark code only: the library itself reaches the runtime through ffi/.
import { importDLPack } from "../mod.ts";
import { tp } from "../tests/support/producer.ts";
import { interleaved } from "./measure.ts";

type Figures = Record<string, number | string | boolean>;

const BATCH = 20_000;
/** Byte offsets in a DLManagedTensorVersioned: its deleter, then `dl_tensor.data`. */
const DELETER_OFFSET = 16;
const DATA_OFFSET = 32;
/** Element (1, 2) of a C-contiguous 2 x 3 float32, in bytes. */
const ELEMENT_OFFSET = (1 * 3 + 2) * 4;

interface BunFfi {
  read: { ptr(address: number, offset: number): number; f32(address: number, offset: number): number };
  CFunction(spec: { ptr: number; args: string[]; returns: string }): (address: number) => void;
}

/** Reads element (1, 2) of the managed tensor at `address` and calls its deleter, by hand. */
function byHandReader(address: number): () => number {
  const g = globalThis as { Deno?: typeof Deno };
  if (g.Deno !== undefined) {
    const managed = Deno.UnsafePointer.create(BigInt(address))!;
    const struct = new Deno.UnsafePointerView(managed);
    const deleter = new Deno.UnsafeFnPointer(
      struct.getPointer(DELETER_OFFSET)!,
      {
        parameters: ["pointer"],
        result: "void",
      } as const,
    );
    return () => {
      const value = new Deno.UnsafePointerView(struct.getPointer(DATA_OFFSET)!).getFloat32(ELEMENT_OFFSET);
      deleter.call(managed);
      return value;
    };
  }
  const ffi = (import.meta as unknown as { require(id: string): BunFfi }).require("bun:ffi");
  const deleter = ffi.CFunction({ ptr: ffi.read.ptr(address, DELETER_OFFSET), args: ["ptr"], returns: "void" });
  return () => {
    const value = ffi.read.f32(ffi.read.ptr(address, DATA_OFFSET), ELEMENT_OFFSET);
    deleter(address);
    return value;
  };
}

/** Adds the element-read figures (ns, medians) to `out`. */
export function elementCases(out: Figures): void {
  const address = tp.tp_static_tensor(24, 2); // [2, 3] float32
  const source = { versioned: address };
  const read = byHandReader(address);
  let sink = 0;
  // The read alone, from a view that stays live through every batch.
  const live = importDLPack({ versioned: tp.tp_static_tensor(24, 2) });
  const cases: Record<string, () => void> = {
    get_live_ns: () => {
      sink += live.get(1, 2) as number;
    },
    import_get_dispose_ns: () => {
      const v = importDLPack(source);
      sink += v.get(1, 2) as number;
      v.dispose();
    },
    import_dispose_2x3_ns: () => importDLPack(source).dispose(),
    by_hand_read_ns: () => {
      sink += read();
    },
  };
  Object.assign(out, interleaved(cases, BATCH));
  live.dispose();
  out.element_read_checksum = sink;
}
