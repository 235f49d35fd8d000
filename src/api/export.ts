/**
 * Exports: TypedArrays, library allocations and imported views handed to other consumers as
 * DLPack structs, zero-copy (thin dispatchers over src/engines/exports.ts). JS memory is pinned
 * until the consumer's deleter has run; views keep their owner (and so the first producer of a
 * chain) alive the same way.
 * @module
 */
import { DLPackError, shown } from "../facts/errors.ts";
import type { AnyTypedArray } from "../facts/dtypes.ts";
import { typedArrayByteLength, typedArrayTag } from "../facts/intrinsics.ts";
import { releaseDeferred } from "../native/journal.ts";
import type { Capsule } from "../native/capsule.ts";
import { type ExportOptions, exportTypedArray, exportView, exportWholeArray } from "../engines/exports.ts";
import { knownWholeArray, readOptions } from "../engines/arrays.ts";
import { type BufferView, isBufferView, stateOf } from "../view/view.ts";

export type { DLPackProtocolOptions, ExportOptions } from "../engines/exports.ts";

/** What can be exported. */
export type Exportable = BufferView | AnyTypedArray;

function exportAny(x: Exportable, options: ExportOptions | undefined, versioned: boolean): Capsule {
  releaseDeferred();
  // No options (the common case) stays undefined: the whole-array export takes a fast path then.
  const opts = readOptions(options);
  if (opts === undefined) {
    // An array exported before: still a TypedArray of that dtype over the same fixed-length,
    // unshared buffer.
    const known = knownWholeArray(x);
    if (known !== undefined) {
      const byteLength = typedArrayByteLength(x as AnyTypedArray);
      if (byteLength > 0) return exportWholeArray(x as AnyTypedArray, known, byteLength, versioned, 0, false);
    }
  }
  // The engine's brand, not instanceof or .constructor: own properties and prototypes can lie.
  const tag = typedArrayTag(x);
  if (tag !== undefined) return exportTypedArray(x as AnyTypedArray, tag, opts, versioned, 0);
  // The view's state after its options were read: their getters may have disposed it.
  if (isBufferView(x)) return exportView(stateOf(x), opts, versioned, 0);
  throw new DLPackError("argument", `export takes a BufferView or a TypedArray, got ${shown(x)}`);
}

/**
 * Exports as a `DLManagedTensorVersioned` (DLPack 1.3), zero-copy: the struct's data aliases the
 * source. READ_ONLY is set unless the source is writable.
 */
export function exportDLPack(x: Exportable, opts?: ExportOptions): Capsule {
  return exportAny(x, opts, true);
}

/** Exports as a legacy `DLManagedTensor`. Read-only sources are refused: the struct cannot say so. */
export function exportDLPackLegacy(x: Exportable, opts?: ExportOptions): Capsule {
  return exportAny(x, opts, false);
}

/** Same as {@link exportDLPack}. */
export const toDLPack: (x: Exportable, opts?: ExportOptions) => Capsule = exportDLPack;

/** The one-call export of a TypedArray or view (DLPack.jl's `share`): a versioned capsule over
 * the same memory. */
export function share(x: Exportable, opts?: ExportOptions): Capsule {
  return exportAny(x, opts, true);
}
