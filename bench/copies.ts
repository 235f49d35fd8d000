// The copy rows of the benchmark: contiguous and strided 2-D views copied two ways, copy() (fresh
// memory, so its first touch of every page is part of each figure) and copyFrom() into a
// destination allocated and touched beforehand (the copy kernel alone), in GB/s. Every source is written
// first: a never-written allocation reads from the kernel's shared zero page, faster than any
// real array (numpy reads 31.6 against 22.0 GB/s). Timed in thread CPU time, the cases interleaved
// sample by sample, so a slow stretch of a shared machine hits all of them alike.
import { exportDLPack, importDLPack, zeros } from "../mod.ts";
import { interleaved } from "./measure.ts";

type Figures = Record<string, number | string | boolean>;

const SAMPLES = 9;
const N = 4096;
/** The small copy: below the size from which copies stream their output. */
const SMALL = 512;
const SMALL_REPEATS = 200;

/** Adds the copy figures (GB/s, medians) to `out`. */
export function copyCases(out: Figures): void {
  using base = zeros([N, N], "float32");
  const values = base.array() as Float32Array;
  for (let k = 0; k < values.length; k++) values[k] = k;
  using transposed = importDLPack(exportDLPack(base, { shape: [N, N], strides: [1, N] }));
  using everyOther = importDLPack(exportDLPack(base, { shape: [N, N / 2], strides: [N, 2] }));
  using full = zeros([N, N], "float32");
  using half = zeros([N, N / 2], "float32");
  using small = zeros([SMALL, SMALL], "float32");
  (small.array() as Float32Array).fill(3);
  using smallInto = zeros([SMALL, SMALL], "float32");
  const bytes = N * N * 4;
  const into: Record<string, [() => void, number]> = {
    memcpy_GBps: [() => full.copyFrom(base), bytes],
    copy_into_transposed_GBps: [() => full.copyFrom(transposed), bytes],
    copy_into_every_other_column_GBps: [() => half.copyFrom(everyOther), bytes / 2],
  };
  const fresh: Record<string, [() => void, number]> = {
    alloc_memcpy_GBps: [() => base.copy().dispose(), bytes],
    copy_transposed_GBps: [() => transposed.copy().dispose(), bytes],
    copy_every_other_column_GBps: [() => everyOther.copy().dispose(), bytes / 2],
  };
  // Each group interleaved on its own (every ratio is within one): a 64 MiB allocation mapped and
  // unmapped between two copies into touched memory left the transpose at 0.68-0.78 of the
  // contiguous copy, against 0.87-0.91 with the copies into touched memory alone.
  for (const cases of [into, fresh]) {
    const ns = interleaved(Object.fromEntries(Object.entries(cases).map(([name, [fn]]) => [name, fn])), 1, SAMPLES);
    for (const name in cases) out[name] = cases[name]![1] / ns[name]!;
  }
  // The small copy on its own: after a big copy nothing of it is left in the caches, and its
  // figure would say which big copy ran before it.
  const smallNs = interleaved({ small: () => smallInto.copyFrom(small) }, SMALL_REPEATS, SAMPLES).small!;
  out.small_memcpy_GBps = (SMALL * SMALL * 4) / smallNs;
}
