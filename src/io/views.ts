/**
 * Where the tensors-on-disk entry meets the view layer: the one function that makes a view over a
 * file's memory, and the one that reads a view's bytes for writing. The view layer's internals
 * (`newView`, the facts records, the readers of a view's own fields) are used here and nowhere
 * else in src/io/.
 * @module
 */
import { core } from "../../ffi/mod.ts";
import { DLPackError, shown } from "../facts/errors.ts";
import { type DType, dtypeInfo, dtypeOfArray } from "../facts/dtypes.ts";
import { deviceOf, formatDevice, isHostAccessible } from "../facts/devices.ts";
import { Flag } from "../facts/abi.ts";
import { ceil, detach, typedArrayBuffer, typedArrayByteOffset, typedArrayTag } from "../facts/intrinsics.ts";
import { layoutOf, reach } from "../facts/layout.ts";
import { releaseOwner } from "../native/owner.ts";
import {
  addressOf,
  type BufferView,
  deviceOfView,
  disposeView,
  infoOf,
  isBufferView,
  layoutBitsOf,
  LIBRARY_NAME,
  nbytesOf,
  newView,
  ownerOf,
  shapeOf,
  viewFacts,
  viewOrigin,
} from "../view/view.ts";
import { copyOf } from "../ops/copy.ts";
import { empty } from "../ops/alloc.ts";
import { runtime } from "../../ffi/mod.ts";
import { fromArray } from "../ops/view_ops.ts";
import type { AnyTypedArray } from "../facts/dtypes.ts";

const CPU = deviceOf(1, 0);

/**
 * A view over file memory the owner record `owner` holds (a mapping, or library memory a file
 * was read into): element 0 at `address`, `shape` and `strides` (in elements, fresh arrays the
 * caller no longer changes). The view takes a share of its own (`dlpk_owner_retain`); the
 * caller's reference is left alone. `producer` names the format ("safetensors", "npy").
 */
export function viewOverMapping(
  owner: number,
  address: number,
  dtype: DType,
  shape: number[],
  strides: number[],
  size: number,
  readonly: boolean,
  producer: string,
): BufferView {
  const info = dtypeInfo(dtype);
  const span = reach(shape, strides);
  const facts = viewFacts({
    info,
    shape,
    strides,
    size,
    nbytes: ceil((size * info.bits) / 8),
    minOffset: span.lo,
    maxOffset: span.hi,
    layout: layoutOf(shape, strides),
    device: CPU,
    origin: viewOrigin(producer, LIBRARY_NAME, -1, -1, readonly ? Flag.readOnly : 0, true),
  });
  core().dlpk_owner_retain(owner);
  try {
    return newView(owner, address, facts, readonly ? "readonly" : "readwrite");
  } catch (error) {
    releaseOwner(owner);
    throw error;
  }
}

// Captured at load: a caller who replaces them later changes nothing here.
const ReflectApply = Reflect.apply;
const typedArraySet = (Object.getPrototypeOf(Uint8Array.prototype) as { set: (a: ArrayLike<number>) => void }).set;

/**
 * A view over library memory holding a copy of `bytes` (`count` of them from `at`): the array of
 * `dtype`, `shape` and `strides` whose bytes they are, for a file's array that cannot be a view
 * over the file's memory (compressed, or not aligned for its dtype). Read-only where `readonly`,
 * as a view over the file would be.
 */
export function viewOverBytes(
  bytes: Uint8Array,
  at: number,
  count: number,
  dtype: DType,
  shape: number[],
  strides: number[],
  size: number,
  readonly: boolean,
  producer: string,
): BufferView {
  const memory = empty([count], "uint8");
  try {
    if (count > 0) {
      const target = new Uint8Array(runtime().arrayBuffer(addressOf(memory), count));
      try {
        ReflectApply(typedArraySet, target, [
          new Uint8Array(typedArrayBuffer(bytes), typedArrayByteOffset(bytes) + at, count),
        ]);
      } finally {
        detach(target.buffer);
      }
    }
    return viewOverMapping(ownerOf(memory), addressOf(memory), dtype, shape, strides, size, readonly, producer);
  } finally {
    disposeView(memory);
  }
}

/** A tensor argument of the writers: a view, or a TypedArray (written as a 1-d tensor). */
export type Writable = BufferView | AnyTypedArray;

/** A tensor argument as a view: the view itself, or (`made`) a view over the TypedArray that the
 * caller disposes with {@link releaseTensor}. Throws "argument" for anything else, "disposed" for
 * a disposed view and "device" for memory the host cannot read. */
export interface TensorArgument {
  readonly view: BufferView;
  readonly made: boolean;
}

export function tensorArgument(x: unknown, what: string): TensorArgument {
  let view: BufferView;
  let made = false;
  if (isBufferView(x)) view = x;
  else if (typedArrayTag(x) !== undefined) {
    dtypeOfArray(x as ArrayBufferView);
    view = fromArray(x as AnyTypedArray);
    made = true;
  } else throw new DLPackError("argument", `${what} must be a BufferView or a TypedArray, got ${shown(x)}`);
  try {
    ownerOf(view); // throws "disposed" for a disposed view
    const device = deviceOfView(view);
    if (!isHostAccessible(device.type)) {
      throw new DLPackError("device", `${what} is on ${formatDevice(device)}: copy it to the host first (toHost())`);
    }
  } catch (error) {
    if (made) disposeView(view);
    throw error;
  }
  return { view, made };
}

/** Disposes a view {@link tensorArgument} made. */
export function releaseTensor(t: TensorArgument): void {
  if (t.made) disposeView(t.view);
}

/** What a writer reads of a tensor. */
export interface TensorFacts {
  readonly dtype: DType;
  /** The view's own array (never written). */
  readonly shape: readonly number[];
  /** Bytes of its elements, packed in C order. */
  readonly bytes: number;
  /** Whether its memory is in Fortran order and not in C order (whole-byte elements only). */
  readonly fortranOnly: boolean;
}

export function tensorFacts(t: TensorArgument): TensorFacts {
  const info = infoOf(t.view);
  const layout = layoutBitsOf(t.view);
  const fortranOnly = info.bits % 8 === 0 && (layout & 1) === 0 && (layout & 2) !== 0;
  return { dtype: info.name, shape: shapeOf(t.view), bytes: nbytesOf(t.view), fortranOnly };
}

/**
 * Calls `body` with the address of the tensor's bytes: contiguous in C order, or in Fortran order
 * where `fortran` (the caller saw `fortranOnly`). Any other layout is copied first (in C order,
 * into library memory freed after `body`); so are sub-byte elements, which may start inside a byte.
 */
export function withTensorBytes(t: TensorArgument, fortran: boolean, body: (address: number) => void): void {
  const view = t.view;
  const info = infoOf(view);
  const layout = layoutBitsOf(view);
  if (info.bits % 8 === 0 && (layout & (fortran ? 2 : 1)) !== 0) {
    body(addressOf(view));
    return;
  }
  const copy = copyOf(view);
  try {
    body(addressOf(copy));
  } finally {
    disposeView(copy);
  }
}
