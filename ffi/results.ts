/**
 * Result conversion both runtime bindings share.
 * @module
 */

const NumberCtor = Number;
const ReflectApply = Reflect.apply;

/** `fn` with its 64-bit result as a number (addresses are below 2^53). Fixed arities: a rest
 * spread would go through `Array.prototype[Symbol.iterator]`, which a caller can replace. */
export function asNumber(fn: (...args: unknown[]) => unknown, arity: number): (...args: unknown[]) => number {
  switch (arity) {
    case 0:
      return () => NumberCtor(fn());
    case 1:
      return (a) => NumberCtor(fn(a));
    case 2:
      return (a, b) => NumberCtor(fn(a, b));
    case 3:
      return (a, b, c) => NumberCtor(fn(a, b, c));
    case 4:
      return (a, b, c, d) => NumberCtor(fn(a, b, c, d));
    case 5:
      return (a, b, c, d, e) => NumberCtor(fn(a, b, c, d, e));
  }
  // Reflect.apply reads the arguments as an array-like (its length and indices), never iterates.
  return (...args) => NumberCtor(ReflectApply(fn, undefined, args));
}
