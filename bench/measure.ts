// Timing helpers shared by the benchmark's cases.
import { threadNs } from "./cpu_time.ts";

/** Batches per figure; the median batch is reported. */
export const SAMPLES = 7;

/** Untimed batches before the timed ones. */
const WARM_BATCHES = 2;

/** Median over SAMPLES batches of ns per call of `fn`, after {@link WARM_BATCHES} untimed batches
 * of the same loop: a warm-up in a loop of its own left the timed loop to be compiled in
 * JavaScriptCore's optimizing tier during the first timed batches (Bun's import + dispose read 89
 * ns in the first call of this function, 72-74 in the next ones). */
export function measure(iterations: number, fn: () => void): number {
  const perCall: number[] = [];
  for (let s = 0; s < WARM_BATCHES + SAMPLES; s++) {
    const t0 = performance.now();
    for (let i = 0; i < iterations; i++) fn();
    if (s >= WARM_BATCHES) perCall.push(((performance.now() - t0) * 1e6) / iterations);
  }
  perCall.sort((a, b) => a - b);
  return perCall[Math.floor(perCall.length / 2)]!;
}

/**
 * Median thread CPU time in ns per call of each case, the cases interleaved batch by batch (`batches`
 * batches of `batch` calls, after one warm-up batch each): on a shared, noisy machine a slow stretch
 * then hits every case alike, and the time this thread waited for a core is left out.
 */
export function interleaved(
  cases: Record<string, () => void>,
  batch: number,
  batches = SAMPLES,
): Record<string, number> {
  const samples: Record<string, number[]> = {};
  // Keyed by the names of `cases`, which every loop walks.
  for (const name in cases) {
    samples[name] = [];
    for (let i = 0; i < batch; i++) cases[name]!();
  }
  for (let b = 0; b < batches; b++) {
    for (const name in cases) {
      const fn = cases[name]!;
      const t0 = threadNs();
      for (let i = 0; i < batch; i++) fn();
      samples[name]!.push((threadNs() - t0) / batch);
    }
  }
  const medians: Record<string, number> = {};
  for (const name in cases) medians[name] = samples[name]!.sort((p, q) => p - q)[batches >> 1]!;
  return medians;
}
