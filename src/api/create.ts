/**
 * numpy's constructors and joins: `ones`, `full`, `arange`, `asarray`, `zerosLike`, `emptyLike`,
 * `onesLike`, `concat`, `stack`. Each makes a new library allocation (but `asarray` of a TypedArray
 * or a view, which are zero-copy) and writes it through the copy engine.
 * @module
 */
import { DLPackError, shown, withArticle } from "../facts/errors.ts";
import {
  type AnyTypedArray,
  type DType,
  type DTypeInfo,
  dtypeInfo,
  type DTypeOfArray,
  dtypeOfTag,
  type Scalar,
  type ScalarOf,
} from "../facts/dtypes.ts";
import { isArray, isSafeInt, objectSlots, typedArrayLength, typedArrayTag } from "../facts/intrinsics.ts";
import { releaseDeferred } from "../native/journal.ts";
import {
  arangeArgs,
  arangeDType,
  arangeValues,
  defaultDType,
  encodeNested,
  nestedDType,
  readNested,
  scalarFor,
} from "../engines/create.ts";
import { concatenated, stacked } from "../engines/join.ts";
import { copyFromArray } from "../engines/copy.ts";
import { encodeOne, fill } from "../engines/values.ts";
import { sliced } from "../engines/derive.ts";
import type { ViewState } from "../engines/state.ts";
import { type BufferView, derive, disposeView, isBufferView, newView, stateOf, type TypedView } from "../view/view.ts";
import type { Plus1 } from "../view/types.ts";
import { allocateView, type AllocOptions } from "./alloc.ts";
import { fromArray } from "./from_array.ts";

/** The view of a new allocation of `shape` and `info` written by `write`, disposed if it throws. */
function written(
  shape: readonly number[],
  info: DTypeInfo,
  opts: AllocOptions | undefined,
  write: (state: ViewState) => void,
): BufferView {
  const view = allocateView(shape, info.name, opts, false);
  try {
    write(stateOf(view));
  } catch (error) {
    disposeView(view);
    throw error;
  }
  return view;
}

/** A new allocation of `shape` with every element `value` (checked first). */
function filled(shape: readonly number[], info: DTypeInfo, value: Scalar, opts: AllocOptions | undefined): BufferView {
  releaseDeferred();
  const one = encodeOne(info, scalarFor(info, value));
  return written(shape, info, opts, (state) => fill(state, one));
}

/** A new allocation holding `values` (the form of `toArray()`) under `shape`, on the host. */
function holding(shape: readonly number[], info: DTypeInfo, values: AnyTypedArray): BufferView {
  return written(shape, info, undefined, (state) => copyFromArray(state, values, info.tag, undefined));
}

/** numpy's `ones(shape, dtype)`: a new C-contiguous allocation of ones (default float64, as
 * numpy; `true` for bool, `1n` for 64-bit integers, `[1, 0]` for complex). `opts` as `zeros`. */
export function ones<const S extends readonly number[], D extends DType = "float64">(
  shape: S,
  dtype?: D,
  opts?: AllocOptions,
): TypedView<D, S["length"]> {
  const info = dtypeInfo(dtype === undefined ? "float64" : dtype);
  const one: Scalar = info.kind === "bool" ? true : info.kind === "complex" ? [1, 0] : 1;
  return filled(shape, info, one, opts) as TypedView<D, S["length"]>;
}

/** numpy's `full(shape, value, dtype)`: every element `value`. Without a dtype, numpy's choice:
 * bool for a boolean, int64 for an integer (a bigint or an integral number), float64 for another
 * number, complex128 for `[re, im]`. A 64-bit integer dtype takes integral numbers too. */
export function full<const S extends readonly number[], D extends DType>(
  shape: S,
  value: ScalarOf<D> | number,
  dtype: D,
  opts?: AllocOptions,
): TypedView<D, S["length"]>;
/** {@link full} with numpy's default dtype for `value`. */
export function full<const S extends readonly number[]>(shape: S, value: Scalar): TypedView<DType, S["length"]>;
export function full(shape: readonly number[], value: Scalar, dtype?: DType, opts?: AllocOptions): BufferView {
  const info = dtypeInfo(dtype === undefined ? defaultDType(value) : dtype);
  return filled(shape, info, value, opts);
}

/**
 * numpy's `arange`: `start, start + step, ...` below `stop` (above it for a negative step), with
 * numpy's length `ceil((stop - start) / step)` (none when that is not positive) and numpy's values
 * (`start + i * delta`, where delta is the stored second element minus the first, in the dtype's
 * precision). One number is `stop` (from 0). A dtype may follow any of the numbers; without one,
 * numpy's choice: int64 when every argument is an integer (a bigint or an integral number), float64
 * otherwise. Bigint arguments are exact. Host memory.
 */
export function arange<D extends DType>(stop: number | bigint, dtype: D): TypedView<D, 1>;
/** {@link arange} from `start` to `stop`. */
export function arange<D extends DType>(start: number | bigint, stop: number | bigint, dtype: D): TypedView<D, 1>;
/** {@link arange} with a step. */
export function arange<D extends DType>(
  start: number | bigint,
  stop: number | bigint,
  step: number | bigint,
  dtype: D,
): TypedView<D, 1>;
/** {@link arange} with numpy's default dtype. */
export function arange(
  start: number | bigint,
  stop?: number | bigint,
  step?: number | bigint,
): TypedView<"int64" | "float64", 1>;
export function arange(start: unknown, stop?: unknown, step?: unknown, dtype?: unknown): BufferView {
  releaseDeferred();
  // A dtype name ends the numbers; each argument is read once (they are primitives or refused).
  let named: unknown = dtype;
  let b = stop;
  let c = step;
  if (typeof stop === "string") {
    named = stop;
    b = undefined;
    c = undefined;
  } else if (typeof step === "string") {
    named = step;
    c = undefined;
  }
  const args = arangeArgs(start, b, c);
  const info = dtypeInfo(named === undefined ? arangeDType(args) : named as string);
  const values = arangeValues(args, info);
  return holding([typedArrayLength(values) / info.slots], info, values);
}

/** numpy's `asarray`: a TypedArray as a zero-copy 1-d view (`fromArray`); a view as a new handle
 * on the same memory; nested JS arrays (any depth, every row one length) copied into a new host
 * allocation, with numpy's dtype when none is given (bool, int64 when every value is an integer,
 * float64 otherwise; complex dtypes take `[re, im]` pairs as the innermost arrays). Converting a
 * TypedArray's or a view's dtype is refused (it would be a copy: `astype` does it). */
export function asarray<T extends AnyTypedArray>(array: T): TypedView<DTypeOfArray<T>, 1>;
/** {@link asarray} of a view: a new handle on the same memory. */
export function asarray<V extends BufferView>(view: V): V;
/** {@link asarray} of nested arrays of `dtype`. */
export function asarray<D extends DType>(values: unknown, dtype: D): TypedView<D, number>;
/** {@link asarray} with numpy's default dtype. */
export function asarray(values: unknown, dtype?: DType): BufferView;
export function asarray(values: unknown, dtype?: DType): BufferView {
  releaseDeferred();
  const wanted = dtype === undefined ? undefined : dtypeInfo(dtype);
  if (isBufferView(values)) {
    const state = stateOf(values);
    if (wanted !== undefined && wanted !== state.facts.info) {
      throw noConversion("a view", state.facts.info.name, wanted);
    }
    return derive(values, sliced(state, []));
  }
  const tag = typedArrayTag(values);
  if (tag !== undefined) {
    const own = dtypeOfTag(tag);
    if (own === undefined) {
      throw new DLPackError("dtype", `asarray(): ${withArticle(tag)} has no dtype this library views`);
    }
    if (wanted !== undefined && wanted.name !== own) throw noConversion(withArticle(tag), own, wanted);
    return fromArray(values as AnyTypedArray);
  }
  if (typeof values === "object" && values !== null && !isArray(values)) {
    throw new DLPackError(
      "argument",
      `asarray() takes nested arrays, a TypedArray or a BufferView, got ${shown(values)}`,
    );
  }
  const nested = readNested(values);
  const info = wanted ?? dtypeInfo(nestedDType(nested.leaves));
  const encoded = encodeNested(nested, info);
  return holding(encoded.shape, info, encoded.values);
}

function noConversion(what: string, own: DType, wanted: DTypeInfo): DLPackError {
  return new DLPackError(
    "dtype",
    `asarray() of ${what} is zero-copy and keeps its dtype (${own}); ${wanted.name} would need a copy: ` +
      `astype("${wanted.name}") makes one`,
  );
}

/** The options of an allocation like `view`'s: on its device (prototype-less: nothing resolves
 * through a prototype a caller changed). */
function likeOptions(state: ViewState): AllocOptions {
  return { __proto__: null, device: state.facts.device } as AllocOptions;
}

function like(view: unknown, dtype: unknown, what: string): { state: ViewState; info: DTypeInfo } {
  if (!isBufferView(view)) throw new DLPackError("argument", `${what}() takes a BufferView, got ${shown(view)}`);
  const state = stateOf(view);
  return { state, info: dtype === undefined ? state.facts.info : dtypeInfo(dtype as string) };
}

/** numpy's `zeros_like`: zeros of the view's shape, dtype and device. */
export function zerosLike<D extends DType, N extends number>(view: TypedView<D, N>): TypedView<D, N>;
/** {@link zerosLike} of another dtype. */
export function zerosLike<D extends DType, N extends number>(view: TypedView<DType, N>, dtype: D): TypedView<D, N>;
/** {@link zerosLike} of a view of unknown dtype and rank. */
export function zerosLike(view: BufferView, dtype?: DType): BufferView;
export function zerosLike(view: BufferView, dtype?: DType): BufferView {
  const { state, info } = like(view, dtype, "zerosLike");
  return allocateView(state.facts.shape, info.name, likeOptions(state), true);
}

/** numpy's `empty_like`: uninitialised memory of the view's shape, dtype and device. */
export function emptyLike<D extends DType, N extends number>(view: TypedView<D, N>): TypedView<D, N>;
/** {@link emptyLike} of another dtype. */
export function emptyLike<D extends DType, N extends number>(view: TypedView<DType, N>, dtype: D): TypedView<D, N>;
/** {@link emptyLike} of a view of unknown dtype and rank. */
export function emptyLike(view: BufferView, dtype?: DType): BufferView;
export function emptyLike(view: BufferView, dtype?: DType): BufferView {
  const { state, info } = like(view, dtype, "emptyLike");
  return allocateView(state.facts.shape, info.name, likeOptions(state), false);
}

/** numpy's `ones_like`: ones of the view's shape, dtype and device. */
export function onesLike<D extends DType, N extends number>(view: TypedView<D, N>): TypedView<D, N>;
/** {@link onesLike} of another dtype. */
export function onesLike<D extends DType, N extends number>(view: TypedView<DType, N>, dtype: D): TypedView<D, N>;
/** {@link onesLike} of a view of unknown dtype and rank. */
export function onesLike(view: BufferView, dtype?: DType): BufferView;
export function onesLike(view: BufferView, dtype?: DType): BufferView {
  const { state, info } = like(view, dtype, "onesLike");
  const one: Scalar = info.kind === "bool" ? true : info.kind === "complex" ? [1, 0] : 1;
  return filled(state.facts.shape, info, one, likeOptions(state));
}

/** The most views one join takes. */
const MAX_VIEWS = 1 << 20;

/** The states of a caller's list of views, every element read once before any state is taken
 * (a getter must not dispose a view whose state is in use). */
function statesOf(views: unknown, what: string): ViewState[] {
  if (!isArray(views)) throw new DLPackError("argument", `${what}() takes an array of views, got ${shown(views)}`);
  const n: unknown = views.length;
  if (!isSafeInt(n) || n < 0 || n > MAX_VIEWS) {
    throw new DLPackError("argument", `${what}() takes up to ${MAX_VIEWS} views, got a length of ${shown(n)}`);
  }
  if (n === 0) throw new DLPackError("argument", `${what}() needs at least one view`);
  const list = objectSlots<BufferView>(n);
  for (let i = 0; i < n; i++) {
    const v: unknown = views[i];
    if (!isBufferView(v)) throw new DLPackError("argument", `${what}(): element ${i} is ${shown(v)}, not a BufferView`);
    list[i] = v;
  }
  const states = objectSlots<ViewState>(n) as ViewState[];
  for (let i = 0; i < n; i++) states[i] = stateOf(list[i]!);
  return states;
}

/** numpy's `concatenate` (the array API's `concat`, PyTorch's `cat`): the views one after another
 * along `axis` (default 0, negative from the end) in a new C-contiguous allocation on their
 * device. Every view has the same dtype, device and rank, and the same extents but along `axis`. */
export function concat<D extends DType, N extends number>(
  views: readonly TypedView<D, N>[],
  axis?: number,
): TypedView<D, N>;
/** {@link concat} of views of unknown dtype and rank. */
export function concat(views: readonly BufferView[], axis?: number): BufferView;
export function concat(views: readonly BufferView[], axis?: number): BufferView {
  releaseDeferred();
  return newView(concatenated(statesOf(views, "concat"), axis));
}

/** numpy's `stack`: views of one shape, dtype and device joined along a new axis `axis` of the
 * result (default 0, negative from the end) in a new C-contiguous allocation. */
export function stack<D extends DType, N extends number>(
  views: readonly TypedView<D, N>[],
  axis?: number,
): TypedView<D, Plus1<N>>;
/** {@link stack} of views of unknown dtype and rank. */
export function stack(views: readonly BufferView[], axis?: number): BufferView;
export function stack(views: readonly BufferView[], axis?: number): BufferView {
  releaseDeferred();
  return newView(stacked(statesOf(views, "stack"), axis));
}
