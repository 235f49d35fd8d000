// Timing helpers shared by bench/cases.ts and bench/bridge.ts.

/** Batches per figure; the median batch is reported. */
export const SAMPLES = 7;

/** Median over SAMPLES batches of ns per call of `fn` (after a warm-up of the JIT). */
export function measure(iterations: number, fn: () => void): number {
  for (let i = 0; i < Math.min(iterations, 20_000); i++) fn();
  const perCall: number[] = [];
  for (let s = 0; s < SAMPLES; s++) {
    const t0 = performance.now();
    for (let i = 0; i < iterations; i++) fn();
    perCall.push(((performance.now() - t0) * 1e6) / iterations);
  }
  perCall.sort((a, b) => a - b);
  return perCall[Math.floor(perCall.length / 2)]!;
}
