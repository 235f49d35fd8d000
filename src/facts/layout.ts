/**
 * Layout arithmetic on the TS side (the native validator does the same for imports): C strides,
 * element counts, reachable offsets and contiguity, with every input checked. Caller arrays are
 * read once per element into fresh arrays, so a Proxy, a getter or a Symbol.species constructor
 * cannot change a value after it was checked.
 * @module
 */
import { DLPackError, shown } from "./errors.ts";
import { MAX_RANK } from "./abi.ts";
import { isArray, isCount, isSafeInt, slots } from "./intrinsics.ts";

/** Largest element count or byte span a view may have (JS numbers index exactly up to here). */
export const MAX_EXACT = 2 ** 53;

/** Reads the length of a caller's array once and checks it is a rank; returns it. */
function rankOf(value: unknown[], what: string): number {
  const n: unknown = value.length;
  if (!isCount(n)) throw new DLPackError("shape", `${what} has an invalid length (${shown(n)})`);
  if (n > MAX_RANK) {
    throw new DLPackError("rank", `${what} has ${n} dimensions; at most ${MAX_RANK} are supported`);
  }
  return n;
}

/** Checks a shape argument and copies it: an array of at most 64 non-negative safe integers. */
export function checkShape(shape: unknown, what = "shape"): number[] {
  return readExtents(shape, what, false) as number[];
}

/**
 * Reads a caller's list of extents once (its length, then each element once) into a fresh array:
 * at most 64 non-negative safe integers, and `null` ("any extent") too where `wildcards`.
 * Refusals are `DLPackError`s ("shape", or "rank" for too many dimensions).
 */
export function readExtents(value: unknown, what: string, wildcards: boolean): (number | null)[] {
  const or = wildcards ? " or null" : "";
  if (!isArray(value)) throw new DLPackError("shape", `${what} must be an array of integers${or}, got ${shown(value)}`);
  const n = rankOf(value, what);
  const out: (number | null)[] = slots(n);
  for (let d = 0; d < n; d++) {
    const e: unknown = value[d];
    if (wildcards && e === null) out[d] = null;
    else if (isCount(e)) out[d] = e;
    else throw new DLPackError("shape", `${what}[${d}] must be a non-negative integer${or}, got ${shown(e)}`);
  }
  return out;
}

/** Checks a strides argument against the rank and copies it. */
export function checkStrides(strides: unknown, ndim: number, unit = "integers"): number[] {
  const what = "strides";
  if (!isArray(strides)) {
    throw new DLPackError("strides", `${what} must be an array of ${ndim} ${unit}, got ${shown(strides)}`);
  }
  const n: unknown = strides.length;
  if (n !== ndim) throw new DLPackError("strides", `${what} must list ${ndim} ${unit}, got ${shown(n)}`);
  const out = slots(ndim);
  for (let d = 0; d < ndim; d++) {
    const s: unknown = strides[d];
    if (!isSafeInt(s)) throw new DLPackError("strides", `${what}[${d}] must be an integer, got ${shown(s)}`);
    out[d] = s;
  }
  return out;
}

/** C-order strides (in elements) of a shape. */
export function cStrides(shape: readonly number[]): number[] {
  const n = shape.length;
  const strides = slots(n);
  let step = 1;
  for (let d = n - 1; d >= 0; d--) {
    strides[d] = step;
    step *= shape[d]!;
  }
  return strides;
}

/** Element count, refusing counts beyond 2^53. */
export function sizeOf(shape: readonly number[]): number {
  let size = 1;
  for (let d = 0; d < shape.length; d++) size *= shape[d]!;
  if (size > MAX_EXACT) throw new DLPackError("overflow", `element count ${size} exceeds 2^53`);
  return size;
}

/** Lowest and highest element offsets from element 0 (`hi < lo` when empty). */
interface Reach {
  readonly lo: number;
  readonly hi: number;
}

const EMPTY_REACH: Reach = { lo: 0, hi: -1 };

/** Lowest and highest element offsets from element 0 ({ lo: 0, hi: -1 } when empty); the strides
 * are as long as the shape. */
export function reach(shape: readonly number[], strides: readonly number[]): Reach {
  let lo = 0;
  let hi = 0;
  for (let d = 0; d < shape.length; d++) {
    const extent = shape[d]!;
    if (extent === 0) return EMPTY_REACH;
    const r = (extent - 1) * strides[d]!;
    if (r < 0) lo += r;
    else hi += r;
  }
  if (-lo > MAX_EXACT || hi > MAX_EXACT) throw new DLPackError("overflow", "the strides reach beyond 2^53 elements");
  return { lo, hi };
}

/**
 * One odometer step in C order: advances `index` (one counter per axis, starting at zeros) to the
 * next element and returns `at`, an element offset, moved by the strides accordingly. Walks every
 * element of a strided layout without a division per element. `index` and `strides` are as long
 * as `shape`.
 */
export function nextOffset(index: number[], shape: readonly number[], strides: readonly number[], at: number): number {
  for (let d = shape.length - 1; d >= 0; d--) {
    if (++index[d]! < shape[d]!) return at + strides[d]!;
    at -= (shape[d]! - 1) * strides[d]!;
    index[d] = 0;
  }
  return at;
}

/** Whether any extent is 0. */
export function hasZero(shape: readonly number[]): boolean {
  for (let d = 0; d < shape.length; d++) if (shape[d] === 0) return true;
  return false;
}

/** Bit 1: C-contiguous, bit 2: F-contiguous (numpy's rules: extent-1 dims are free, empty is both). */
export function layoutOf(shape: readonly number[], strides: readonly number[]): number {
  if (hasZero(shape)) return 3;
  let layout = 0;
  let expected = 1;
  let ok = true;
  for (let d = shape.length - 1; d >= 0; d--) {
    const extent = shape[d]!;
    if (extent === 1) continue;
    if (strides[d] !== expected) ok = false;
    expected *= extent;
  }
  if (ok) layout |= 1;
  expected = 1;
  ok = true;
  for (let d = 0; d < shape.length; d++) {
    const extent = shape[d]!;
    if (extent === 1) continue;
    if (strides[d] !== expected) ok = false;
    expected *= extent;
  }
  if (ok) layout |= 2;
  return layout;
}

/** `[2, 3]`, for messages (no `join`: it is replaceable). */
export function listText(values: readonly (number | null)[]): string {
  let text = "[";
  for (let d = 0; d < values.length; d++) text += (d === 0 ? "" : ", ") + (values[d] === null ? "*" : `${values[d]}`);
  return text + "]";
}
