/**
 * Dtype conversion (`astype`, `copyFrom(src, { cast: true })`): a view's values in C order,
 * converted element by element with numpy's casting rules, into memory of another dtype.
 *
 * The rules, as numpy 2.4 (with ml_dtypes for bfloat16 and the small floats) casts on x86-64:
 * floats to integers truncate toward zero and then wrap modulo 2^bits, through the C conversion
 * numpy uses (int32 for targets up to 32 signed bits, int64 for uint32 and int64, int64 or uint64
 * for uint64); NaN, infinities and values beyond that conversion's range, where numpy's result is
 * undefined (its "invalid value encountered in cast" warning), are refused. Integers to integers
 * wrap. To bool: non-zero is true (NaN too); from bool: 0 or 1. Complex to real keeps the real part
 * and discards the imaginary one (numpy does the same with a ComplexWarning; JS has no warnings);
 * real to complex has imaginary part 0. Floats round to nearest, ties to even, through the
 * existing codecs (bfloat16 through float32, as ml_dtypes does, and so integers into the small
 * floats and anything into float8_e8m0fnu); 64-bit integers otherwise round to the target once
 * (never twice through a float64). NaN and infinities into an integer dtype are refused from every
 * dtype (ml_dtypes' small floats would give 0 for NaN and saturate infinities). Values a small
 * float format cannot hold follow its codec: NaN where the format has no NaN is refused.
 * @module
 */
import { copyStreamOption, DLPackError, optionalBoolean, optionsObject, shown } from "../facts/errors.ts";
import { type AnyTypedArray, type DTypeInfo, dtypeInfo, infoOfTag, type MiniFloatDType } from "../facts/dtypes.ts";
import { listText } from "../facts/layout.ts";
import { copyNumbers, isArray, trunc, typedArrayLength, typedArrayTag } from "../facts/intrinsics.ts";
import { bfloat16ToNumber, decodeMiniFloat, encodeMiniFloat, numberToBfloat16 } from "../facts/scalars.ts";
import { jsBuffer } from "./codec.ts";
import { copyFromArray, copyInto, copyOf, type CopyOptions, refuseWrite } from "./copy.ts";
import { elementsOf, flatten } from "./values.ts";
import type { StreamHandle } from "./streams.ts";
import { allocate, allocateHost, DEFAULT_ALIGNMENT } from "./alloc.ts";
import type { Owned, ViewFacts, ViewState } from "./state.ts";

/** Options of `astype`. */
export interface AstypeOptions {
  /** `false`: the same memory when the dtype is already the one asked for (a new view sharing the
   * owner), refused otherwise. Default `true`: always a new allocation, as numpy's default. */
  readonly copy?: boolean | undefined;
}

/** Options of `copyFrom`: {@link CopyOptions}, and whether a source of another dtype is converted. */
export interface CopyFromOptions extends CopyOptions {
  /** Convert a source of another dtype with numpy's casting rules (as `astype`): a view, or a
   * TypedArray other than the form of `toArray()`, taken as values of its natural dtype (a
   * Uint16Array into a bfloat16 view is still its bits). Without it a different dtype is refused.
   * Default false. */
  readonly cast?: boolean | undefined;
}

// Captured at load: a caller who replaces them later changes nothing here.
const BigIntCtor = BigInt;
const NumberCtor = Number;
const asIntN = BigInt.asIntN;
const asUintN = BigInt.asUintN;
const fround = Math.fround;

const TWO_31 = 2 ** 31;
const TWO_63 = 2 ** 63;
const TWO_64 = 2 ** 64;

/** `view.astype(dtype)` for a dtype other than the view's: a new C-contiguous allocation holding
 * the converted values, on the view's CUDA device for device memory (converted on the host between
 * two copies), else in host memory. Refused, before anything is allocated, for a value numpy casts
 * to an undefined result. */
function castCopy(view: ViewState, target: DTypeInfo): Owned {
  const f = view.facts;
  const values = convert(f.info, elementsOf(view), target, `astype(${target.name})`);
  const device = f.device;
  const out = device.type === "cuda"
    ? allocate(copyNumbers(f.shape), target, { kind: 0, id: device.id }, DEFAULT_ALIGNMENT, false)
    : allocateHost(f.shape, target);
  copyFromArray(stateOfOwned(out), values, target.tag, undefined);
  return out;
}

/** `dst.copyFrom(src, { cast: true })`: `src`'s values converted to `dst`'s dtype (same shape). */
function castInto(dst: ViewState, src: ViewState, stream: StreamHandle | undefined): void {
  const d = dst.facts;
  const s = src.facts;
  if (!sameShape(d.shape, s.shape)) {
    throw new DLPackError(
      "shape",
      `copyFrom: the source has shape ${listText(s.shape)}, this view ${listText(d.shape)}`,
    );
  }
  refuseWrite(dst.access, "copyFrom");
  const values = convert(s.info, elementsOf(src), d.info, `copyFrom(${s.info.name} -> ${d.info.name})`);
  copyFromArray(dst, values, d.info.tag, stream);
}

/** `dst.copyFrom(array, { cast: true })`: a TypedArray of another type than `dst`'s `toArray()`
 * form, its values (of its natural dtype, C order, one per element) converted to `dst`'s dtype. */
function castArrayInto(dst: ViewState, array: unknown, stream: StreamHandle | undefined): void {
  const tag = typedArrayTag(array);
  const info = tag === undefined ? undefined : infoOfTag(tag);
  if (info === undefined) {
    throw new DLPackError("argument", `copyFrom with cast takes a BufferView or a TypedArray, got ${shown(array)}`);
  }
  const d = dst.facts;
  const values = array as AnyTypedArray;
  const length = typedArrayLength(values);
  if (length !== d.size) {
    throw new DLPackError(
      "shape",
      `copyFrom: the ${info.tag} has ${length} elements; this view of shape ${listText(d.shape)} needs ${d.size}`,
    );
  }
  refuseWrite(dst.access, "copyFrom");
  copyFromArray(dst, convert(info, values, d.info, `copyFrom(${info.tag} -> ${d.info.name})`), d.info.tag, stream);
}

/** How one element is read: a number (the real part of a complex), a bigint, and for complex the
 * imaginary part beside it. */
type Reader = (flat: AnyTypedArray, k: number) => number | bigint;

function readerOf(info: DTypeInfo): Reader {
  switch (info.kind) {
    case "int":
    case "float":
    case "bigint":
      return (flat, k) => flat[k]!;
    case "bool":
      return (flat, k) => flat[k] === 0 ? 0 : 1;
    case "bfloat16":
      return (flat, k) => bfloat16ToNumber(flat[k] as number);
    case "minifloat": {
      const name = info.name as MiniFloatDType;
      return (flat, k) => decodeMiniFloat(name, flat[k] as number);
    }
    case "complex":
      return (flat, k) => flat[2 * k]!;
  }
}

/**
 * `flat` (the elements of a `from` view in C order, in the form of `toArray()`) converted to `to`'s
 * dtype, in a new array of that form. `what` names the call for refusals.
 */
function convert(from: DTypeInfo, flat: AnyTypedArray, to: DTypeInfo, what: string): AnyTypedArray {
  const n = typedArrayLength(flat) / from.slots;
  const out = new to.array(jsBuffer(n * to.slots * to.slotBytes, what));
  const read = readerOf(from);
  const complexIn = from.kind === "complex";
  switch (to.kind) {
    case "bool":
      for (let k = 0; k < n; k++) {
        const v = read(flat, k);
        // NaN is non-zero, so true, as in numpy; a complex value is true when either part is.
        const nonZero = typeof v === "bigint" ? v !== 0n : v !== 0;
        out[k] = nonZero || (complexIn && flat[2 * k + 1] !== 0) ? 1 : 0;
      }
      return out;
    case "complex":
      for (let k = 0; k < n; k++) {
        out[2 * k] = toNumber(read(flat, k), to);
        out[2 * k + 1] = complexIn ? flat[2 * k + 1] as number : 0;
      }
      return out;
    case "int":
    case "bigint": {
      if (from.kind === "int" || from.kind === "bool") {
        // Integers wrap: integer TypedArray stores reduce modulo 2^bits.
        for (let k = 0; k < n; k++) out[k] = to.bits === 64 ? BigIntCtor(flat[k]!) : flat[k]!;
        return out;
      }
      for (let k = 0; k < n; k++) out[k] = toInteger(read(flat, k), to, k, what);
      return out;
    }
    case "float":
      for (let k = 0; k < n; k++) out[k] = toNumber(read(flat, k), to);
      return out;
    case "bfloat16":
      for (let k = 0; k < n; k++) out[k] = numberToBfloat16(toNumber(read(flat, k), to));
      return out;
    case "minifloat": {
      const name = to.name as MiniFloatDType;
      // ml_dtypes converts integers, and every value into the exponent-only e8m0, through float32.
      const viaFloat32 = name === "float8_e8m0fnu" || from.kind === "int" || from.kind === "bigint";
      for (let k = 0; k < n; k++) {
        const v = toNumber(read(flat, k), to);
        out[k] = encodeMiniFloat(name, viaFloat32 ? fround(v) : v);
      }
      return out;
    }
  }
}

/** A value as the number a float target rounds from: bigints beyond 2^53 rounded to odd at 53
 * bits, so that rounding that number to any narrower format gives the once-rounded result
 * (float64 takes the correctly rounded conversion itself). */
function toNumber(v: number | bigint, to: DTypeInfo): number {
  if (typeof v === "number") return v;
  if (to.bits === 64 && to.kind === "float" || to.kind === "complex" && to.bits === 128) return NumberCtor(v);
  return roundToOdd(v);
}

/** A bigint as a float64 rounded to odd at 53 significant bits (exact below 2^53). */
function roundToOdd(v: bigint): number {
  const negative = v < 0n;
  let m = negative ? -v : v;
  if (m < 2n ** 53n) return NumberCtor(v);
  let shift = 0n;
  let sticky = 0n;
  while (m >= 2n ** 53n) {
    sticky |= m & 1n;
    m >>= 1n;
    shift++;
  }
  m |= sticky;
  const value = NumberCtor(m) * 2 ** NumberCtor(shift);
  return negative ? -value : value;
}

/** A bigint or a float value as an element of an integer dtype: wrapped, or numpy's truncation
 * and wrap, refused where its result is undefined. */
function toInteger(v: number | bigint, to: DTypeInfo, k: number, what: string): number | bigint {
  const bits = to.bits;
  const signed = to.dl.code === 0;
  if (typeof v === "bigint") {
    if (bits === 64) return v; // the BigInt64Array store wraps
    return NumberCtor(signed ? asIntN(bits, v) : asUintN(bits, v));
  }
  if (v % 1 === 0 && v >= -TWO_31 && v < TWO_31) return bits === 64 ? BigIntCtor(v) : v;
  const t = trunc(v);
  // The C conversion numpy goes through for this target, and its range.
  const lo = bits <= 32 && !(bits === 32 && !signed) ? -TWO_31 : -TWO_63;
  const hi = bits <= 32 && !(bits === 32 && !signed) ? TWO_31 : bits === 64 && !signed ? TWO_64 : TWO_63;
  if (!(t >= lo && t < hi)) {
    throw new DLPackError(
      "dtype",
      `${what}: element ${k} is ${v}, which has no ${to.name} value (numpy's cast of NaN, an infinity or a ` +
        `value beyond ${lo === -TWO_31 ? "int32" : "int64"} to ${to.name} is undefined)`,
    );
  }
  // Integer TypedArray stores wrap modulo 2^bits.
  return bits === 64 ? BigIntCtor(t) : t;
}

function sameShape(a: readonly number[], b: readonly number[]): boolean {
  if (a.length !== b.length) return false;
  for (let d = 0; d < a.length; d++) if (a[d] !== b[d]) return false;
  return true;
}

/** The state of memory just made (no view holds it yet: it is its own key). */
function stateOfOwned(owned: Owned): ViewState {
  return { owner: owned.owner, address: owned.address, facts: owned.facts, access: owned.access, key: owned };
}

/** `astype`'s arguments, read before the view's state is taken: the dtype and the `copy` option. */
export function astypeArguments(dtype: unknown, opts: unknown): { info: DTypeInfo; copy: boolean | undefined } {
  // dtypeInfo refuses what is no dtype name, whatever its type.
  const info = dtypeInfo(dtype as string);
  const copyOption: unknown = optionsObject(opts as AstypeOptions | undefined, "astype() options").copy;
  return { info, copy: optionalBoolean(copyOption, "astype()'s copy option") };
}

/** `view.astype(info)`: a new allocation with the converted values (a plain copy for the view's own
 * dtype), or undefined for `copy: false` and the view's own dtype, which is the view's memory
 * itself (the caller makes a view of it); `copy: false` with another dtype is refused. */
export function astyped(view: ViewState, info: DTypeInfo, copy: boolean | undefined): Owned | undefined {
  const own = view.facts.info;
  if (info === own) return copy === false ? undefined : copyOf(view);
  if (copy === false) {
    throw new DLPackError(
      "dtype",
      `astype(${info.name}, { copy: false }): this view is ${own.name}, and converting needs a copy`,
    );
  }
  return castCopy(view, info);
}

/** `copyFrom`'s options, read once: the stream and whether a source of another dtype is converted. */
interface CopyFromRead {
  readonly stream: StreamHandle | undefined;
  readonly cast: boolean;
}

/** Reads `copyFrom`'s options (before either view's state is taken: a getter may dispose either). */
export function copyFromOptions(opts: unknown): CopyFromRead {
  const stream = copyStreamOption(opts) as StreamHandle | undefined;
  const cast = opts === undefined || opts === null
    ? undefined
    : optionalBoolean((opts as { cast?: unknown }).cast, "copyFrom()'s cast option");
  return { stream, cast: cast === true };
}

/** `copyFrom` of another view: converted when `cast` is set and the dtypes differ, else copied as
 * it is (a dtype mismatch refused there). */
export function copyViewInto(dst: ViewState, src: ViewState, o: CopyFromRead): void {
  if (o.cast && src.facts.info !== dst.facts.info) castInto(dst, src, o.stream);
  else copyInto(dst, src, o.stream);
}

/** A JS source of `copyFrom`, read into values before any state is taken (the elements of nested
 * arrays may be getters): nested arrays flattened in C order, a TypedArray as it is. */
interface ArraySource {
  readonly values: unknown;
  readonly tag: string;
  /** A TypedArray of another type than the form of `toArray()`, with `cast`: converted. */
  readonly convert: boolean;
}

/** Reads `copyFrom`'s JS source for a destination with `facts` (refused when it is no TypedArray
 * and no array, unless `cast` converts, whose checks then refuse it in their own words). */
export function arraySource(facts: ViewFacts, src: unknown, cast: boolean): ArraySource {
  const own = facts.info.tag;
  if (isArray(src)) return { values: flatten(facts, src), tag: own, convert: false };
  const tag = typedArrayTag(src);
  if (cast && tag !== own) return { values: src, tag: tag ?? "", convert: true };
  if (tag === undefined) {
    throw new DLPackError(
      "argument",
      `copyFrom takes a BufferView, a TypedArray or nested arrays of values, got ${shown(src)}`,
    );
  }
  return { values: src, tag, convert: false };
}

/** `copyFrom` of a JS source {@link arraySource} read. */
export function copyArrayInto(dst: ViewState, src: ArraySource, stream: StreamHandle | undefined): void {
  if (src.convert) castArrayInto(dst, src.values, stream);
  else copyFromArray(dst, src.values as AnyTypedArray, src.tag, stream);
}
