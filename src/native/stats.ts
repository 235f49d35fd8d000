/**
 * Live counts of everything the library holds, for leak tests and for users.
 * @module
 */
import { core, runtime } from "../../ffi/mod.ts";
import { STATS_COUNTERS, StatsCounter } from "../facts/abi.ts";
import { releaseDeferred } from "./journal.ts";
import { sweepPins } from "./pins.ts";
import type { Elements } from "../facts/intrinsics.ts";

/** What is alive right now. Every count returns to zero once everything is released. */
export interface Stats {
  /** Imported tensors whose producer deleter has not run yet. */
  readonly imports: number;
  /** Exported structs no consumer has released yet. */
  readonly exports: number;
  /** Library allocations (`empty`, `zeros`, copies). */
  readonly allocations: number;
  /** JS buffers kept reachable for native consumers. */
  readonly pinned: number;
  /** Bytes of library allocations. */
  readonly allocatedBytes: number;
  /** Bytes of pinned JS buffers. */
  readonly pinnedBytes: number;
  /** Producer deleters the library has called since the process started (not a live count). */
  readonly deletersCalled: number;
  /** Files mapped by `io.ts` (`loadSafetensors`, `loadNpy`, ...) that a view, share or export still
   * holds: each is unmapped when its last one is released. */
  readonly mappings: number;
  /** Bytes of those mapped files. */
  readonly mappedBytes: number;
}

// Over an ArrayBuffer of its own, as its address is cached (see `drained` in pins.ts).
const counters = new Float64Array(new ArrayBuffer(8 * STATS_COUNTERS)) as Elements<
  Float64Array,
  (typeof StatsCounter)[keyof typeof StatsCounter]
>;
let countersAt = 0;

/** The live counters (sweeps released pins first). */
export function stats(): Stats {
  releaseDeferred();
  sweepPins();
  core().dlpk_stats(countersAt ||= runtime().addressOf(counters));
  return {
    imports: counters[StatsCounter.imports],
    exports: counters[StatsCounter.exports],
    allocations: counters[StatsCounter.allocations],
    allocatedBytes: counters[StatsCounter.allocationBytes],
    pinned: counters[StatsCounter.pins],
    pinnedBytes: counters[StatsCounter.pinnedBytes],
    deletersCalled: counters[StatsCounter.deletersCalled],
    mappings: counters[StatsCounter.mappings],
    mappedBytes: counters[StatsCounter.mappedBytes],
  };
}
