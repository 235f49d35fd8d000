// The floors the library's hot paths are measured against: the runtime's own bare call that wraps
// native memory in an ArrayBuffer (Deno getArrayBuffer with a ready pointer, Bun toArrayBuffer),
// and the FFI calls an import and an export make, to empty native functions of the same
// signatures (tests/native/testprod.zig), which with the native work alone (`zig build
// bench-import`) is all an import or an export has to cost. Benchmark code only: the library
// itself reaches the runtime through ffi/.
import { exportDLPack, importDLPack } from "../mod.ts";
import { tp } from "../tests/support/producer.ts";
import { interleaved } from "./measure.ts";

/** A function that makes one bare zero-copy ArrayBuffer over `byteLength` bytes at `address`. */
export function bareArrayBuffer(address: number, byteLength: number): () => ArrayBuffer {
  const g = globalThis as { Deno?: typeof Deno };
  if (g.Deno !== undefined) {
    const pointer = Deno.UnsafePointer.create(BigInt(address))!;
    return () => Deno.UnsafePointerView.getArrayBuffer(pointer, byteLength);
  }
  const ffi =
    (import.meta as unknown as { require(id: string): { toArrayBuffer(a: number, o: number, l: number): ArrayBuffer } })
      .require("bun:ffi");
  return () => ffi.toArrayBuffer(address, 0, byteLength);
}

/**
 * Adds, in thread CPU time and interleaved: import + dispose of the tensor at `address` and export +
 * dispose of `exported`, each beside its FFI calls made to empty functions (ns, medians).
 */
export function ffiFloorCases(out: Record<string, number | string | boolean>, address: number): void {
  const source = { versioned: address };
  const exported = new Float32Array(256);
  // An owner's and a struct's address are doubles of the same size as the real ones.
  const owner = address + 4096;
  Object.assign(
    out,
    interleaved({
      import_dispose_cpu_ns: () => importDLPack(source).dispose(),
      empty_import_calls_cpu_ns: () => {
        tp.tp_nop_import(address);
        tp.tp_nop_release(owner);
      },
      export_dispose_cpu_ns: () => exportDLPack(exported).dispose(),
      empty_export_calls_cpu_ns: () => {
        tp.tp_nop_dispose(-(owner * 2 + 1) - tp.tp_nop_export(exported, owner, 1, exported.byteLength, 0x1002002));
      },
    }, 20_000),
  );
}
