/**
 * Shape arithmetic of the view operations (`slice`, `at`, `permute`, `reshape`, `broadcastTo`,
 * `squeeze`, `expandDims`): pure functions from a shape and strides (in elements) and the caller's
 * arguments to a new shape, new strides and the element offset of the new element 0. Nothing here
 * touches memory. Every caller value is read once, into fresh arrays, and checked: integers, in
 * range, at most `MAX_RANK` dimensions, element counts within 2^53.
 * @module
 */
import { DLPackError, shown, withArticle } from "./errors.ts";
import { MAX_RANK } from "./abi.ts";
import { floor, isArray, isSafeInt, quote, slots } from "./intrinsics.ts";
import { listText, MAX_EXACT } from "./layout.ts";

/** A layout derived from another: extents, strides (elements) and where element 0 moved to.
 * Every function here takes and makes strides as long as their shape. */
export interface Strided {
  readonly shape: number[];
  readonly strides: number[];
  /** Elements from the source's element 0 to the new element 0. */
  readonly offset: number;
}

/** A range along one axis; omitted or null fields take Python's defaults. */
export interface Range {
  /** First index (negative counts from the end); clamped like Python's slices. */
  readonly start?: number | null | undefined;
  /** One past the last index (negative counts from the end); clamped. */
  readonly stop?: number | null | undefined;
  /** Step, not 0; negative walks backwards. Default 1. */
  readonly step?: number | null | undefined;
}

/**
 * One argument of `slice()`: an integer picks one index and drops the axis (negative counts from
 * the end); `null` keeps the whole axis (numpy's `:`); a string in numpy's slice syntax
 * (`"1:5"`, `"::2"`, `"::-1"`) or a {@link Range} selects a range; `"..."` stands for as many
 * whole axes as needed.
 */
export type SliceItem = number | null | string | Range;

const ELLIPSIS = "...";
// Prototype-less: only the ten digits are found.
const DIGITS = {
  __proto__: null,
  "0": 0,
  "1": 1,
  "2": 2,
  "3": 3,
  "4": 4,
  "5": 5,
  "6": 6,
  "7": 7,
  "8": 8,
  "9": 9,
} as unknown as Readonly<Record<string, number | undefined>>;

function argument(message: string): DLPackError {
  return new DLPackError("argument", message);
}

/** An integer argument (index, axis, step, bound), else "argument". */
function integer(value: unknown, what: string): number {
  if (!isSafeInt(value)) throw argument(`${what} must be an integer, got ${shown(value)}`);
  return value;
}

/** An index into an axis of extent `n` (negative from the end), else "shape". */
function index(value: unknown, n: number, axis: number): number {
  const i = integer(value, `index for axis ${axis}`);
  const at = i < 0 ? i + n : i;
  if (at < 0 || at >= n) throw new DLPackError("shape", `index ${i} is out of range for axis ${axis} of extent ${n}`);
  return at;
}

/** An axis of a rank-`ndim` layout (negative from the end), else "shape". */
export function axisOf(value: unknown, ndim: number, what = "axis"): number {
  const a = integer(value, what);
  const at = a < 0 ? a + ndim : a;
  if (at < 0 || at >= ndim) throw new DLPackError("shape", `${what} ${a} is out of range for ${ndim} dimensions`);
  return at;
}

/** The list a varargs method got: the one array argument (`reshape([2, 3])`), or the arguments
 * themselves (`reshape(2, 3)`), a fresh array the engine reads once. */
export function listArgument(args: readonly unknown[]): unknown {
  return args.length === 1 && isArray(args[0]) ? args[0] : args;
}

/** Reads a caller's array of integers once (length first, at most `MAX_RANK`), into a fresh array. */
export function integerList(value: unknown, what: string): number[] {
  if (!isArray(value)) throw argument(`${what} must be an array of integers, got ${shown(value)}`);
  const n: unknown = value.length;
  if (!isSafeInt(n) || n < 0) throw argument(`${what} has an invalid length (${shown(n)})`);
  if (n > MAX_RANK) throw new DLPackError("rank", `${what} has ${n} entries; at most ${MAX_RANK} dimensions`);
  const out = slots(n);
  for (let i = 0; i < n; i++) out[i] = integer(value[i], `${what}[${i}]`);
  return out;
}

function checkedRank(n: number): void {
  if (n > MAX_RANK) throw new DLPackError("rank", `the result would have ${n} dimensions; at most ${MAX_RANK}`);
}

/** Python's slice bounds on an axis of extent `n`: [start, step, length]. */
export function rangeOf(start: number | null, stop: number | null, step: number, n: number): [number, number, number] {
  let lo: number;
  let hi: number;
  if (step > 0) {
    lo = start === null ? 0 : start < 0 ? (start + n < 0 ? 0 : start + n) : start > n ? n : start;
    hi = stop === null ? n : stop < 0 ? (stop + n < 0 ? 0 : stop + n) : stop > n ? n : stop;
    return [lo, step, hi > lo ? floor((hi - lo - 1) / step) + 1 : 0];
  }
  lo = start === null ? n - 1 : start < 0 ? (start + n < 0 ? -1 : start + n) : start >= n ? n - 1 : start;
  hi = stop === null ? -1 : stop < 0 ? (stop + n < 0 ? -1 : stop + n) : stop >= n ? n - 1 : stop;
  return [lo, step, lo > hi ? floor((lo - hi - 1) / -step) + 1 : 0];
}

/** The first `n` elements of `values`, as a fresh array of own elements. */
function head(values: readonly number[], n: number): number[] {
  const out = slots(n);
  for (let i = 0; i < n; i++) out[i] = values[i]!;
  return out;
}

/** A bound of a slice string (`text[from..to)`): empty is null, else an integer in decimal. Parsed
 * by hand: no String or RegExp method a caller can replace, and no `0x10`, ` 1` or `1e3`. */
function bound(text: string, from: number, to: number): number | null {
  if (from === to) return null;
  let at = from;
  const sign = text[at] === "-" ? -1 : 1;
  if (text[at] === "-" || text[at] === "+") at++;
  if (at === to) throw argument(`slice ${quote(text)}: a sign without digits`);
  let value = 0;
  for (; at < to; at++) {
    const char = text[at]!;
    const digit: number | undefined = DIGITS[char];
    if (digit === undefined) throw argument(`slice ${quote(text)}: ${quote(char)} is no digit`);
    value = value * 10 + digit;
  }
  return integer(sign * value, `slice ${quote(text)}`);
}

/** A slice string: "i" (an index), "start:stop" or "start:stop:step". */
function parseText(text: string, axis: number): [number | null, number | null, number] | number {
  const n = text.length;
  let first = -1;
  let second = -1;
  for (let i = 0; i < n; i++) {
    if (text[i] !== ":") continue;
    if (first < 0) first = i;
    else if (second < 0) second = i;
    else throw argument(`slice ${quote(text)} has more than two colons`);
  }
  if (first < 0) return integer(bound(text, 0, n), `index for axis ${axis}`);
  const stopEnd = second < 0 ? n : second;
  const step = second < 0 ? null : bound(text, second + 1, n);
  if (step === 0) throw argument(`slice ${quote(text)}: the step must not be 0`);
  return [bound(text, 0, first), bound(text, first + 1, stopEnd), step ?? 1];
}

/** A slice item as [start, stop, step] (nulls for defaults), or a number for a single index. */
function parseItem(item: unknown, axis: number): [number | null, number | null, number] | number {
  if (typeof item === "number") return integer(item, `index for axis ${axis}`);
  if (item === null || item === undefined) return [null, null, 1];
  if (typeof item === "string") return parseText(item, axis);
  if (typeof item !== "object" || isArray(item)) {
    throw argument(
      `slice() takes integers, null, "start:stop:step" strings or { start, stop, step }, got ${shown(item)}`,
    );
  }
  // Each field read once.
  const r = item as { start?: unknown; stop?: unknown; step?: unknown };
  const start: unknown = r.start;
  const stop: unknown = r.stop;
  const step: unknown = r.step;
  const s = step === undefined || step === null ? 1 : integer(step, `step for axis ${axis}`);
  if (s === 0) throw argument(`the step for axis ${axis} must not be 0`);
  return [
    start === undefined || start === null ? null : integer(start, `start for axis ${axis}`),
    stop === undefined || stop === null ? null : integer(stop, `stop for axis ${axis}`),
    s,
  ];
}

/** `slice(...items)`: numpy's basic indexing (integers drop their axis, ranges keep it). */
export function sliceLayout(shape: readonly number[], strides: readonly number[], items: readonly unknown[]): Strided {
  const ndim = shape.length;
  const count = items.length;
  let ellipsis = -1;
  for (let k = 0; k < count; k++) {
    if (items[k] !== ELLIPSIS) continue;
    if (ellipsis >= 0) throw argument(`slice() takes at most one "..."`);
    ellipsis = k;
  }
  const given = ellipsis >= 0 ? count - 1 : count;
  if (given > ndim) {
    throw new DLPackError(
      "shape",
      `slice() got ${given} items for ${withArticle(`${ndim}-d`)} view of shape ${listText(shape)}`,
    );
  }
  const outShape = slots(ndim);
  const outStrides = slots(ndim);
  let out = 0;
  let offset = 0;
  let axis = 0;
  for (let k = 0; k < count || axis < ndim; k++) {
    if (k === ellipsis || k >= count) {
      // Whole axes: the ellipsis stands for ndim - given of them, and trailing axes are whole too.
      const whole = k >= count ? ndim - axis : ndim - given;
      for (let w = 0; w < whole; w++, axis++, out++) {
        outShape[out] = shape[axis]!;
        outStrides[out] = strides[axis]!;
      }
      if (k >= count) break;
      continue;
    }
    // Below ndim: at most `given` items are not the ellipsis.
    const extent = shape[axis]!;
    const stride = strides[axis]!;
    const parsed = parseItem(items[k], axis);
    if (typeof parsed === "number") offset += index(parsed, extent, axis) * stride;
    else {
      const [lo, step, length] = rangeOf(parsed[0], parsed[1], parsed[2], extent);
      if (length > 0) offset += lo * stride;
      outShape[out] = length;
      outStrides[out++] = stride * step;
    }
    axis++;
  }
  return { shape: head(outShape, out), strides: head(outStrides, out), offset };
}

/** `at(...indices)`: integer indices on the leading axes (negative from the end). */
export function atLayout(shape: readonly number[], strides: readonly number[], indices: readonly unknown[]): Strided {
  const ndim = shape.length;
  const count = indices.length;
  if (count > ndim) throw new DLPackError("shape", `at() got ${count} indices for ${withArticle(`${ndim}-d`)} view`);
  let offset = 0;
  for (let d = 0; d < count; d++) offset += index(indices[d], shape[d]!, d) * strides[d]!;
  const outShape = slots(ndim - count);
  const outStrides = slots(ndim - count);
  for (let d = count; d < ndim; d++) {
    outShape[d - count] = shape[d]!;
    outStrides[d - count] = strides[d]!;
  }
  return { shape: outShape, strides: outStrides, offset };
}

/** `permute(axes)`: the axes in a new order (each exactly once; negative from the end). */
export function permuteLayout(shape: readonly number[], strides: readonly number[], axes: unknown): Strided {
  const ndim = shape.length;
  const order = integerList(axes, "axes");
  if (order.length !== ndim) {
    throw new DLPackError(
      "shape",
      `permute() needs ${ndim} axes for ${withArticle(`${ndim}-d`)} view, got ${order.length}`,
    );
  }
  const seen = slots(ndim);
  const outShape = slots(ndim);
  const outStrides = slots(ndim);
  for (let d = 0; d < ndim; d++) {
    const a = axisOf(order[d], ndim);
    if (seen[a] !== 0) throw argument(`permute(): axis ${order[d]} appears twice in ${listText(order)}`);
    seen[a] = 1;
    outShape[d] = shape[a]!;
    outStrides[d] = strides[a]!;
  }
  return { shape: outShape, strides: outStrides, offset: 0 };
}

/** `transpose()`: the axes reversed (numpy's `.T`). */
export function transposeLayout(shape: readonly number[], strides: readonly number[]): Strided {
  const ndim = shape.length;
  const outShape = slots(ndim);
  const outStrides = slots(ndim);
  for (let d = 0; d < ndim; d++) {
    outShape[d] = shape[ndim - 1 - d]!;
    outStrides[d] = strides[ndim - 1 - d]!;
  }
  return { shape: outShape, strides: outStrides, offset: 0 };
}

/** The new shape of a reshape: integers, at most one -1 (inferred), the same element count. */
export function reshapeTarget(shape: readonly number[], target: unknown): number[] {
  const out = integerList(target, "shape");
  let size = 1;
  for (let d = 0; d < shape.length; d++) size *= shape[d]!;
  let known = 1;
  let infer = -1;
  for (let d = 0; d < out.length; d++) {
    const extent = out[d]!;
    if (extent === -1) {
      if (infer >= 0) throw new DLPackError("shape", `reshape(): only one extent may be -1, got ${listText(out)}`);
      infer = d;
    } else if (extent < 0) throw new DLPackError("shape", `reshape(): extent ${extent} is negative`);
    else known *= extent;
  }
  if (known > MAX_EXACT) throw new DLPackError("overflow", `reshape(): ${listText(out)} holds more than 2^53 elements`);
  if (infer >= 0) {
    if (known === 0 || size % known !== 0) {
      throw new DLPackError("shape", `reshape(): cannot infer the -1 in ${listText(out)} for ${size} elements`);
    }
    out[infer] = size / known;
    known = size;
  }
  if (known !== size) {
    throw new DLPackError(
      "shape",
      `reshape(): ${listText(out)} holds ${known} elements, the view of shape ${listText(shape)} has ${size}`,
    );
  }
  return out;
}

/**
 * `reshape(shape)` without copying (numpy's rule: runs of old axes that are contiguous among
 * themselves may be split and merged), or undefined when the strides do not allow it.
 */
export function reshapeLayout(
  shape: readonly number[],
  strides: readonly number[],
  target: readonly number[],
): Strided | undefined {
  const newShape = slots(target.length);
  for (let d = 0; d < target.length; d++) newShape[d] = target[d]!;
  const newStrides = slots(target.length);
  let size = 1;
  for (let d = 0; d < shape.length; d++) size *= shape[d]!;
  if (size === 0) {
    // Nothing to address: C strides over the new shape.
    for (let d = target.length - 1, step = 1; d >= 0; d--) {
      newStrides[d] = step;
      const extent = target[d]!;
      step *= extent === 0 ? 1 : extent;
    }
    return { shape: newShape, strides: newStrides, offset: 0 };
  }
  // Extent-1 axes carry no stride information.
  const oldDims = slots(shape.length);
  const oldStrides = slots(shape.length);
  let oldN = 0;
  for (let d = 0; d < shape.length; d++) {
    if (shape[d] === 1) continue;
    oldDims[oldN] = shape[d]!;
    oldStrides[oldN++] = strides[d]!;
  }
  const newN = newShape.length;
  let oi = 0;
  let oj = 1;
  let ni = 0;
  let nj = 1;
  // Both shapes hold `size` elements, so each run of axes ends within both lists: every index
  // below stays under newN and oldN.
  while (ni < newN && oi < oldN) {
    let np = newShape[ni]!;
    let op = oldDims[oi]!;
    while (np !== op) {
      if (np < op) np *= newShape[nj++]!;
      else op *= oldDims[oj++]!;
    }
    for (let ok = oi; ok < oj - 1; ok++) {
      if (oldStrides[ok] !== oldDims[ok + 1]! * oldStrides[ok + 1]!) return undefined;
    }
    newStrides[nj - 1] = oldStrides[oj - 1]!;
    for (let nk = nj - 1; nk > ni; nk--) newStrides[nk - 1] = newStrides[nk]! * newShape[nk]!;
    ni = nj++;
    oi = oj++;
  }
  const last = ni >= 1 ? newStrides[ni - 1]! : 1;
  for (let nk = ni; nk < newN; nk++) newStrides[nk] = last;
  return { shape: newShape, strides: newStrides, offset: 0 };
}

/** `broadcastTo(shape)`: numpy's rules (trailing axes line up; an extent 1 repeats with stride 0). */
export function broadcastLayout(shape: readonly number[], strides: readonly number[], target: unknown): Strided {
  const out = integerList(target, "shape");
  const n = out.length;
  const ndim = shape.length;
  if (n < ndim) {
    throw new DLPackError("shape", `cannot broadcast shape ${listText(shape)} to fewer dimensions: ${listText(out)}`);
  }
  const outStrides = slots(n);
  let size = 1;
  for (let d = 0; d < n; d++) {
    const extent = out[d]!;
    if (extent < 0) throw new DLPackError("shape", `broadcastTo(): extent ${extent} is negative`);
    size *= extent;
    const from = d - (n - ndim);
    if (from < 0) continue; // a new leading axis: stride 0
    if (shape[from] === extent) outStrides[d] = strides[from]!;
    else if (shape[from] !== 1) {
      throw new DLPackError("shape", `cannot broadcast shape ${listText(shape)} to ${listText(out)}`);
    }
  }
  if (size > MAX_EXACT) {
    throw new DLPackError("overflow", `broadcastTo(): ${listText(out)} holds more than 2^53 elements`);
  }
  return { shape: out, strides: outStrides, offset: 0 };
}

/** `squeeze(axis?)`: drops extent-1 axes (all of them, or the given axis or axes, which must be 1). */
export function squeezeLayout(shape: readonly number[], strides: readonly number[], axis: unknown): Strided {
  const ndim = shape.length;
  const drop = slots(ndim);
  if (axis === undefined || axis === null) {
    for (let d = 0; d < ndim; d++) drop[d] = shape[d] === 1 ? 1 : 0;
  } else {
    const axes = typeof axis === "number" ? [integer(axis, "axis")] : integerList(axis, "axis");
    for (let k = 0; k < axes.length; k++) {
      const a = axisOf(axes[k], ndim);
      if (drop[a] !== 0) throw argument(`squeeze(): axis ${axes[k]} is given twice`);
      if (shape[a] !== 1) throw new DLPackError("shape", `squeeze(): axis ${axes[k]} has extent ${shape[a]}, not 1`);
      drop[a] = 1;
    }
  }
  const outShape = slots(ndim);
  const outStrides = slots(ndim);
  let out = 0;
  for (let d = 0; d < ndim; d++) {
    if (drop[d] !== 0) continue;
    outShape[out] = shape[d]!;
    outStrides[out++] = strides[d]!;
  }
  return { shape: head(outShape, out), strides: head(outStrides, out), offset: 0 };
}

/** `expandDims(axis)`: a new extent-1 axis at `axis` (in the result; negative from the end). */
export function expandLayout(shape: readonly number[], strides: readonly number[], axis: unknown): Strided {
  const ndim = shape.length;
  checkedRank(ndim + 1);
  const a = axisOf(axis === undefined ? 0 : axis, ndim + 1);
  const outShape = slots(ndim + 1);
  const outStrides = slots(ndim + 1);
  for (let d = 0, from = 0; d <= ndim; d++) {
    if (d === a) {
      outShape[d] = 1;
      // Any stride serves an extent-1 axis; this one keeps contiguous layouts contiguous.
      outStrides[d] = from < ndim ? strides[from]! * shape[from]! : 1;
      continue;
    }
    // d runs to ndim and skips one index, so from stays below ndim.
    outShape[d] = shape[from]!;
    outStrides[d] = strides[from]!;
    from++;
  }
  return { shape: outShape, strides: outStrides, offset: 0 };
}
