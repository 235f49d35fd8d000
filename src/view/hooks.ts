/**
 * The operations `BufferView` methods delegate to (copies, exports, requirement checks). They live
 * in the operations layer, which imports the view; to keep the view from importing back up, each
 * operations module registers its functions here when it loads, and every entry loads them all
 * (`src/ops/mod.ts`) before any view exists. A method whose operation is not registered throws
 * `DLPackError` ("library").
 * @module
 */
import { DLPackError } from "../facts/errors.ts";
import type { AnyTypedArray, DTypeInfo, Scalar } from "../facts/dtypes.ts";
import type { Capsule } from "../native/capsule.ts";
import type { BufferView } from "./view.ts";
import type { Requirements } from "../ops/requirements.ts";
import type { CopyOptions } from "../ops/copy.ts";
import type { DLPackProtocolOptions } from "../ops/export.ts";

/** The zero-copy view operations, by method name. */
export type ShapeOp = "slice" | "at" | "transpose" | "permute" | "reshape" | "broadcastTo" | "squeeze" | "expandDims";

/** What the view layer asks of the operations layer. */
export interface ViewOps {
  /** `view.copy()`. */
  copy(view: BufferView): BufferView;
  /** `view.toHost(opts)`. */
  toHost(view: BufferView, opts: CopyOptions | undefined): BufferView;
  /** `view.copyFrom(src, opts)` for a view source. */
  copyInto(dst: BufferView, src: BufferView, opts: CopyOptions | undefined): void;
  /** A host view over a TypedArray's own memory, shaped like `shape` (`copyFrom(typedArray)`). */
  typedArrayView(src: AnyTypedArray, info: DTypeInfo, shape: readonly number[]): BufferView;
  /** A packed host copy of one-code-per-element sub-byte data (`copyFrom(typedArray)`). */
  packedCodes(codes: Uint8Array, info: DTypeInfo, shape: readonly number[]): BufferView;
  /** `view.__dlpack__(opts)`. */
  dlpack(view: BufferView, opts: DLPackProtocolOptions | undefined): Capsule;
  /** `view.refusals(req)`, `require(req)`, `as(dtype, ndim)`. */
  refusals(view: BufferView, req: Requirements): string[];
  /** `view.slice(...)`, `at(...)`, `transpose()`, ...: the derived view (`args` as the method got them). */
  shaped(view: BufferView, op: ShapeOp, args: readonly unknown[]): BufferView;
  /** `view[Symbol.iterator]()` (`entries` false) and `view.entries()` (true). */
  iterate(view: BufferView, entries: boolean): IterableIterator<unknown>;
  /** `view.toNested()`. */
  toNested(view: BufferView): unknown;
  /** `view.fill(value)`. */
  fill(view: BufferView, value: Scalar): void;
  /** `copyFrom(nested)`: the nested values in the form of `toArray()`, checked against the shape. */
  flatten(view: BufferView, nested: readonly unknown[]): AnyTypedArray;
}

function missing(name: string): () => never {
  return () => {
    throw new DLPackError(
      "library",
      `BufferView ${name} needs the operations layer, which is not loaded (import the library through its entry, mod.ts)`,
    );
  };
}

/** @internal The registered operations; read by `BufferView` methods only. */
export const viewOps: ViewOps = {
  copy: missing("copy()"),
  toHost: missing("toHost()"),
  copyInto: missing("copyFrom()"),
  typedArrayView: missing("copyFrom()"),
  packedCodes: missing("copyFrom()"),
  dlpack: missing("__dlpack__()"),
  refusals: missing("requirement checks"),
  shaped: missing("view operations"),
  iterate: missing("iteration"),
  toNested: missing("toNested()"),
  fill: missing("fill()"),
  flatten: missing("copyFrom()"),
};

/** @internal Called by each operations module at load with the methods it implements. */
export function registerViewOps(ops: Partial<ViewOps>): void {
  if (ops.copy !== undefined) viewOps.copy = ops.copy;
  if (ops.toHost !== undefined) viewOps.toHost = ops.toHost;
  if (ops.copyInto !== undefined) viewOps.copyInto = ops.copyInto;
  if (ops.typedArrayView !== undefined) viewOps.typedArrayView = ops.typedArrayView;
  if (ops.packedCodes !== undefined) viewOps.packedCodes = ops.packedCodes;
  if (ops.dlpack !== undefined) viewOps.dlpack = ops.dlpack;
  if (ops.refusals !== undefined) viewOps.refusals = ops.refusals;
  if (ops.shaped !== undefined) viewOps.shaped = ops.shaped;
  if (ops.iterate !== undefined) viewOps.iterate = ops.iterate;
  if (ops.toNested !== undefined) viewOps.toNested = ops.toNested;
  if (ops.fill !== undefined) viewOps.fill = ops.fill;
  if (ops.flatten !== undefined) viewOps.flatten = ops.flatten;
}
