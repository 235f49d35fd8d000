/**
 * Result conversion and symbol binding both runtime bindings share.
 * @module
 */
import type { Bound, SymbolTable } from "./types.ts";

const NumberCtor = Number;
const ReflectApply = Reflect.apply;
const ObjectDefineProperties = Object.defineProperties;
const ObjectFreeze = Object.freeze;
const ObjectKeys = Object.keys;

/**
 * The table's functions as the runtime opened them (64-bit results as numbers), on one frozen
 * object. Defined in one step: V8 keeps an object that got its 61 functions by keyed stores in
 * dictionary mode, where every `core().fn` is a hash lookup the JIT cannot fold and the hot paths
 * paid several nanoseconds per call for it.
 */
export function bindSymbols<T extends SymbolTable>(raw: Record<string, unknown>, table: T): Bound<T> {
  const descriptors = { __proto__: null } as unknown as Record<string, PropertyDescriptor>;
  const names = ObjectKeys(table);
  for (let i = 0; i < names.length; i++) {
    const name = names[i]!;
    const fn = raw[name] as ((...args: unknown[]) => unknown) | null | undefined;
    if (fn == null) continue;
    const spec = table[name]!; // one of the table's own keys
    const value = spec.returns === "usize" ? asNumber(fn, spec.args.length) : fn;
    descriptors[name] = { __proto__: null, value, enumerable: true } as PropertyDescriptor;
  }
  return ObjectFreeze(ObjectDefineProperties({}, descriptors)) as Bound<T>;
}

/** `fn` with its 64-bit result as a number (addresses are below 2^53). Fixed arities: a rest
 * spread would go through `Array.prototype[Symbol.iterator]`, which a caller can replace. */
function asNumber(fn: (...args: unknown[]) => unknown, arity: number): (...args: unknown[]) => number {
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
