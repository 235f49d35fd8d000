/**
 * The view operations numpy users reach for first that are not plain derivations of one layout
 * argument: `flip` (negative strides), `ravel`/`flatten` (one axis, a view when the strides allow,
 * else a copy), `item` (the one value of a size-1 view) and the same-layout view `astype` hands
 * out when nothing needs converting.
 * @module
 */
import { DLPackError } from "../facts/errors.ts";
import type { Scalar } from "../facts/dtypes.ts";
import { axisOf, integerList, reshapeLayout, type Strided } from "../facts/shape.ts";
import { layoutOf, listText } from "../facts/layout.ts";
import { slots } from "../facts/intrinsics.ts";
import { decodeElement } from "./codec.ts";
import { derived } from "./derive.ts";
import { copyOf } from "./copy.ts";
import { elementsOf } from "./values.ts";
import { type DerivedLayout, type Owned, viewFacts, type ViewState } from "./state.ts";

/** `view.flip(axis?)`: the order of the elements reversed along `axis` (an integer or a list of
 * them, negative from the end), or along every axis when it is omitted; zero-copy, with negative
 * strides. */
export function flipped(view: ViewState, axis: unknown): DerivedLayout {
  const f = view.facts;
  const ndim = f.shape.length;
  const flip = slots(ndim);
  if (axis === undefined || axis === null) {
    for (let d = 0; d < ndim; d++) flip[d] = 1;
  } else {
    const axes = typeof axis === "number" ? [axis] : integerList(axis, "axis");
    for (let k = 0; k < axes.length; k++) {
      const a = axisOf(axes[k], ndim);
      if (flip[a] !== 0) {
        throw new DLPackError("argument", `flip(): axis ${axes[k]} is given twice in ${listText(axes)}`);
      }
      flip[a] = 1;
    }
  }
  const shape = slots(ndim);
  const strides = slots(ndim);
  let offset = 0;
  for (let d = 0; d < ndim; d++) {
    const extent = f.shape[d]!;
    const stride = f.strides[d]!;
    shape[d] = extent;
    if (flip[d] === 0 || extent === 0) {
      strides[d] = stride;
      continue;
    }
    offset += (extent - 1) * stride;
    strides[d] = -stride;
  }
  return derived(view, "flip", { shape, strides, offset }, false);
}

/** The layout of `view` itself (a second handle on the same elements). */
export function identity(view: ViewState): DerivedLayout {
  const f = view.facts;
  const s: Strided = { shape: copied(f.shape), strides: copied(f.strides), offset: 0 };
  return derived(view, "astype", s, false);
}

/** `view.ravel()` without copying: the elements in C order as one axis, or undefined when the
 * strides do not allow it (then `flatCopy`). */
export function raveled(view: ViewState): DerivedLayout | undefined {
  const f = view.facts;
  const s = reshapeLayout(f.shape, f.strides, [f.size]);
  return s === undefined ? undefined : derived(view, "ravel", s, false);
}

/** `view.flatten()` (and `ravel()` where a view cannot do): a C-order copy in library memory with
 * one axis (CUDA device views on their device). */
export function flatCopy(view: ViewState): Owned {
  const owned = copyOf(view);
  const f = owned.facts;
  const shape = [f.size];
  const strides = [1];
  return {
    owner: owned.owner,
    address: owned.address,
    access: owned.access,
    facts: viewFacts({
      info: f.info,
      shape,
      strides,
      size: f.size,
      nbytes: f.nbytes,
      minOffset: f.minOffset,
      maxOffset: f.maxOffset,
      layout: layoutOf(shape, strides),
      device: f.device,
      origin: f.origin,
    }),
  };
}

/** `view.item()`: the value of a view of exactly one element (numpy's `item()`, PyTorch's). */
export function itemOf(view: ViewState): Scalar {
  const f = view.facts;
  if (f.size !== 1) {
    throw new DLPackError(
      "shape",
      `item() needs a view of exactly one element; this one has ${f.size} (shape ${listText(f.shape)})`,
    );
  }
  return decodeElement(f.info, elementsOf(view), 0);
}

function copied(values: readonly number[]): number[] {
  const out = slots(values.length);
  for (let i = 0; i < values.length; i++) out[i] = values[i]!;
  return out;
}
