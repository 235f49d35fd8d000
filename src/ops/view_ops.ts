/**
 * The view operations: zero-copy derived views (`slice`, `at`, `transpose`, `permute`, `reshape`,
 * `broadcastTo`, `squeeze`, `expandDims`), iteration, `toNested`, `fill`, `copyFrom(nested)`, and
 * `fromArray`, a view over a TypedArray's own memory. The shape arithmetic is in
 * src/facts/shape.ts; views are built by src/view/view.ts (`deriveView`).
 * @module
 */
import { DLPackError, optionalBoolean, optionsObject, shown } from "../facts/errors.ts";
import type { AnyTypedArray, DTypeOfArray, Scalar } from "../facts/dtypes.ts";
import { isHostAccessible } from "../facts/devices.ts";
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
import { layoutOf, listText, MAX_EXACT, nextOffset, reach, sizeOf as elementCount } from "../facts/layout.ts";
import {
  accessOf,
  arrayOf,
  BufferView,
  deriveView,
  deviceOfView,
  disposeView,
  flagsOf,
  infoOf,
  jsBuffer,
  ownerOf,
  shapeOf,
  sizeOf,
  stridesOf,
  toArrayOf,
  type TypedView,
} from "../view/view.ts";
import { registerViewOps, type ShapeOp } from "../view/hooks.ts";
import { decodeElement, encodeElement, writeBits } from "../view/codec.ts";
import { deferredObjectCount, deferredObjects } from "../native/owner.ts";
import { ArrayBufferCtor, callWith, ceil, isArray, objectSlots, slots, typedArrayTag } from "../facts/intrinsics.ts";
import { Flag } from "../facts/abi.ts";
import { producerStreams } from "./streams.ts";
import { copyInto, packedCodes, toHost } from "./copy.ts";
import { adoptCapsule, exportDLPack, typedArrayView } from "./export.ts";

const SUBBYTE_PADDED = Flag.isSubbyteTypePadded;
// Captured at load: a caller who later replaces the prototype's `get` changes nothing here.
const getElement = BufferView.prototype.get;

/** The new layout of `op` on `view`'s own shape and strides (the caller's arguments checked). */
function layoutFor(view: BufferView, op: ShapeOp, args: readonly unknown[]): Strided {
  const shape = shapeOf(view);
  const strides = stridesOf(view);
  switch (op) {
    case "slice":
      return sliceLayout(shape, strides, args);
    case "at":
      return atLayout(shape, strides, args);
    case "transpose":
      return transposeLayout(shape, strides);
    case "permute":
      return permuteLayout(shape, strides, args[0]);
    case "broadcastTo":
      return broadcastLayout(shape, strides, args[0]);
    case "squeeze":
      return squeezeLayout(shape, strides, args[0]);
    case "expandDims":
      return expandLayout(shape, strides, args[0]);
    case "reshape": {
      const target = reshapeTarget(shape, args[0]);
      const out = reshapeLayout(shape, strides, target);
      if (out !== undefined) return out;
      throw new DLPackError(
        "strides",
        `reshape(${listText(target)}) needs a copy: the strides ${listText(strides)} of shape ${
          listText(shape)
        } cannot be regrouped; reshape view.copy() instead`,
      );
    }
  }
  throw new DLPackError("argument", `no view operation ${shown(op)}`);
}

/** `view.slice(...)`, `at(...)`, `transpose()`, ...: a new view over the same memory and owner. */
export function shaped(view: BufferView, op: ShapeOp, args: readonly unknown[]): BufferView {
  ownerOf(view); // throws "disposed"
  const s = layoutFor(view, op, args);
  const info = infoOf(view);
  const size = elementCount(s.shape);
  const r = reach(s.shape, s.strides);
  const empty = r.hi < r.lo;
  // Memory of an empty view is never read: element 0 stays where it was.
  const offset = empty ? 0 : s.offset;
  const slotBits = info.bits < 8 && (flagsOf(view) & SUBBYTE_PADDED) !== 0 ? 8 : info.bits;
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
  const derived = deriveView(view, {
    byteOffset: (offset * slotBits) / 8,
    shape: s.shape,
    strides: s.strides,
    size,
    nbytes,
    minOffset: empty ? 0 : r.lo,
    maxOffset: empty ? -1 : r.hi,
    layout: layoutOf(s.shape, s.strides),
    readonly: op === "broadcastTo",
  });
  // CUDA data: later fences and copies of the derived view wait for the same producer work.
  const stream = producerStreams.get(view);
  if (stream !== undefined) producerStreams.set(derived, stream);
  return derived;
}

function* items(view: BufferView, n: number, one: boolean): Generator<Scalar | BufferView> {
  for (let i = 0; i < n; i++) yield one ? callWith(getElement, view, i) as Scalar : shaped(view, "at", [i]);
}

function* pairs(view: BufferView, n: number, one: boolean): Generator<[number, Scalar | BufferView]> {
  for (let i = 0; i < n; i++) yield [i, one ? callWith(getElement, view, i) as Scalar : shaped(view, "at", [i])];
}

/** Iteration over the first axis: values of a 1-d view, sub-views otherwise (each read when reached). */
export function iterate(view: BufferView, entries: boolean): IterableIterator<unknown> {
  ownerOf(view);
  const shape = shapeOf(view);
  const n = shape[0];
  if (n === undefined) throw new DLPackError("shape", "a 0-d view has no axis to iterate over");
  return entries ? pairs(view, n, shape.length === 1) : items(view, n, shape.length === 1);
}

/** Whether `view`'s memory can be read and written from JS. */
function onHost(view: BufferView): boolean {
  const type = deviceOfView(view).type;
  return type === "cpu" || isHostAccessible(type);
}

/** Disposes a temporary view, parking it if even that fails. */
function drop(view: BufferView): void {
  try {
    disposeView(view);
  } catch {
    deferredObjects[deferredObjectCount[0]++] = view;
  }
}

/** The most elements a JS array holds (2^32 - 1): nested arrays of more could not even be a flat
 * list (and would exhaust the JS heap long before; the engine's heap limit still applies below). */
const MAX_JS_ARRAY = 2 ** 32 - 1;
/** The largest integer a JS number holds exactly (2^53 - 1). */
const MAX_SAFE = MAX_EXACT - 1;

/** `view.toNested()`: nested arrays of values (device memory is copied to the host first). */
export function toNested(view: BufferView): unknown {
  ownerOf(view);
  const info = infoOf(view);
  const shape = shapeOf(view);
  const size = sizeOf(view);
  if (size > MAX_JS_ARRAY) {
    throw new DLPackError(
      "overflow",
      `toNested() of ${size} elements (shape ${listText(shape)}): JS arrays hold at most 2^32 - 1; ` +
        `take part of the view with slice(), or copy() it into library memory`,
    );
  }
  let flat: AnyTypedArray;
  if (onHost(view)) flat = toArrayOf(view);
  else {
    const host = toHost(view);
    try {
      flat = toArrayOf(host);
    } finally {
      drop(host);
    }
  }
  if (shape.length === 0) return decodeElement(info, flat, 0);
  let k = 0;
  const build = (d: number): unknown[] => {
    const n = shape[d]!;
    const out = objectSlots<unknown>(n);
    for (let i = 0; i < n; i++) out[i] = d === shape.length - 1 ? decodeElement(info, flat, k++) : build(d + 1);
    return out;
  };
  return build(0);
}

function refuseWrite(view: BufferView, what: string): void {
  const access = accessOf(view);
  if (access === "readwrite") return;
  throw new DLPackError(
    "readonly",
    access === "readonly"
      ? `${what} writes this view, which is read-only`
      : `${what} writes this view, whose access is unknown (legacy DLPack); call assumeWritable() if it may be written`,
  );
}

/** `view.fill(value)`: the value checked once, then written into every element. */
export function fill(view: BufferView, value: Scalar): void {
  ownerOf(view);
  refuseWrite(view, "fill()");
  const info = infoOf(view);
  const one = new info.array(new ArrayBufferCtor(info.slots * info.slotBytes));
  encodeElement(info, value, one, 0);
  const size = sizeOf(view);
  if (size === 0) return;
  if (!onHost(view)) {
    fillDevice(view, one, size);
    return;
  }
  const a = arrayOf(view);
  const shape = shapeOf(view);
  const strides = stridesOf(view);
  const minOffset = reach(shape, strides).lo;
  const slotBits = info.bits < 8 && (flagsOf(view) & SUBBYTE_PADDED) !== 0 ? 8 : info.bits;
  const packed = info.bits < 8 && slotBits < 8;
  const ndim = shape.length;
  const index = slots(ndim);
  let at = -minOffset;
  for (let k = 0; k < size; k++) {
    // `one` holds one element: info.slots slots.
    if (packed) writeBits(a as Uint8Array, at, slotBits, minOffset, one[0] as number);
    else if (info.slots === 2) {
      a[2 * at] = one[0]!;
      a[2 * at + 1] = one[1]!;
    } else a[at] = one[0]!;
    at = nextOffset(index, shape, strides, at);
  }
}

/** Device memory: a host array of the value in the form of `toArray()`, copied over. */
function fillDevice(view: BufferView, one: AnyTypedArray, size: number): void {
  const info = infoOf(view);
  const full = new info.array(new ArrayBufferCtor(size * info.slots * info.slotBytes));
  for (let k = 0; k < size * info.slots; k++) full[k] = one[k % info.slots]!;
  const shape = shapeOf(view);
  const staged = info.bits < 8 ? packedCodes(full as Uint8Array, info, shape) : typedArrayView(full, info, shape);
  try {
    copyInto(view, staged);
  } finally {
    drop(staged);
  }
}

/** `copyFrom(nested)`: the values in the form of `toArray()`, nested exactly like the shape. */
export function flatten(view: BufferView, nested: readonly unknown[]): AnyTypedArray {
  ownerOf(view);
  const info = infoOf(view);
  const shape = shapeOf(view);
  const out = new info.array(jsBuffer(sizeOf(view) * info.slots * info.slotBytes, "copyFrom()"));
  let k = 0;
  const walk = (value: unknown, d: number): void => {
    if (d === shape.length) {
      encodeElement(info, value as Scalar, out, k++);
      return;
    }
    if (!isArray(value)) {
      throw new DLPackError("shape", `copyFrom: expected an array of ${shape[d]} at depth ${d}, got ${shown(value)}`);
    }
    const n: unknown = value.length; // read once
    const extent = shape[d]!;
    if (n !== extent) {
      throw new DLPackError(
        "shape",
        `copyFrom: an array at depth ${d} has ${shown(n)} entries; shape ${listText(shape)} needs ${extent}`,
      );
    }
    for (let i = 0; i < extent; i++) walk(value[i], d + 1);
  };
  walk(nested, 0);
  return out;
}

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
  return adoptCapsule(capsule) as TypedView<DTypeOfArray<T>, S["length"]>;
}

registerViewOps({ shaped, iterate, toNested, fill, flatten });
