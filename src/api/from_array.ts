/**
 * `fromArray`: a zero-copy view over a TypedArray's own memory, made from a pin record (one native
 * call), not through an export and an import.
 * @module
 */
import { DLPackError, optionalBoolean, optionsObject, shown } from "../facts/errors.ts";
import type { AnyTypedArray, DTypeOfArray } from "../facts/dtypes.ts";
import { typedArrayTag } from "../facts/intrinsics.ts";
import { releaseDeferred } from "../native/journal.ts";
import { pinsRecorded } from "../native/pins.ts";
import { offerBeyondRealm } from "../native/keepers.ts";
import { arrayView, readOptions } from "../engines/arrays.ts";
import { newView, type TypedView } from "../view/view.ts";

/** Options of {@link fromArray}. */
export interface FromArrayOptions<S extends readonly number[] = readonly number[]> {
  /** Extents (default: 1-d over the whole array). */
  readonly shape?: S | undefined;
  /** Strides in elements (default: C order). */
  readonly strides?: readonly number[] | undefined;
  /** Elements from the array's start to element 0 (needed with negative strides). Default 0. */
  readonly offset?: number | undefined;
  /** A read-only view even though the array can be written. */
  readonly readonly?: boolean | undefined;
}

/**
 * A zero-copy view over a TypedArray's own memory, shaped by `opts` (every element must lie
 * inside the array; checked). The array stays reachable (pinned) while the view, or anything
 * exported from it, lives. A literal shape types the result: `fromArray(f32, { shape: [2, 3] })`
 * is a `TypedView<"float32", 2>`.
 */
export function fromArray<T extends AnyTypedArray, const S extends readonly number[] = readonly [number]>(
  array: T,
  opts?: FromArrayOptions<S>,
): TypedView<DTypeOfArray<T>, S["length"]> {
  releaseDeferred();
  const tag = typedArrayTag(array);
  if (tag === undefined) throw new DLPackError("argument", `fromArray takes a TypedArray, got ${shown(array)}`);
  const o = optionsObject(opts as FromArrayOptions, "fromArray options");
  // Each option read once, before anything is pinned: no caller code runs once it is.
  const options = readOptions({
    shape: o.shape,
    strides: o.strides,
    offset: o.offset,
    readonly: optionalBoolean(o.readonly, "readonly"),
  })!;
  const owned = arrayView(array, tag, options);
  const view = newView(owned);
  // Caller code may run from here on (a replaced postMessage, a release callback a sweep runs).
  offerBeyondRealm(array, owned.owner);
  pinsRecorded();
  return view as TypedView<DTypeOfArray<T>, S["length"]>;
}
