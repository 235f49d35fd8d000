/**
 * A small seeded PRNG (mulberry32) for the randomized tests: the same seed gives the same cases
 * under Deno and Bun, so a failure names a seed and a case that reproduce it.
 * @module
 */

/** Seeded random choices. */
export class Rng {
  #state: number;

  constructor(seed: number) {
    this.#state = seed >>> 0;
  }

  /** A uniform 32-bit unsigned integer. */
  u32(): number {
    let t = (this.#state = (this.#state + 0x6d2b79f5) >>> 0);
    t = Math.imul(t ^ (t >>> 15), t | 1);
    t ^= t + Math.imul(t ^ (t >>> 7), t | 61);
    return (t ^ (t >>> 14)) >>> 0;
  }

  /** An integer in [lo, hi] (inclusive, both below 2^32 apart). */
  int(lo: number, hi: number): number {
    return lo + (this.u32() % (hi - lo + 1));
  }

  /** True with probability `percent` / 100. */
  chance(percent: number): boolean {
    return this.u32() % 100 < percent;
  }

  /** One element of a list. */
  pick<T>(items: readonly T[]): T {
    if (items.length === 0) throw new Error("pick() from an empty list");
    return items[this.u32() % items.length]!;
  }

  /** A uniform 64-bit value as a signed bigint. */
  i64(): bigint {
    return BigInt.asIntN(64, (BigInt(this.u32()) << 32n) | BigInt(this.u32()));
  }
}
