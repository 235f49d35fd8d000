/**
 * `fromArray`: a zero-copy view over a TypedArray's own memory.
 * @module
 */
import { DLPackError, optionalBoolean, optionsObject, shown } from "../facts/errors.ts";
import type { AnyTypedArray, DTypeOfArray } from "../facts/dtypes.ts";
import { typedArrayTag } from "../facts/intrinsics.ts";
import { deferredObjectCount, deferredObjects, retryQuietly } from "../native/journal.ts";
import { LIBRARY_NAME } from "../engines/state.ts";
import type { TypedView } from "../view/view.ts";
import { exportDLPack } from "./export.ts";
import { importCapsule } from "./import.ts";

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
  if (typedArrayTag(array) === undefined) {
    throw new DLPackError("argument", `fromArray takes a TypedArray, got ${shown(array)}`);
  }
  const o = optionsObject(opts as FromArrayOptions, "fromArray options");
  // Each option read once, handed on in an object of our own.
  const capsule = exportDLPack(array, {
    shape: o.shape,
    strides: o.strides,
    offset: o.offset,
    readonly: optionalBoolean(o.readonly, "readonly"),
  });
  try {
    return importCapsule(capsule, LIBRARY_NAME) as TypedView<DTypeOfArray<T>, S["length"]>;
  } catch (error) {
    // Disposed unless the import took it (the disposer checks).
    deferredObjects[deferredObjectCount[0]++] = capsule;
    retryQuietly();
    throw error;
  }
}
