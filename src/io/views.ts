/**
 * Where the tensors-on-disk entry meets the view layer: the one function that makes a view over a
 * file's memory (through the view factory `newView`), and the ones that read a view's state for
 * writing (`stateOf`). Nothing else in src/io/ reads a view's internals.
 * @module
 */
import { core } from "../../ffi/mod.ts";
import { DLPackError, shown } from "../facts/errors.ts";
import { type DType, dtypeInfo, dtypeOfArray } from "../facts/dtypes.ts";
import { deviceOf, formatDevice, isHostAccessible } from "../facts/devices.ts";
import { Flag } from "../facts/abi.ts";
import {
  ceil,
  detach,
  setElements,
  typedArrayBuffer,
  typedArrayByteOffset,
  typedArrayTag,
} from "../facts/intrinsics.ts";
import { layoutOf, reach } from "../facts/layout.ts";
import { LIBRARY_NAME, viewFacts, viewOrigin, type ViewState } from "../engines/state.ts";
import { copyOf } from "../engines/copy.ts";
import { allocateHost } from "../engines/alloc.ts";
import { releaseTop } from "../native/journal.ts";
import { runtime } from "../../ffi/mod.ts";
import { type BufferView, disposeView, isBufferView, newView, stateOf } from "../view/view.ts";
import { fromArray } from "../api/from_array.ts";
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
  // Journaled for the view, which ends the entry once it holds the share (if making it throws,
  // the entry stays and the share is released with the journal).
  core().dlpk_owner_retain(owner);
  return newView({ owner, address, facts, access: readonly ? "readonly" : "readwrite" });
}

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
  // Library memory, journaled until released below (an exception before leaves it to the journal).
  const memory = allocateHost([count], dtypeInfo("uint8"));
  if (count > 0) {
    const target = new Uint8Array(runtime().arrayBuffer(memory.address, count));
    try {
      setElements(target, new Uint8Array(typedArrayBuffer(bytes), typedArrayByteOffset(bytes) + at, count));
    } finally {
      detach(target.buffer);
    }
  }
  const view = viewOverMapping(memory.owner, memory.address, dtype, shape, strides, size, readonly, producer);
  // The view holds its own share; the allocation's entry is the top one again.
  releaseTop(memory.owner);
  return view;
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
    const device = stateOf(view).facts.device; // throws "disposed" for a disposed view
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
  const f = stateOf(t.view).facts;
  const layout = f.layout;
  const fortranOnly = f.info.bits % 8 === 0 && (layout & 1) === 0 && (layout & 2) !== 0;
  return { dtype: f.info.name, shape: f.shape, bytes: f.nbytes, fortranOnly };
}

/**
 * Calls `body` with the address of the tensor's bytes: contiguous in C order, or in Fortran order
 * where `fortran` (the caller saw `fortranOnly`). Any other layout is copied first (in C order,
 * into library memory freed after `body`); so are sub-byte elements, which may start inside a byte.
 */
export function withTensorBytes(t: TensorArgument, fortran: boolean, body: (address: number) => void): void {
  const state: ViewState = stateOf(t.view);
  const f = state.facts;
  if (f.info.bits % 8 === 0 && (f.layout & (fortran ? 2 : 1)) !== 0) {
    body(state.address);
    return;
  }
  const copy = newView(copyOf(state));
  try {
    body(stateOf(copy).address);
  } finally {
    disposeView(copy);
  }
}
