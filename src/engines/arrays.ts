/**
 * TypedArrays as sources of memory: the facts of one read through the intrinsics (its dtype, its
 * bytes, whether its buffer can move or has gone), the same checks wherever JS memory is lent to
 * native code or read by it.
 * @module
 */
import { DLPackError } from "../facts/errors.ts";
import { type AnyTypedArray, type DTypeInfo, infoOfTag } from "../facts/dtypes.ts";
import {
  bufferState,
  isDetached,
  newWeakMap,
  RESIZABLE,
  SHARED,
  typedArrayBuffer,
  typedArrayByteLength,
} from "../facts/intrinsics.ts";

/**
 * TypedArrays already exported whole, by identity, with their dtype: only arrays over a
 * fixed-length, non-shared ArrayBuffer. Everything such an export checks (the brand, the element
 * type, the buffer and whether it can resize or is shared) is fixed for the life of the array,
 * except detachment, which the byte length shows (0) and which sends the export the full way. An
 * identity can be neither forged nor proxied, and a WeakMap keeps no array alive: exporting the
 * same array again reads one getter instead of five.
 */
export const wholeArrays = newWeakMap<object, DTypeInfo>();

/** The TypedArray facts every export needs, read through the intrinsics. */
export function typedArraySource(x: AnyTypedArray, tag: string): { info: DTypeInfo; byteLength: number } {
  // The buffer first: in Bun that also moves a small array's storage out of the GC heap, so the
  // pointer the runtime passes stays valid.
  const buffer = typedArrayBuffer(x);
  const state = bufferState(buffer);
  if ((state & RESIZABLE) !== 0) {
    throw new DLPackError(
      "null_data",
      "resizable ArrayBuffers can shrink or move under a consumer; export a fixed-length buffer instead",
    );
  }
  const info = infoOfTag(tag);
  if (info === undefined) throw new DLPackError("dtype", `a ${tag} has no dtype this library exports`);
  const byteLength = typedArrayByteLength(x);
  if (byteLength === 0 && (state & SHARED) === 0 && isDetached(buffer as ArrayBuffer)) {
    throw new DLPackError("disposed", "the TypedArray's ArrayBuffer is detached");
  }
  if (state === 0 && byteLength > 0) wholeArrays.set(x, info);
  return { info, byteLength };
}
