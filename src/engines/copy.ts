/**
 * The copy engine: copies between views in host memory (the native strided copy) and, through
 * the CUDA driver, between host and CUDA device memory in any direction, device to device
 * included. Copies that make memory return an owned record (a library allocation); temporaries
 * are released before the copy returns.
 * @module
 */
import { core } from "../../ffi/mod.ts";
import { DLPackError, withArticle } from "../facts/errors.ts";
import { type Device, formatDevice, isHostAccessible } from "../facts/devices.ts";
import { type AnyTypedArray, type DTypeInfo, dtypeInfo } from "../facts/dtypes.ts";
import { hasZero, listText, reach } from "../facts/layout.ts";
import { abs, slots, typedArrayLength } from "../facts/intrinsics.ts";
import { LAYOUT_C, scratch } from "../native/scratch.ts";
import { refusalError } from "../native/refusals.ts";
import { releaseTop } from "../native/journal.ts";
import { cudaCheck, driverAvailable, ensureDriver, missingDriver } from "../native/cuda_driver.ts";
import { allocate, allocateHost, DEFAULT_ALIGNMENT } from "./alloc.ts";
import { gather, packCodes, scatter, spanArray } from "./codec.ts";
import { stagedArray, typedArraySource } from "./arrays.ts";
import { handleOf, producerStreams, type StreamHandle } from "./streams.ts";
import type { Owned, ViewFacts, ViewState } from "./state.ts";

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
  deviceTransfer(dst, dstDevice, to === "cuda", src, srcDevice, from === "cuda", bytes, stream);
}

/** Copies `bytes` between two addresses of which at least one is CUDA device memory, on `stream`
 * when one is given (complete on return). */
function deviceTransfer(
  dst: number,
  dstDevice: Device,
  dstOnDevice: boolean,
  src: number,
  srcDevice: Device,
  srcOnDevice: boolean,
  bytes: number,
  stream: bigint | null,
): void {
  const direction = dstOnDevice ? (srcOnDevice ? (dstDevice.id === srcDevice.id ? 2 : 3) : 0) : 1;
  const ordinal = dstOnDevice ? dstDevice.id : srcDevice.id;
  const srcOrdinal = srcOnDevice ? srcDevice.id : ordinal;
  const what = `copying ${bytes} bytes from ${formatDevice(srcDevice)} to ${formatDevice(dstDevice)}`;
  ensureDriver(what);
  cudaCheck(
    core().dlpk_cuda_copy(direction, dst, src, bytes, ordinal, srcOrdinal, stream ?? 0n, stream === null ? 0 : 1),
    what,
    ordinal,
  );
}

/** Strided gather on the host: the elements at `src` (element 0) with `strides` into `dst` in C order. */
function gatherNative(
  dst: number,
  src: number,
  shape: readonly number[],
  strides: readonly number[],
  itemsize: number,
): void {
  scratch.setAddress(src);
  scratch.setLayout(shape, strides);
  const status = core().dlpk_copy(scratch.at, dst, itemsize);
  if (status !== 0) throw refusalError(status, scratch, null);
}

/** memmove for host memory (staged through a fresh buffer when the ranges overlap). */
function hostCopy(dst: number, src: number, bytes: number): void {
  if (dst === src) return;
  if (dst < src + bytes && src < dst + bytes) {
    withTemporary(allocateHost([bytes], UINT8), (tmp) => {
      gatherNative(tmp.address, src, [bytes], [1], 1);
      gatherNative(dst, tmp.address, [bytes], [1], 1);
    });
    return;
  }
  gatherNative(dst, src, [bytes], [1], 1);
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

const UINT8 = dtypeInfo("uint8");

/** Runs `body` with a library allocation the engine just made (journaled, the top entry), then
 * releases it. An exception leaves it journaled, to be released at the next replay: temporaries
 * end in the order they were made, each on top when it goes. */
function withTemporary<T>(owned: Owned, body: (tmp: Owned) => T): T {
  const result = body(owned);
  releaseTop(owned.owner);
  return result;
}

/** The refusal of a copy into a view that may not be written (`facts` say why: a broadcast). */
export function refuseWrite(access: ViewState["access"], what: string, facts?: ViewFacts): void {
  if (access === "readwrite") return;
  throw new DLPackError(
    "readonly",
    access === "readonly"
      ? `${what} writes this view, which is ${readonlyReason(facts)}`
      : `${what} writes this view, whose access is unknown (legacy DLPack); call assumeWritable() if it may be written`,
  );
}

/** Why a read-only view is read-only, as the end of a sentence: a broadcast (an axis of stride 0
 * repeats its elements) says so; otherwise the producer or the caller marked it. */
export function readonlyReason(facts: ViewFacts | undefined): string {
  if (facts !== undefined) {
    const shape = facts.shape;
    for (let d = 0; d < shape.length; d++) {
      if (facts.strides[d] === 0 && shape[d]! > 1) {
        return `a broadcast (axis ${d} has stride 0: its ${shape[d]} elements are one), so read-only; ` +
          `copy() it for a writable copy`;
      }
    }
  }
  return "read-only (its producer marked the tensor READ_ONLY, its memory cannot be written in this process, it " +
    "was made with readonly: true, or it was derived from a broadcast)";
}

/**
 * Copies `src` into `dst` element by element (same dtype and shape), between host memory (cpu,
 * cudaHost, cudaManaged) and CUDA device memory in any direction, device to device included. The
 * copy is complete when this returns. `dst` must be writable and either C-contiguous or laid out
 * exactly like `src` with no gaps; `src` may have any strides (device data is then staged through
 * the host). `stream`: the caller's option, read once already (undefined: none).
 */
export function copyInto(dst: ViewState, src: ViewState, stream: StreamHandle | undefined): void {
  const d = dst.facts;
  const s = src.facts;
  if (d.info !== s.info) {
    throw new DLPackError(
      "dtype",
      `copyFrom: the source is ${s.info.name}, this view is ${d.info.name}; copyFrom(src, { cast: true }) converts`,
    );
  }
  if (!sameShape(d.shape, s.shape)) {
    throw new DLPackError(
      "shape",
      `copyFrom: the source has shape ${listText(s.shape)}, this view ${listText(d.shape)}`,
    );
  }
  refuseWrite(dst.access, "copyFrom", d);
  const to = placeOf(d.device, "destination");
  const from = placeOf(s.device, "source");
  if (d.size === 0) return;
  const order = stream !== undefined ? handleOf(stream, "stream") : producerStreams.get(src.key) ?? null;
  copyElements(dst, to, src, from, order);
}

/** {@link copyInto} once every argument is checked. */
function copyElements(dst: ViewState, to: Place, src: ViewState, from: Place, stream: bigint | null): void {
  const d = dst.facts;
  const s = src.facts;
  const shape = d.shape;
  const bits = d.info.bits;
  const dstC = (d.layout & LAYOUT_C) !== 0;
  const srcC = (s.layout & LAYOUT_C) !== 0;
  // Same layout, no gaps: one copy of the whole span.
  if (sameLayout(shape, d.strides, s.strides) && isDense(shape, d.strides)) {
    const lo = reach(shape, d.strides).lo;
    if (bits >= 8 || (dstC && srcC && lo === 0)) {
      const offset = lo * (bits / 8);
      transfer(dst.address + offset, d.device, src.address + offset, s.device, d.nbytes, stream);
      return;
    }
  }
  if (!dstC) {
    throw new DLPackError(
      "strides",
      `copyFrom: this view must be C-contiguous, or laid out like the source with no gaps; it has strides ${
        listText(d.strides)
      }, the source ${listText(s.strides)}`,
    );
  }
  if (bits < 8) {
    throw new DLPackError(
      "dtype",
      `copyFrom: packed ${d.info.name} data is only copied between views of the same contiguous layout`,
    );
  }
  if (from === "host") copyFromHost(dst, to, src, stream);
  else copyFromDevice(dst, to, src, stream);
}

/** A strided host source into a C-contiguous destination. */
function copyFromHost(dst: ViewState, to: Place, src: ViewState, stream: bigint | null): void {
  const d = dst.facts;
  const s = src.facts;
  const itemsize = d.info.bits / 8;
  if (to === "host") {
    // Gathered straight into the destination (staged if they overlap).
    const r = reach(s.shape, s.strides);
    const srcStart = src.address + r.lo * itemsize;
    const srcEnd = src.address + (r.hi + 1) * itemsize;
    if (dst.address < srcEnd && srcStart < dst.address + d.nbytes) {
      withTemporary(copyOf(src), (staged) => hostCopy(dst.address, staged.address, d.nbytes));
    } else gatherNative(dst.address, src.address, d.shape, s.strides, itemsize);
    return;
  }
  withTemporary(copyOf(src), (staged) => {
    transfer(dst.address, d.device, staged.address, staged.facts.device, d.nbytes, stream);
  });
}

/** A strided device source: its byte span brought to the host, gathered there. */
function copyFromDevice(dst: ViewState, to: Place, src: ViewState, stream: bigint | null): void {
  const d = dst.facts;
  const s = src.facts;
  const itemsize = d.info.bits / 8;
  const r = reach(s.shape, s.strides);
  const spanBytes = (r.hi - r.lo + 1) * itemsize;
  withTemporary(allocateHost([spanBytes], UINT8), (span) => {
    transfer(span.address, span.facts.device, src.address + r.lo * itemsize, s.device, spanBytes, stream);
    const zero = span.address - r.lo * itemsize;
    if (to === "host") {
      gatherNative(dst.address, zero, d.shape, s.strides, itemsize);
      return;
    }
    withTemporary(allocateHost(d.shape, d.info), (ordered) => {
      gatherNative(ordered.address, zero, d.shape, s.strides, itemsize);
      transfer(dst.address, d.device, ordered.address, ordered.facts.device, d.nbytes, null);
    });
  });
}

/** Runs `fill` on a library allocation the engine just made (journaled: an exception leaves it to
 * be released) and returns it, for the caller to hold. */
function filled(owned: Owned, fill: (out: Owned) => void): Owned {
  fill(owned);
  return owned;
}

/**
 * A new C-contiguous copy in library-owned host (CPU) memory of `view`'s values: CUDA device
 * memory is copied through the driver (ordered after the view's producer stream, or on `stream`),
 * host-accessible memory directly (`view.toHost()`).
 */
export function toHost(view: ViewState, stream: StreamHandle | undefined): Owned {
  placeOf(view.facts.device, "view");
  return filled(allocateHost(view.facts.shape, view.facts.info), (out) => copyInto(stateOfOwned(out), view, stream));
}

/** A C-contiguous copy of a view in library memory (the native strided copy); CUDA device views
 * are copied on their device (`view.copy()`). */
export function copyOf(view: ViewState): Owned {
  const f = view.facts;
  const device = f.device;
  if (device.type === "cuda") return copyOnDevice(view);
  if (!isHostAccessible(device.type)) {
    throw new DLPackError(
      "device",
      `copy() of ${formatDevice(device)} memory needs a device copy; this view is not on the host`,
    );
  }
  return filled(allocateHost(f.shape, f.info), (out) => {
    if (f.size === 0) return;
    if (f.info.bits < 8) {
      // Sub-byte elements (packed or padded): one code per byte, packed into the copy.
      packCodes(
        gather(f, spanArray(view.address, f)) as Uint8Array,
        spanArray(out.address, out.facts) as Uint8Array,
        f.info.bits,
      );
      return;
    }
    gatherNative(out.address, view.address, f.shape, f.strides, f.info.bits / 8);
  });
}

/** A C-contiguous copy of a CUDA device view on the same device. */
function copyOnDevice(view: ViewState): Owned {
  const device = view.facts.device;
  if (!driverAvailable()) throw missingDriver(`copy() of ${formatDevice(device)} data`);
  const out = allocate(
    copyShape(view.facts.shape),
    view.facts.info,
    { kind: 0, id: device.id },
    DEFAULT_ALIGNMENT,
    false,
  );
  return filled(out, (made) => copyInto(stateOfOwned(made), view, undefined));
}

function copyShape(shape: readonly number[]): number[] {
  const out = slots(shape.length);
  for (let d = 0; d < shape.length; d++) out[d] = shape[d]!;
  return out;
}

/** The state of memory an engine made, for a copy into it (no view holds it: it is its own key). */
function stateOfOwned(owned: Owned): ViewState {
  return { owner: owned.owner, address: owned.address, facts: owned.facts, access: owned.access, key: owned };
}

/** A packed host copy of one-code-per-element sub-byte data, shaped like `shape` (C order). */
function packedCodes(codes: Uint8Array, info: DTypeInfo, shape: readonly number[]): Owned {
  return filled(allocateHost(shape, info), (out) => {
    packCodes(codes, spanArray(out.address, out.facts) as Uint8Array, info.bits);
  });
}

/**
 * Copies a TypedArray in the form of `toArray()` (`tag` its checked type) into `dst`: the array of
 * `dst`'s dtype holding every element in C order (complex interleaved, sub-byte floats one code
 * per element). `stream` as in {@link copyInto}.
 */
export function copyFromArray(
  dst: ViewState,
  src: AnyTypedArray,
  tag: string,
  stream: StreamHandle | undefined,
): void {
  const d = dst.facts;
  const info = d.info;
  if (tag !== info.tag && !(tag === "Uint8ClampedArray" && info.tag === "Uint8Array")) {
    throw new DLPackError(
      "dtype",
      `copyFrom: ${withArticle(info.name)} view takes ${withArticle(info.tag)} (the form of toArray()), got ${
        withArticle(tag)
      }`,
    );
  }
  // Checked as an export checks a TypedArray it lends: a detached buffer is refused as such, and
  // a resizable one could move.
  typedArraySource(src, tag);
  const length = typedArrayLength(src);
  const needed = d.size * info.slots;
  if (length !== needed) {
    throw new DLPackError(
      "shape",
      `copyFrom: the ${tag} has ${length} elements; this view of shape ${listText(d.shape)} needs ${needed}`,
    );
  }
  refuseWrite(dst.access, "copyFrom", d);
  if (d.size === 0) return;
  const host = d.device.type === "cpu" || isHostAccessible(d.device.type);
  if (host && (info.bits < 8 || (d.layout & LAYOUT_C) === 0)) {
    // Sub-byte codes, or a strided destination the native copy does not scatter into.
    scatter(d, spanArray(dst.address, d), src);
    return;
  }
  if (info.bits < 8) {
    withTemporary(packedCodes(src as Uint8Array, info, d.shape), (staged) => {
      copyInto(dst, stateOfOwned(staged), stream);
    });
    return;
  }
  // A view of the TypedArray's own memory, pinned (and journaled) until the copy is done.
  withTemporary(stagedArray(src, tag, d), (staged) => copyInto(dst, stateOfOwned(staged), stream));
}
