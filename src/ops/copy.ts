/**
 * The copy engine: copies between views in host memory (the native strided copy) and, through
 * the CUDA driver plumbing, between host and CUDA device memory in any direction.
 * @module
 */
import { core } from "../../ffi/mod.ts";
import { copyStreamOption, DLPackError, shown } from "../facts/errors.ts";
import { type Device, formatDevice, isHostAccessible } from "../facts/devices.ts";
import type { DTypeInfo } from "../facts/dtypes.ts";
import { hasZero, listText, reach } from "../facts/layout.ts";
import { abs, slots } from "../facts/intrinsics.ts";
import { LAYOUT_C, refusalError, scratch } from "../native/description.ts";
import { deferredObjectCount, deferredObjects, retryQuietly } from "../native/owner.ts";
import {
  accessOf,
  addressOf,
  arrayOf,
  type BufferView,
  deviceOfView,
  disposeView,
  infoOf,
  isBufferView,
  layoutBitsOf,
  nbytesOf,
  ownerOf,
  shapeOf,
  sizeOf,
  stridesOf,
  toArrayOf,
} from "../view/view.ts";
import { registerViewOps } from "../view/hooks.ts";
import { packCodes } from "../view/codec.ts";
import { empty } from "./alloc.ts";
import { handleOf, producerStreams, type StreamHandle, viewArg } from "./streams.ts";

/** Options of copies between host and device memory. */
export interface CopyOptions {
  /**
   * Order the copy on this stream (after the work queued there) and wait for it. Default: the
   * source's producer stream if one was recorded, else the synchronous driver copies (ordered on
   * the legacy default stream).
   */
  readonly stream?: StreamHandle | undefined;
}

type Place = "host" | "cuda";

/** What the CUDA layer adds to the copy engine (registered by `src/cuda/copy.ts` as it loads). */
export interface DevicePaths {
  /** Copies `bytes` between two addresses of which at least one is CUDA device memory. */
  transfer(
    dst: number,
    dstDevice: Device,
    dstOnDevice: boolean,
    src: number,
    srcDevice: Device,
    srcOnDevice: boolean,
    bytes: number,
    stream: bigint | null,
  ): void;
  /** A C-contiguous copy of a CUDA device view on the same device (`view.copy()`). */
  copyOnDevice(view: BufferView): BufferView;
}

function noDevicePaths(): never {
  throw new DLPackError(
    "library",
    "copies of CUDA device memory need the CUDA layer, which is not loaded (import the library through its entry, mod.ts)",
  );
}

let devicePaths: DevicePaths = { transfer: noDevicePaths, copyOnDevice: noDevicePaths };

/** @internal Called once by the CUDA layer as it loads. */
export function registerDevicePaths(paths: DevicePaths): void {
  devicePaths = paths;
}

function placeOf(device: Device, role: string): Place {
  if (device.type === "cuda") return "cuda";
  if (isHostAccessible(device.type)) return "host";
  throw new DLPackError(
    "device",
    `copies move data between host memory (cpu, cudaHost, cudaManaged) and CUDA device memory; the ${role} is on ${
      formatDevice(device)
    }`,
  );
}

/** Copies `bytes` between two addresses, choosing the direction from where each lies. */
function transfer(
  dst: number,
  dstDevice: Device,
  src: number,
  srcDevice: Device,
  bytes: number,
  stream: bigint | null,
): void {
  if (bytes === 0) return;
  const to = placeOf(dstDevice, "destination");
  const from = placeOf(srcDevice, "source");
  if (to === "host" && from === "host") {
    hostCopy(dst, src, bytes);
    return;
  }
  devicePaths.transfer(dst, dstDevice, to === "cuda", src, srcDevice, from === "cuda", bytes, stream);
}

/** Strided gather on the host: the elements at `src` (element 0) with `strides` into `dst` in C order. */
function gather(
  dst: number,
  src: number,
  shape: readonly number[],
  strides: readonly number[],
  itemsize: number,
): void {
  scratch.setAddress(src);
  scratch.setLayout(shape, strides);
  const status = core().dlpk_copy(scratch.at, dst, itemsize);
  if (status !== 0) throw new DLPackError("library", `native copy failed with status ${status}`);
}

/** memmove for host memory (staged through a fresh buffer when the ranges overlap). */
function hostCopy(dst: number, src: number, bytes: number): void {
  if (dst === src) return;
  if (dst < src + bytes && src < dst + bytes) {
    withStaged(empty([bytes], "uint8"), (tmp) => {
      const at = addressOf(tmp);
      gather(at, src, [bytes], [1], 1);
      gather(dst, at, [bytes], [1], 1);
    });
    return;
  }
  gather(dst, src, [bytes], [1], 1);
}

/** Whether the layout covers its span exactly once (a permuted, possibly flipped C order). */
function isDense(shape: readonly number[], strides: readonly number[]): boolean {
  if (hasZero(shape)) return true;
  // Insertion sort of the non-unit dims by |stride| (at most 64), in arrays of own slots.
  const extents = slots(shape.length);
  const steps = slots(shape.length);
  let n = 0;
  // n stays at most shape.length, the arrays' length; strides are as long as the shape.
  for (let d = 0; d < shape.length; d++) {
    const extent = shape[d]!;
    if (extent === 1) continue;
    const step = abs(strides[d]!);
    let i = n++;
    while (i > 0 && steps[i - 1]! > step) {
      steps[i] = steps[i - 1]!;
      extents[i] = extents[i - 1]!;
      i--;
    }
    steps[i] = step;
    extents[i] = extent;
  }
  let expected = 1;
  for (let i = 0; i < n; i++) {
    if (steps[i] !== expected) return false;
    expected *= extents[i]!;
  }
  return true;
}

function sameLayout(shape: readonly number[], a: readonly number[], b: readonly number[]): boolean {
  for (let d = 0; d < shape.length; d++) {
    if (shape[d] !== 1 && a[d] !== b[d]) return false;
  }
  return true;
}

function sameShape(a: readonly number[], b: readonly number[]): boolean {
  if (a.length !== b.length) return false;
  for (let d = 0; d < a.length; d++) if (a[d] !== b[d]) return false;
  return true;
}

/** Makes a library-owned host view, runs `body` with it, and disposes it whatever happens. */
function withStaged<T>(staged: BufferView, body: (staged: BufferView) => T): T {
  try {
    return body(staged);
  } finally {
    try {
      disposeView(staged);
    } catch {
      deferredObjects[deferredObjectCount[0]++] = staged;
    }
  }
}

/**
 * Copies `src` into `dst` element by element (same dtype and shape), between host memory (cpu,
 * cudaHost, cudaManaged) and CUDA device memory in any direction, device to device included. The
 * copy is complete when this returns. `dst` must be writable and either C-contiguous or laid out
 * exactly like `src` with no gaps; `src` may have any strides (device data is then staged through
 * the host). Implements `view.copyFrom(src)`.
 */
export function copyInto(dst: BufferView, src: BufferView, opts?: CopyOptions): void {
  viewArg(dst, "copyInto (destination)");
  if (!isBufferView(src)) {
    throw new DLPackError("argument", `copyFrom takes a BufferView or a TypedArray, got ${shown(src)}`);
  }
  ownerOf(dst);
  ownerOf(src); // both throw "disposed"
  // The options read once, before anything moves.
  const streamOption = copyStreamOption(opts);
  const dstInfo = infoOf(dst);
  const srcInfo = infoOf(src);
  if (dstInfo !== srcInfo) {
    throw new DLPackError("dtype", `copyFrom: the source is ${srcInfo.name}, this view is ${dstInfo.name}`);
  }
  const shape = shapeOf(dst);
  const srcShape = shapeOf(src);
  if (!sameShape(shape, srcShape)) {
    throw new DLPackError(
      "shape",
      `copyFrom: the source has shape ${listText(srcShape)}, this view ${listText(shape)}`,
    );
  }
  const access = accessOf(dst);
  if (access !== "readwrite") {
    throw new DLPackError(
      "readonly",
      access === "readonly"
        ? "copyFrom writes this view, which is read-only"
        : "copyFrom writes this view, whose access is unknown (legacy DLPack); call assumeWritable() if it may be written",
    );
  }
  const dstDevice = deviceOfView(dst);
  const srcDevice = deviceOfView(src);
  const to = placeOf(dstDevice, "destination");
  const from = placeOf(srcDevice, "source");
  if (sizeOf(dst) === 0) return;
  const stream = streamOption !== undefined ? handleOf(streamOption, "stream") : producerStreams.get(src) ?? null;
  // Again, now that no caller code runs any more: the option's getters may have disposed either.
  ownerOf(dst);
  ownerOf(src);
  const bits = dstInfo.bits;
  const dstStrides = stridesOf(dst);
  const srcStrides = stridesOf(src);
  const dstAddress = addressOf(dst);
  const srcAddress = addressOf(src);
  const nbytes = nbytesOf(dst);
  const dstC = (layoutBitsOf(dst) & LAYOUT_C) !== 0;
  const srcC = (layoutBitsOf(src) & LAYOUT_C) !== 0;

  // Same layout, no gaps: one copy of the whole span.
  if (sameLayout(shape, dstStrides, srcStrides) && isDense(shape, dstStrides)) {
    const lo = reach(shape, dstStrides).lo;
    if (bits >= 8 || (dstC && srcC && lo === 0)) {
      const offset = lo * (bits / 8);
      transfer(dstAddress + offset, dstDevice, srcAddress + offset, srcDevice, nbytes, stream);
      return;
    }
  }
  if (!dstC) {
    throw new DLPackError(
      "strides",
      `copyFrom: this view must be C-contiguous, or laid out like the source with no gaps; it has strides ${
        listText(dstStrides)
      }, the source ${listText(srcStrides)}`,
    );
  }
  if (bits < 8) {
    throw new DLPackError(
      "dtype",
      `copyFrom: packed ${dstInfo.name} data is only copied between views of the same contiguous layout`,
    );
  }
  const itemsize = bits / 8;
  if (from === "host") {
    if (to === "host") {
      // A strided host source: gather straight into the destination (staged if they overlap).
      const r = reach(srcShape, srcStrides);
      const srcStart = srcAddress + r.lo * itemsize;
      const srcEnd = srcAddress + (r.hi + 1) * itemsize;
      if (dstAddress < srcEnd && srcStart < dstAddress + nbytes) {
        withStaged(copyOf(src), (staged) => hostCopy(dstAddress, addressOf(staged), nbytes));
      } else gather(dstAddress, srcAddress, shape, srcStrides, itemsize);
      return;
    }
    withStaged(copyOf(src), (staged) => {
      transfer(dstAddress, dstDevice, addressOf(staged), deviceOfView(staged), nbytes, stream);
    });
    return;
  }
  // A strided device source: bring its byte span to the host, gather there.
  const r = reach(srcShape, srcStrides);
  const spanBytes = (r.hi - r.lo + 1) * itemsize;
  withStaged(empty([spanBytes], "uint8"), (span) => {
    const spanAddress = addressOf(span);
    transfer(spanAddress, deviceOfView(span), srcAddress + r.lo * itemsize, srcDevice, spanBytes, stream);
    const zero = spanAddress - r.lo * itemsize;
    if (to === "host") {
      gather(dstAddress, zero, shape, srcStrides, itemsize);
      return;
    }
    withStaged(empty(shape, dstInfo.name), (ordered) => {
      gather(addressOf(ordered), zero, shape, srcStrides, itemsize);
      transfer(dstAddress, dstDevice, addressOf(ordered), deviceOfView(ordered), nbytes, null);
    });
  });
}

/**
 * A new C-contiguous view in library-owned host (CPU) memory with `view`'s values: CUDA device
 * memory is copied through the driver (ordered after the view's producer stream, or on
 * `opts.stream`), host-accessible memory directly. Implements `view.toHost()`.
 */
export function toHost(view: BufferView, opts?: CopyOptions): BufferView {
  viewArg(view, "toHost");
  ownerOf(view);
  placeOf(deviceOfView(view), "view");
  const out = empty(shapeOf(view), infoOf(view).name);
  try {
    copyInto(out, view, opts);
  } catch (error) {
    deferredObjects[deferredObjectCount[0]++] = out; // parked before any call: the stack may be exhausted
    retryQuietly();
    throw error;
  }
  return out;
}

/** A C-contiguous copy of a view in library memory (the native strided copy); CUDA device views
 * are copied on their device. */
export function copyOf(view: BufferView): BufferView {
  ownerOf(view); // throws "disposed": the copy reads the view's memory
  const device = deviceOfView(view);
  if (device.type === "cuda") return devicePaths.copyOnDevice(view);
  if (!isHostAccessible(device.type)) {
    throw new DLPackError(
      "device",
      `copy() of ${formatDevice(device)} memory needs a device copy; this view is not on the host`,
    );
  }
  const info = infoOf(view);
  const shape = shapeOf(view);
  const out = empty(shape, info.name);
  // The copy is ours until returned: any exception (an exhausted stack included) disposes it.
  try {
    if (sizeOf(view) === 0) return out;
    if (info.bits < 8) {
      // Sub-byte elements (packed or padded): one code per byte from toArray(), packed into the copy.
      packCodes(toArrayOf(view) as Uint8Array, arrayOf(out) as Uint8Array, info.bits);
      return out;
    }
    scratch.setAddress(addressOf(view));
    scratch.setLayout(shape, stridesOf(view));
    const status = core().dlpk_copy(scratch.at, addressOf(out), info.bits / 8);
    if (status !== 0) throw refusalError(status, scratch, null);
    return out;
  } catch (error) {
    deferredObjects[deferredObjectCount[0]++] = out; // parked before any call: the stack may be exhausted
    retryQuietly();
    throw error;
  }
}

/** @internal A packed host copy of one-code-per-element sub-byte data, shaped like `shape` (C order). */
export function packedCodes(codes: Uint8Array, info: DTypeInfo, shape: readonly number[]): BufferView {
  const out = empty(shape, info.name);
  try {
    packCodes(codes, arrayOf(out) as Uint8Array, info.bits);
  } catch (error) {
    deferredObjects[deferredObjectCount[0]++] = out; // parked before any call: the stack may be exhausted
    retryQuietly();
    throw error;
  }
  return out;
}

registerViewOps({ copy: copyOf, toHost, copyInto, packedCodes });
