/**
 * The test hooks of the FAKE CUDA driver (tests/native/fakecuda.zig), for the fake-driver test
 * cases. The fake is the library DLPACK_CUDA_LIB names in the child processes those cases run in;
 * opening it here yields the same loaded copy libdlpack uses.
 * @module
 */
import { findLibrary, openLibrary } from "../../ffi/mod.ts";

/** The fake driver's counters (see `fakecuda_stats`). */
export interface FakeStats {
  deviceAllocations: number;
  hostAllocations: number;
  managedAllocations: number;
  events: number;
  streams: number;
  waits: number;
  syncs: number;
  records: number;
  wrongContext: number;
  contextDepth: number;
  retains: number;
  syncCopies: number;
  asyncCopies: number;
}

/** The hooks. */
export interface FakeDriver {
  readonly path: string;
  stats(): FakeStats;
  /** The next call of driver function `name` fails with `result`. */
  failNext(name: string, result: number): void;
  /** The last stream wait: waiting stream, event, and the stream the event was recorded on. */
  lastWait(): { stream: bigint; event: bigint; recordedOn: bigint };
}

/** The fake driver's library path (the local build, or DLPACK_FAKECUDA_LIB). */
export function fakeDriverPath(): string {
  return findLibrary("DLPACK_FAKECUDA_LIB", "dlpack_fakecuda");
}

/** Binds the hooks of the fake driver at `path`. */
export function bindFakeDriver(path: string): FakeDriver {
  const lib = openLibrary(
    path,
    {
      fakecuda_stats: { args: ["buffer"], returns: "u32" },
      fakecuda_fail_next: { args: ["buffer", "i32"], returns: "void" },
      fakecuda_last_wait: { args: ["buffer"], returns: "void" },
    } as const,
  );
  const out = new Float64Array(13);
  const wait = new BigUint64Array(3);
  return {
    path,
    stats() {
      lib.symbols.fakecuda_stats(out);
      return {
        deviceAllocations: out[0]!,
        hostAllocations: out[1]!,
        managedAllocations: out[2]!,
        events: out[3]!,
        streams: out[4]!,
        waits: out[5]!,
        syncs: out[6]!,
        records: out[7]!,
        wrongContext: out[8]!,
        contextDepth: out[9]!,
        retains: out[10]!,
        syncCopies: out[11]!,
        asyncCopies: out[12]!,
      };
    },
    failNext(name: string, result: number) {
      lib.symbols.fakecuda_fail_next(new TextEncoder().encode(name + "\0"), result);
    },
    lastWait() {
      lib.symbols.fakecuda_last_wait(wait);
      return { stream: wait[0]!, event: wait[1]!, recordedOn: wait[2]! };
    },
  };
}
