/**
 * Derivation: the zero-copy view operations (`slice`, `at`, `transpose`, `permute`, `reshape`,
 * `broadcastTo`, `squeeze`, `expandDims`) as layouts derived from a view's own shape and strides.
 * Each returns where the new view's element 0 lies, its extents and whether it may be written;
 * the view layer makes the view (`derive` in src/view/view.ts). The shape arithmetic is in
 * src/facts/shape.ts.
 * @module
 */
import { DLPackError } from "../facts/errors.ts";
import {
  atLayout,
  broadcastLayout,
  expandLayout,
  permuteLayout,
  reshapeLayout,
  reshapeTarget,
  sliceLayout,
  squeezeLayout,
  type Strided,
  transposeLayout,
} from "../facts/shape.ts";
import { layoutOf, listText, MAX_EXACT, reach, sizeOf } from "../facts/layout.ts";
import { ceil } from "../facts/intrinsics.ts";
import { slotBitsOf } from "./codec.ts";
import type { DerivedLayout, ViewState } from "./state.ts";

/** The largest integer a JS number holds exactly (2^53 - 1). */
const MAX_SAFE = MAX_EXACT - 1;

/** `view.slice(...items)`: numpy's basic indexing. */
export function sliced(view: ViewState, items: readonly unknown[]): DerivedLayout {
  const f = view.facts;
  return derived(view, "slice", sliceLayout(f.shape, f.strides, items), false);
}

/** `view.at(...indices)`: the sub-view at integer indices on the leading axes. */
export function atIndices(view: ViewState, indices: readonly unknown[]): DerivedLayout {
  const f = view.facts;
  return derived(view, "at", atLayout(f.shape, f.strides, indices), false);
}

/** `view.transpose()`: the axes reversed. */
export function transposed(view: ViewState): DerivedLayout {
  const f = view.facts;
  return derived(view, "transpose", transposeLayout(f.shape, f.strides), false);
}

/** `view.permute(axes)`: the axes in the order `axes` lists them. */
export function permuted(view: ViewState, axes: unknown): DerivedLayout {
  const f = view.facts;
  return derived(view, "permute", permuteLayout(f.shape, f.strides, axes), false);
}

/** `view.reshape(shape)`: the same elements in C order under a new shape, where the strides allow. */
export function reshaped(view: ViewState, shape: unknown): DerivedLayout {
  const f = view.facts;
  const target = reshapeTarget(f.shape, shape);
  const out = reshapeLayout(f.shape, f.strides, target);
  if (out === undefined) {
    throw new DLPackError(
      "strides",
      `reshape(${listText(target)}) needs a copy: the strides ${listText(f.strides)} of shape ${
        listText(f.shape)
      } cannot be regrouped; reshape view.copy() instead`,
    );
  }
  return derived(view, "reshape", out, false);
}

/** `view.broadcastTo(shape)`: repeated axes get stride 0, so the result is never writable. */
export function broadcast(view: ViewState, shape: unknown): DerivedLayout {
  const f = view.facts;
  return derived(view, "broadcastTo", broadcastLayout(f.shape, f.strides, shape), true);
}

/** `view.squeeze(axis?)`: without extent-1 axes. */
export function squeezed(view: ViewState, axis: unknown): DerivedLayout {
  const f = view.facts;
  return derived(view, "squeeze", squeezeLayout(f.shape, f.strides, axis), false);
}

/** `view.expandDims(axis?)`: with a new extent-1 axis. */
export function expanded(view: ViewState, axis: unknown): DerivedLayout {
  const f = view.facts;
  return derived(view, "expandDims", expandLayout(f.shape, f.strides, axis), false);
}

/** The derived layout of `s` (what `op` computed from `view`'s shape and strides), checked: element
 * 0 on a byte boundary, bytes and strides that a JS number holds exactly. */
export function derived(view: ViewState, op: string, s: Strided, readonly: boolean): DerivedLayout {
  const info = view.facts.info;
  const size = sizeOf(s.shape);
  const r = reach(s.shape, s.strides);
  const empty = r.hi < r.lo;
  // Memory of an empty view is never read: element 0 stays where it was.
  const offset = empty ? 0 : s.offset;
  const slotBits = slotBitsOf(view.facts);
  if ((offset * slotBits) % 8 !== 0) {
    throw new DLPackError(
      "byte_offset",
      `element 0 of this ${op}() would start inside a byte of packed ${info.name} data; ${op}() view.copy() instead`,
    );
  }
  const nbytes = ceil((size * info.bits) / 8);
  if (nbytes > MAX_EXACT) throw new DLPackError("overflow", `${op}(): ${nbytes} bytes exceed 2^53`);
  // Strides are what an empty view's layout can grow without bound (reshape, slice steps, ...):
  // beyond 2^53 no number holds them exactly, nor could the view be exported.
  for (let d = 0; d < s.strides.length; d++) {
    const stride = s.strides[d]!;
    if (stride > MAX_SAFE || -stride > MAX_SAFE) {
      throw new DLPackError(
        "overflow",
        `${op}() would give shape ${listText(s.shape)} the strides ${listText(s.strides)}: stride ${stride} of ` +
          `dimension ${d} is beyond 2^53 - 1 elements, the largest a JS number holds exactly`,
      );
    }
  }
  return {
    byteOffset: (offset * slotBits) / 8,
    shape: s.shape,
    strides: s.strides,
    size,
    nbytes,
    minOffset: empty ? 0 : r.lo,
    maxOffset: empty ? -1 : r.hi,
    layout: layoutOf(s.shape, s.strides),
    readonly,
  };
}
