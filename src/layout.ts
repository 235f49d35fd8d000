/**
 * Layout arithmetic on the TS side (the native validator does the same for imports): C strides,
 * element counts, reachable offsets and contiguity, with every input checked.
 * @module
 */
import { DLPackError } from "./errors.ts";
import { MAX_RANK } from "./description.ts";

/** Largest element count or byte span a view may have (JS numbers index exactly up to here). */
export const MAX_EXACT = 2 ** 53;

/** Checks a shape argument: an array of at most 64 non-negative safe integers. */
export function checkShape(shape: unknown, what = "shape"): number[] {
  if (!Array.isArray(shape)) {
    throw new DLPackError("shape", `${what} must be an array of integers, got ${describe(shape)}`);
  }
  if (shape.length > MAX_RANK) {
    throw new DLPackError("rank", `${what} has ${shape.length} dimensions; at most ${MAX_RANK} are supported`);
  }
  for (let d = 0; d < shape.length; d++) {
    const e = shape[d];
    if (typeof e !== "number" || !Number.isSafeInteger(e) || e < 0) {
      throw new DLPackError("shape", `${what}[${d}] must be a non-negative integer, got ${describe(e)}`);
    }
  }
  return shape.slice();
}

/** Checks a strides argument against the rank. */
export function checkStrides(strides: unknown, ndim: number): number[] {
  if (!Array.isArray(strides) || strides.length !== ndim) {
    throw new DLPackError("strides", `strides must be an array of ${ndim} integers, got ${describe(strides)}`);
  }
  for (let d = 0; d < ndim; d++) {
    const s = strides[d];
    if (typeof s !== "number" || !Number.isSafeInteger(s)) {
      throw new DLPackError("strides", `strides[${d}] must be an integer, got ${describe(s)}`);
    }
  }
  return strides.slice();
}

/** C-order strides (in elements) of a shape. */
export function cStrides(shape: readonly number[]): number[] {
  const strides = new Array<number>(shape.length);
  let step = 1;
  for (let d = shape.length - 1; d >= 0; d--) {
    strides[d] = step;
    step *= shape[d];
  }
  return strides;
}

/** Element count, refusing counts beyond 2^53. */
export function sizeOf(shape: readonly number[]): number {
  let size = 1;
  for (const e of shape) size *= e;
  if (size > MAX_EXACT) throw new DLPackError("overflow", `element count ${size} exceeds 2^53`);
  return size;
}

/** Lowest and highest element offsets from element 0 ([0, -1] when empty). */
export function reach(shape: readonly number[], strides: readonly number[]): [number, number] {
  let lo = 0;
  let hi = 0;
  for (let d = 0; d < shape.length; d++) {
    if (shape[d] === 0) return [0, -1];
    const r = (shape[d] - 1) * strides[d];
    if (r < 0) lo += r;
    else hi += r;
  }
  if (-lo > MAX_EXACT || hi > MAX_EXACT) throw new DLPackError("overflow", "the strides reach beyond 2^53 elements");
  return [lo, hi];
}

/** Bit 1: C-contiguous, bit 2: F-contiguous (numpy's rules: extent-1 dims are free, empty is both). */
export function layoutOf(shape: readonly number[], strides: readonly number[]): number {
  if (shape.includes(0)) return 3;
  let layout = 0;
  let expected = 1;
  let ok = true;
  for (let d = shape.length - 1; d >= 0; d--) {
    if (shape[d] === 1) continue;
    if (strides[d] !== expected) ok = false;
    expected *= shape[d];
  }
  if (ok) layout |= 1;
  expected = 1;
  ok = true;
  for (let d = 0; d < shape.length; d++) {
    if (shape[d] === 1) continue;
    if (strides[d] !== expected) ok = false;
    expected *= shape[d];
  }
  if (ok) layout |= 2;
  return layout;
}

function describe(value: unknown): string {
  if (typeof value === "bigint") return `bigint ${value}n`;
  if (Array.isArray(value)) return `array of length ${value.length}`;
  return `${typeof value} ${String(value)}`;
}
