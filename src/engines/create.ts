/**
 * The values of the constructors: `arange`'s sequence (numpy's length and rounding rules),
 * nested JS arrays read into a shape and values (`asarray`), and the default dtypes numpy picks,
 * each as a TypedArray in the form of `toArray()` for the copy engine to write into an allocation.
 * @module
 */
import { DLPackError, shown } from "../facts/errors.ts";
import { type AnyTypedArray, type DType, type DTypeInfo, dtypeInfo, type Scalar } from "../facts/dtypes.ts";
import { ceil, isArray, isSafeInt, objectSlots, slots, toBigInt, typedArrayLength } from "../facts/intrinsics.ts";
import { MAX_RANK } from "../facts/abi.ts";
import { decodeElement, encodeElement, jsBuffer } from "./codec.ts";

// Captured at load: a caller may replace Number and Math later.
const NumberCtor = Number;
const fround = Math.fround;

/** A value for an element of `info`: a safe-integer number is taken for a 64-bit integer dtype
 * (whose elements are bigints), as numpy takes a Python int for any integer dtype. */
export function scalarFor(info: DTypeInfo, value: Scalar): Scalar {
  return info.kind === "bigint" && isSafeInt(value) ? toBigInt(value) : value;
}

/** numpy's dtype for a scalar with none given: bool, int64 (integers), float64, complex128. */
export function defaultDType(value: unknown): DType {
  if (typeof value === "boolean") return "bool";
  if (typeof value === "bigint" || isSafeInt(value)) return "int64";
  if (typeof value === "number") return "float64";
  if (isArray(value)) return "complex128";
  throw new DLPackError("dtype", `a value must be a number, bigint, boolean or [re, im], got ${shown(value)}`);
}

/** One element of `info` in the form of `toArray()`, checked. */
function encodedOne(info: DTypeInfo, value: Scalar): AnyTypedArray {
  const one = new info.array(jsBuffer(info.slots * info.slotBytes, "arange()"));
  encodeElement(info, scalarFor(info, value), one, 0);
  return one;
}

/** `value` rounded to `info`'s float type, as numpy stores it. */
function rounded(info: DTypeInfo, value: number): number {
  return decodeElement(info, encodedOne(info, value), 0) as number;
}

/** The arguments of `arange`, checked: numbers (finite) or bigints, step not 0. */
interface ArangeArgs {
  readonly start: number | bigint;
  readonly stop: number | bigint;
  readonly step: number | bigint;
}

function bound(value: unknown, what: string): number | bigint {
  if (typeof value === "bigint") return value;
  if (typeof value !== "number" || value !== value || value === Infinity || value === -Infinity) {
    throw new DLPackError("argument", `arange() ${what} must be a finite number or a bigint, got ${shown(value)}`);
  }
  return value;
}

/** Reads `arange(start, stop?, step?)`'s numbers (each once). */
export function arangeArgs(start: unknown, stop: unknown, step: unknown): ArangeArgs {
  const a = bound(start, "start");
  const args = stop === undefined
    ? { start: typeof a === "bigint" ? 0n : 0, stop: a, step: step === undefined ? 1 : bound(step, "step") }
    : { start: a, stop: bound(stop, "stop"), step: step === undefined ? 1 : bound(step, "step") };
  if (args.step === 0 || args.step === 0n) throw new DLPackError("argument", "arange() step must not be 0");
  return args;
}

/** numpy's default: int64 when every argument is an integer, float64 otherwise. */
export function arangeDType(args: ArangeArgs): DType {
  const integral = (v: number | bigint) => typeof v === "bigint" || isSafeInt(v);
  return integral(args.start) && integral(args.stop) && integral(args.step) ? "int64" : "float64";
}

/** The longest sequence `arange` makes (a JS array of values must hold it). */
const MAX_LENGTH = 2 ** 32 - 1;

/** The sequence as a TypedArray in the form of `toArray()`. */
export function arangeValues(args: ArangeArgs, info: DTypeInfo): AnyTypedArray {
  const kind = info.kind;
  if (kind === "bool") throw new DLPackError("dtype", "arange() makes numbers; bool is not a dtype it fills");
  if (kind === "complex") return complexSequence(args, info);
  const integer = kind === "int" || kind === "bigint";
  if (typeof args.start === "bigint" || typeof args.stop === "bigint" || typeof args.step === "bigint") {
    return bigintSequence(args, info);
  }
  const start = args.start;
  const step = args.step as number;
  if (integer && !(isSafeInt(start) && isSafeInt(args.stop) && isSafeInt(step))) {
    throw new DLPackError(
      "dtype",
      `arange() with the integer dtype ${info.name} takes integer start, stop and step, got ${start}, ${args.stop}, ${step}`,
    );
  }
  // numpy: ceil((stop - start) / step) in double precision, none when negative.
  const length = lengthOf(ceil((args.stop - start) / step));
  const out = new info.array(jsBuffer(length * info.slotBytes, "arange()"));
  if (length === 0) return out;
  // numpy stores start and start + step, then fills start + i * delta, delta their difference,
  // in the dtype's own precision (float16 in float32, as numpy's half fill computes).
  const first = integer ? start : rounded(info, start);
  const second = integer ? start + step : rounded(info, start + step);
  if (info.name === "float64" || integer) {
    const delta = second - first;
    for (let i = 0; i < length; i++) encodeElement(info, scalarFor(info, i === 1 ? second : first + i * delta), out, i);
    return out;
  }
  const f = fround;
  const delta = f(second - first);
  for (let i = 0; i < length; i++) {
    encodeElement(info, i === 1 ? second : f(first + f(f(i) * delta)), out, i);
  }
  return out;
}

/** A complex sequence: the real parts as the float sequence of the parts' dtype, as numpy's
 * complex fill computes them from real arguments; the imaginary parts 0. */
function complexSequence(args: ArangeArgs, info: DTypeInfo): AnyTypedArray {
  const part = dtypeInfo(info.bits === 64 ? "float32" : info.bits === 128 ? "float64" : "float16");
  const real = arangeValues(numbersOf(args), part);
  const n = typedArrayLength(real);
  const out = new info.array(jsBuffer(2 * n * info.slotBytes, "arange()"));
  for (let i = 0; i < n; i++) encodeElement(info, [decodeElement(part, real, i) as number, 0], out, i);
  return out;
}

function numbersOf(args: ArangeArgs): ArangeArgs {
  return { start: NumberCtor(args.start), stop: NumberCtor(args.stop), step: NumberCtor(args.step) };
}

function lengthOf(n: number): number {
  if (!(n > 0)) return 0;
  if (n > MAX_LENGTH) throw new DLPackError("overflow", `arange() would make ${n} elements; at most 2^32 - 1`);
  return n;
}

/** A sequence of exact integers (some argument a bigint). */
function bigintSequence(args: ArangeArgs, info: DTypeInfo): AnyTypedArray {
  const big = (v: number | bigint, what: string): bigint => {
    if (typeof v === "bigint") return v;
    if (!isSafeInt(v)) {
      throw new DLPackError("argument", `arange() with bigint arguments takes integer ${what}, got ${shown(v)}`);
    }
    return toBigInt(v);
  };
  const start = big(args.start, "start");
  const stop = big(args.stop, "stop");
  const step = big(args.step, "step");
  const span = stop - start;
  // Ceiling division, exact.
  let n = span / step;
  if (n * step !== span && (span > 0n) === (step > 0n)) n += 1n;
  const length = lengthOf(n > 0n ? NumberCtor(n) : 0);
  const out = new info.array(jsBuffer(length * info.slotBytes, "arange()"));
  const asNumber = info.kind !== "bigint";
  for (let i = 0; i < length; i++) {
    const v = start + toBigInt(i) * step;
    encodeElement(info, asNumber ? NumberCtor(v) : v, out, i);
  }
  return out;
}

/** Nested arrays read once: their shape and their leaves in C order. */
interface NestedValues {
  readonly shape: number[];
  readonly leaves: unknown[];
}

/** Reads nested arrays, each length and element once, refusing ragged nesting. */
export function readNested(value: unknown): NestedValues {
  const shape = slots(MAX_RANK);
  let rank = 0;
  let leafDepth = -1;
  let leaves = objectSlots<unknown>(0);
  let count = 0;
  const walk = (v: unknown, d: number): void => {
    if (!isArray(v)) {
      if (typeof v !== "number" && typeof v !== "bigint" && typeof v !== "boolean") {
        throw new DLPackError(
          "dtype",
          `asarray(): value ${count} is ${shown(v)}; values are numbers, bigints or booleans`,
        );
      }
      if (leafDepth < 0) leafDepth = d;
      if (d !== leafDepth) throw ragged(d, shape, v);
      leaves = grow(leaves, count);
      leaves[count++] = v;
      return;
    }
    if (leafDepth >= 0 && d >= leafDepth) throw ragged(d, shape, v);
    const n: unknown = v.length; // read once
    if (!isSafeInt(n) || n < 0) throw new DLPackError("argument", `asarray(): an array has length ${shown(n)}`);
    if (n > MAX_VALUES) throw tooMany();
    if (d === rank) {
      if (d >= MAX_RANK) throw new DLPackError("rank", `asarray(): nested deeper than ${MAX_RANK} dimensions`);
      shape[rank++] = n;
    } else if (shape[d] !== n) throw ragged(d, shape, v, n);
    for (let i = 0; i < n; i++) walk(v[i], d + 1);
  };
  walk(value, 0);
  if (leafDepth >= 0 && leafDepth !== rank) throw ragged(leafDepth, shape, undefined);
  shape.length = rank;
  leaves.length = count;
  return { shape, leaves };
}

/** The most values `asarray` reads from nested arrays (2^26: beyond that JS arrays are the wrong
 * container, and a Proxy claiming a huge length must not make it loop for hours). */
const MAX_VALUES = 2 ** 26;

function tooMany(): DLPackError {
  return new DLPackError(
    "overflow",
    `asarray(): more than ${MAX_VALUES} values in nested arrays; put them in a TypedArray (asarray of it is zero-copy)`,
  );
}

function grow(leaves: unknown[], count: number): unknown[] {
  if (count < leaves.length) return leaves;
  if (count >= MAX_VALUES) throw tooMany();
  const bigger = objectSlots<unknown>(count < 8 ? 8 : count * 2);
  for (let i = 0; i < count; i++) bigger[i] = leaves[i];
  return bigger;
}

function ragged(d: number, shape: readonly number[], v: unknown, n?: number): DLPackError {
  const found = n !== undefined
    ? `an array of ${n} where the first has ${shape[d]}`
    : isArray(v)
    ? "an array where the first path has a value"
    : `${shown(v)} where the first path has an array`;
  return new DLPackError("shape", `asarray(): ragged nesting: at depth ${d}, ${found}; every row needs one length`);
}

/** numpy's dtype for nested values with none given: bool if all are booleans, int64 if all are
 * integers, else float64. */
export function nestedDType(leaves: readonly unknown[]): DType {
  let bools = 0;
  let floats = false;
  for (let i = 0; i < leaves.length; i++) {
    const v = leaves[i];
    if (typeof v === "boolean") bools++;
    else if (typeof v === "number") floats ||= !isSafeInt(v);
    else if (typeof v !== "bigint") {
      throw new DLPackError("dtype", `asarray(): value ${i} is ${shown(v)}; values are numbers, bigints or booleans`);
    }
  }
  if (bools === leaves.length && bools > 0) return "bool";
  if (bools > 0) throw new DLPackError("dtype", "asarray(): booleans mixed with numbers; pass a dtype");
  return floats ? "float64" : leaves.length === 0 ? "float64" : "int64";
}

/** The leaves as a TypedArray of `info` in the form of `toArray()` (complex: the innermost axis
 * holds the [re, im] pairs, and `shape` loses it). */
export function encodeNested(nested: NestedValues, info: DTypeInfo): { shape: number[]; values: AnyTypedArray } {
  const shape = nested.shape;
  const leaves = nested.leaves;
  if (info.kind === "complex") {
    const last = shape.length - 1;
    if (last < 0 || shape[last] !== 2) {
      throw new DLPackError("shape", `asarray(): ${info.name} values are [re, im] pairs; the innermost arrays need 2`);
    }
    shape.length = last;
    const out = new info.array(jsBuffer(leaves.length * info.slotBytes, "asarray()"));
    for (let k = 0; k < leaves.length / 2; k++) {
      encodeElement(info, [leaves[2 * k], leaves[2 * k + 1]] as never, out, k);
    }
    return { shape, values: out };
  }
  const out = new info.array(jsBuffer(leaves.length * info.slotBytes, "asarray()"));
  for (let k = 0; k < leaves.length; k++) {
    const v = leaves[k];
    encodeElement(info, info.kind === "bigint" && typeof v === "number" ? scalarFor(info, v) : v as Scalar, out, k);
  }
  return { shape, values: out };
}
