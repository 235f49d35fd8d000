/**
 * CUDA: the driver's view of devices and pointers, device / page-locked / managed allocations,
 * copies between host and device memory, and the stream fencing of the DLPack protocol. The
 * driver (`libcuda.so.1`, or `DLPACK_CUDA_LIB`) is opened by libdlpack at first use; without it
 * every call here throws `DLPackError` with code "cuda" saying why, and the rest of the library
 * works as before.
 * @module
 */
import { core, runtime } from "../../ffi/mod.ts";
import { DLPackError, shown } from "../facts/errors.ts";
import { type AddressLike, toAddress } from "../native/address.ts";
import {
  accessOf,
  addressOf,
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
} from "../view/view.ts";
import {
  type Capsule,
  capsuleAddress,
  capsuleOwned,
  capsuleVersioned,
  disposeCapsule,
  isCapsule,
} from "../native/capsule.ts";
import { type Device, type DeviceType, formatDevice, isHostAccessible } from "../facts/devices.ts";
import { LAYOUT_C, scratch } from "../native/description.ts";
import { hasZero, listText, reach } from "../facts/layout.ts";
import { copyOf, empty } from "../ops/alloc.ts";
import { abs, isCount, newWeakMap, objectSlots, slots } from "../facts/intrinsics.ts";
import { deferredCount, deferredObjects, retryQuietly } from "../native/owner.ts";
import {
  cudaCheck,
  cudaError,
  driverAvailable,
  driverReason,
  ensureDriver,
  isCudaFamily,
  missingDriver,
} from "../native/cuda_driver.ts";

export { CudaDriverError, isCudaFamily } from "../native/cuda_driver.ts";

// ---------------------------------------------------------------------------------------------
// Driver and devices

/** What `available()` reports. */
export interface CudaAvailability {
  /** Whether a CUDA driver was loaded and initialized and sees at least one device. */
  readonly available: boolean;
  /** Why not, when unavailable: the dlopen error, or the failing driver call and its error name. */
  readonly reason?: string;
  /** The driver's CUDA version as `cuDriverGetVersion` reports it (12080 is 12.8), when available. */
  readonly driverVersion?: number;
  /** Devices the driver sees (0 when unavailable). */
  readonly deviceCount: number;
}

/**
 * Whether the CUDA driver is usable here, and if not, why. Opens the driver on first call; never
 * throws.
 */
export function available(): CudaAvailability {
  if (!driverAvailable()) return { available: false, reason: driverReason(), deviceCount: 0 };
  return {
    available: true,
    driverVersion: core().dlpk_cuda_driver_version(),
    deviceCount: core().dlpk_cuda_device_count(),
  };
}

/** One CUDA device as the driver describes it. */
export interface CudaDevice {
  /** The device ordinal (the `id` of `cuda:<id>`). */
  readonly id: number;
  /** The driver's name for the device. */
  readonly name: string;
  /** Device memory in bytes. */
  readonly totalMemory: number;
  /** Compute capability `[major, minor]`. */
  readonly computeCapability: readonly [number, number];
  /** Streaming multiprocessors. */
  readonly multiprocessors: number;
  /** The PCI bus id ("0000:65:00.0"). */
  readonly pciBusId: string;
}

const infoOut = new Float64Array(8);
const textOut = new Uint8Array(512);
const decoder = new TextDecoder();

/** Every device the driver sees. Throws `DLPackError` ("cuda") without a driver. */
export function devices(): CudaDevice[] {
  ensureDriver("cuda.devices()");
  const count = core().dlpk_cuda_device_count();
  const out = objectSlots<CudaDevice>(count);
  for (let id = 0; id < count; id++) {
    textOut.fill(0);
    cudaCheck(core().dlpk_cuda_device_info(id, infoOut, textOut, textOut.length - 1), "cuda.devices()", id);
    const end = textOut.indexOf(0);
    const lines = decoder.decode(textOut.subarray(0, end < 0 ? textOut.length : end)).split("\n");
    const name = lines[0] ?? "";
    const pciBusId = lines[1] ?? "";
    out[id] = {
      id,
      name,
      totalMemory: infoOut[0],
      computeCapability: [infoOut[1], infoOut[2]],
      multiprocessors: infoOut[3],
      pciBusId,
    };
  }
  return out as CudaDevice[];
}

/** What the driver knows about an address (`cuPointerGetAttributes`). */
export interface PointerInfo {
  /** "unregistered" for memory CUDA does not know (ordinary pageable host memory). */
  readonly memoryType: "unregistered" | "host" | "device" | "array" | "unified";
  /** The device the memory was allocated on or registered with; null when unregistered. */
  readonly device: number | null;
  /** Whether it is managed (unified) memory. */
  readonly managed: boolean;
  /** Start of the allocation containing the address, when the driver says. */
  readonly rangeStart: bigint | null;
  /** Size in bytes of that allocation, when the driver says. */
  readonly rangeSize: number | null;
}

const MEMORY_TYPES = ["unregistered", "host", "device", "array", "unified"] as const;

/** The driver's attributes of `address`. Throws `DLPackError` ("cuda") without a driver. */
export function pointerInfo(address: AddressLike): PointerInfo {
  const a = toAddress(address, "address");
  ensureDriver("cuda.pointerInfo()");
  cudaCheck(core().dlpk_cuda_pointer_info(a, infoOut), "cuda.pointerInfo()");
  const type = MEMORY_TYPES[infoOut[0]] ?? "unregistered";
  return {
    memoryType: type,
    device: type === "unregistered" ? null : infoOut[1],
    managed: infoOut[2] !== 0,
    rangeStart: infoOut[4] > 0 ? BigInt(infoOut[3]) : null,
    rangeSize: infoOut[4] > 0 ? infoOut[4] : null,
  };
}

/** Live CUDA memory and events held by this library. */
export interface CudaStats {
  /** Device allocations (`empty`/`zeros` on "cuda", copies) not yet freed. */
  readonly deviceAllocations: number;
  /** Their bytes. */
  readonly deviceBytes: number;
  /** Page-locked host allocations ("cudaHost"). */
  readonly hostAllocations: number;
  /** Their bytes. */
  readonly hostBytes: number;
  /** Managed allocations ("cudaManaged"). */
  readonly managedAllocations: number;
  /** Their bytes. */
  readonly managedBytes: number;
  /** Events created through this library and not destroyed (exports carrying a stream hold one). */
  readonly events: number;
  /** Frees the driver refused (counted because a release cannot throw). */
  readonly freeFailures: number;
}

const statsOut = new Float64Array(8);

/** The live CUDA counts (all zero when nothing is held; needs no driver). */
export function cudaStats(): CudaStats {
  statsOut.fill(0);
  core().dlpk_cuda_stats(statsOut);
  return {
    deviceAllocations: statsOut[0],
    deviceBytes: statsOut[1],
    hostAllocations: statsOut[2],
    hostBytes: statsOut[3],
    managedAllocations: statsOut[4],
    managedBytes: statsOut[5],
    events: statsOut[6],
    freeFailures: statsOut[7],
  };
}

// ---------------------------------------------------------------------------------------------
// Streams and events

/** A `CUstream` / `cudaStream_t` handle, or 1 (legacy default stream) or 2 (per-thread default). */
export type StreamHandle = bigint | number;

/** The legacy default stream (the protocol's `stream=1`, and what `None` means). */
export const LEGACY_STREAM = 1n;
/** The per-thread default stream (the protocol's `stream=2`). */
export const PER_THREAD_STREAM = 2n;

const handleOut = new BigUint64Array(1);

/** A handle argument as a bigint (numbers, bigints and pointer objects accepted). */
function handleOf(value: unknown, what: string): bigint {
  const v = typeof value === "object" && value !== null ? runtime().pointerValue(value) : value;
  if (typeof v === "bigint" && v >= 0n && v < 1n << 64n) return v;
  if (isCount(v)) return BigInt(v);
  if (typeof v !== "bigint" && typeof v !== "number") {
    throw new DLPackError(
      "argument",
      `${what} must be a stream or event handle (a non-negative integer or bigint), got ${shown(value)}`,
    );
  }
  throw new DLPackError(
    "cuda",
    `${what} must be a stream or event handle (a non-negative integer), got ${shown(value)}`,
  );
}

function deviceArg(device: unknown, what: string): number {
  if (device === undefined) return 0;
  if (typeof device !== "number") {
    throw new DLPackError("argument", `${what}: device must be an ordinal (a number), got ${shown(device)}`);
  }
  if (device % 1 !== 0 || device < 0 || device > 0x7fff_ffff) {
    throw new DLPackError("device", `${what}: device must be an ordinal, got ${device}`);
  }
  return device;
}

/** The view argument of a public function: a real view of this library, live. */
function viewArg(value: unknown, what: string): BufferView {
  if (!isBufferView(value)) throw new DLPackError("argument", `${what} takes a BufferView, got ${shown(value)}`);
  return value;
}

/** Creates a non-blocking stream on `device`; destroy it with {@link destroyStream}. */
export function createStream(device?: number): bigint {
  const d = deviceArg(device, "cuda.createStream()");
  cudaCheck(core().dlpk_cuda_stream_create(d, handleOut), "cuda.createStream()", d);
  return handleOut[0];
}

/** Destroys a stream made by {@link createStream}. */
export function destroyStream(stream: StreamHandle, device?: number): void {
  const d = deviceArg(device, "cuda.destroyStream()");
  const s = handleOf(stream, "stream");
  if (s <= PER_THREAD_STREAM) throw new DLPackError("cuda", `the default streams (${s}) cannot be destroyed`);
  cudaCheck(core().dlpk_cuda_stream_destroy(d, s), "cuda.destroyStream()", d);
}

/** Waits until all work queued on `stream` (default: the legacy default stream) is done. */
export function synchronize(stream: StreamHandle = LEGACY_STREAM, device?: number): void {
  const d = deviceArg(device, "cuda.synchronize()");
  cudaCheck(core().dlpk_cuda_stream_synchronize(d, handleOf(stream, "stream")), "cuda.synchronize()", d);
}

/** Creates an event (timing disabled) on `device`; destroy it with {@link destroyEvent}. */
export function createEvent(device?: number): bigint {
  const d = deviceArg(device, "cuda.createEvent()");
  cudaCheck(core().dlpk_cuda_event_create(d, handleOut), "cuda.createEvent()", d);
  return handleOut[0];
}

/** Records `event` on `stream`: it completes when the work queued there so far is done. */
export function recordEvent(event: StreamHandle, stream: StreamHandle, device?: number): void {
  const d = deviceArg(device, "cuda.recordEvent()");
  cudaCheck(
    core().dlpk_cuda_event_record(d, handleOf(event, "event"), handleOf(stream, "stream")),
    "cuda.recordEvent()",
    d,
  );
}

/** Makes `stream` wait (on the device, without blocking the host) until `event` completes. */
export function waitEvent(stream: StreamHandle, event: StreamHandle, device?: number): void {
  const d = deviceArg(device, "cuda.waitEvent()");
  cudaCheck(
    core().dlpk_cuda_stream_wait_event(d, handleOf(stream, "stream"), handleOf(event, "event")),
    "cuda.waitEvent()",
    d,
  );
}

/** Destroys an event made by {@link createEvent}. */
export function destroyEvent(event: StreamHandle, device?: number): void {
  const d = deviceArg(device, "cuda.destroyEvent()");
  cudaCheck(core().dlpk_cuda_event_destroy(d, handleOf(event, "event")), "cuda.destroyEvent()", d);
}

// ---------------------------------------------------------------------------------------------
// Producer streams and the protocol's stream fencing

const producerStreams = newWeakMap<BufferView, bigint>();

/** The device whose context fences and copies of this view use. */
function ordinalOf(device: Device): number {
  return device.type === "cuda" ? device.id : 0;
}

/**
 * Records that work writing `view`'s data is queued on `stream` (for instance the stream a
 * producer was asked to make the data ready on): later fences, copies and exports of the view
 * order themselves after that work. `null` forgets it (the legacy default stream is assumed).
 */
export function setProducerStream(view: BufferView, stream: StreamHandle | null): void {
  const device = deviceOfView(viewArg(view, "setProducerStream"));
  if (!isCudaFamily(device.type)) {
    throw new DLPackError("device", `a producer stream only applies to CUDA data; this view is on ${device.type}`);
  }
  if (stream === null) producerStreams.delete(view);
  else producerStreams.set(view, handleOf(stream, "stream"));
}

/** The stream recorded by {@link setProducerStream}, or null. */
export function producerStream(view: BufferView): bigint | null {
  return producerStreams.get(viewArg(view, "producerStream")) ?? null;
}

function sameStream(a: bigint, b: bigint): boolean {
  return (a === 0n ? 1n : a) === (b === 0n ? 1n : b);
}

/**
 * A `__dlpack__(stream=...)` value as the consumer stream: null for -1 (no synchronization),
 * 1 for `None`/`undefined` (the legacy default stream); 0 is refused (the protocol disallows it).
 */
export function consumerStream(stream: unknown): bigint | null {
  if (stream === undefined || stream === null) return LEGACY_STREAM;
  if (stream === -1 || stream === -1n) return null;
  if (stream === 0 || stream === 0n) {
    throw new DLPackError(
      "cuda",
      "stream 0 is not allowed by the DLPack protocol (ambiguous): pass 1 for the legacy default stream, " +
        "2 for the per-thread default stream, -1 for no synchronization, or a stream handle",
    );
  }
  return handleOf(stream, "stream");
}

/**
 * The producer side of `__dlpack__(stream=...)` for `view`: makes the consumer's stream wait for
 * the work queued on the view's producer stream (see {@link setProducerStream}; the legacy
 * default stream when none was recorded), by recording an event there and making the consumer
 * stream wait on it. `stream` follows the protocol: `undefined`/`null` (Python's None) is the
 * legacy default stream, -1 means no synchronization, 0 is refused, 1 and 2 are the legacy and
 * per-thread default streams, anything larger is a stream handle. Nothing happens when both are
 * the same stream. For host data only `undefined`/`null` is allowed (as the protocol says for
 * CPU). The Python bridge calls this before handing a capsule to a consumer that passed a stream.
 */
export function fenceForConsumer(view: BufferView, stream: unknown): void {
  const device = deviceOfView(viewArg(view, "fenceForConsumer"));
  if (!isCudaFamily(device.type)) {
    if (stream === undefined || stream === null) return;
    throw new DLPackError("device", `stream must be None for ${device.type} data, got ${shown(stream)}`);
  }
  ownerOf(view); // throws "disposed"
  const consumer = consumerStream(stream);
  if (consumer === null) return;
  const producer = producerStreams.get(view) ?? LEGACY_STREAM;
  if (sameStream(producer, consumer)) return;
  const what = `synchronizing stream ${consumer} with ${formatDevice(device)} data`;
  ensureDriver(what);
  cudaCheck(core().dlpk_cuda_fence(ordinalOf(device), producer, consumer), what, ordinalOf(device));
}

const NO_SYNC_WORD = (1n << 64n) - 1n;

/**
 * `__dlpack__(stream=...)` for an exported capsule of CUDA data, done natively from the export
 * itself: the consumer stream waits on the event the export recorded on its producer stream (an
 * export of a view with a producer stream carries both), else on the legacy default stream's
 * work. Same stream conventions as {@link fenceForConsumer}. The native function behind it,
 * `dlpk_cuda_export_fence(managed, versioned, stream)`, can be called from any thread (a Python
 * `__dlpack__` via ctypes, with -1 as all ones).
 */
export function fenceExport(capsule: Capsule, stream: unknown): void {
  if (!isCapsule(capsule)) throw new DLPackError("argument", `fenceExport takes a Capsule, got ${shown(capsule)}`);
  // A taken or disposed capsule's struct may be freed already.
  if (!capsuleOwned(capsule)) throw new DLPackError("consumed", "this capsule was already taken or disposed");
  const consumer = consumerStream(stream);
  const word = consumer === null ? NO_SYNC_WORD : consumer;
  const what = "fencing an exported capsule";
  ensureDriver(what);
  cudaCheck(
    core().dlpk_cuda_export_fence(capsuleAddress(capsule), capsuleVersioned(capsule) ? 1 : 0, word),
    what,
  );
}

/** @internal Exports of a view with a producer stream carry it (and an event recorded on it). */
export function attachProducerStream(capsule: Capsule, view: BufferView): void {
  const where = deviceOfView(view);
  // Only CUDA data has producer streams: host exports skip the lookup.
  if (!isCudaFamily(where.type)) return;
  const stream = producerStreams.get(view);
  if (stream === undefined) return;
  const device = ordinalOf(where);
  const status = core().dlpk_cuda_export_attach_stream(
    capsuleAddress(capsule),
    capsuleVersioned(capsule) ? 1 : 0,
    device,
    stream,
  );
  if (status !== 0) {
    disposeCapsule(capsule);
    cudaCheck(status, "attaching the producer stream to an export", device);
  }
}

// ---------------------------------------------------------------------------------------------
// Allocation and copies

/** The largest alignment CUDA allocations guarantee (`cuMemAlloc` returns 256-byte aligned memory). */
export const CUDA_ALIGNMENT = 256;

/** @internal The `dlpk_cuda_alloc` kind of a CUDA-family device (0 device, 1 page-locked host,
 * 2 managed), after checking its id. */
export function cudaAllocationKind(device: { readonly type: DeviceType; readonly id: number }): number {
  const kind = device.type === "cuda" ? 0 : device.type === "cudaHost" ? 1 : device.type === "cudaManaged" ? 2 : -1;
  if (kind < 0) throw new DLPackError("device", `${device.type} is not a CUDA device type`);
  if (device.type !== "cuda" && device.id !== 0) {
    throw new DLPackError(
      "device",
      `${device.type} memory belongs to no single device (DLPack gives it device id 0), got id ${device.id}`,
    );
  }
  return kind;
}

function allocationText(kind: number, id: number, nbytes: number): string {
  const type = kind === 0 ? "cuda" : kind === 1 ? "cudaHost" : "cudaManaged";
  return `allocating ${nbytes} bytes on ${formatDevice({ type, id })}`;
}

/** @internal Allocates CUDA-family memory for `empty`/`zeros` into the scratch (address, owner);
 * returns the native status, and nothing after the native call can throw. */
export function allocateCuda(kind: number, id: number, nbytes: number, zero: boolean): number {
  ensureDriver(allocationText(kind, id, nbytes));
  return core().dlpk_cuda_alloc(kind, id, nbytes, zero ? 1 : 0, scratch.at);
}

/** @internal The error of a failed {@link allocateCuda}. */
export function cudaAllocationError(status: number, kind: number, id: number, nbytes: number): DLPackError {
  return cudaError(status, allocationText(kind, id, nbytes), id) ??
    new DLPackError("cuda", `${allocationText(kind, id, nbytes)} failed`);
}

/** Options of copies between host and device memory. */
export interface CopyOptions {
  /**
   * Order the copy on this stream (after the work queued there) and wait for it. Default: the
   * source's producer stream if one was recorded, else the synchronous driver copies (ordered on
   * the legacy default stream).
   */
  readonly stream?: StreamHandle;
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
  const direction = to === "cuda" ? (from === "cuda" ? (dstDevice.id === srcDevice.id ? 2 : 3) : 0) : 1;
  const ordinal = to === "cuda" ? dstDevice.id : srcDevice.id;
  const srcOrdinal = from === "cuda" ? srcDevice.id : ordinal;
  const what = `copying ${bytes} bytes from ${formatDevice(srcDevice)} to ${formatDevice(dstDevice)}`;
  ensureDriver(what);
  cudaCheck(
    core().dlpk_cuda_copy(direction, dst, src, bytes, ordinal, srcOrdinal, stream ?? 0n, stream === null ? 0 : 1),
    what,
    ordinal,
  );
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
  for (let d = 0; d < shape.length; d++) {
    if (shape[d] === 1) continue;
    const step = abs(strides[d]);
    let i = n++;
    while (i > 0 && steps[i - 1] > step) {
      steps[i] = steps[i - 1];
      extents[i] = extents[i - 1];
      i--;
    }
    steps[i] = step;
    extents[i] = shape[d];
  }
  let expected = 1;
  for (let i = 0; i < n; i++) {
    if (steps[i] !== expected) return false;
    expected *= extents[i];
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
      deferredObjects[deferredCount[1]++] = staged;
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
  const streamOption: unknown = opts === undefined || opts === null ? undefined : optionsOf(opts).stream;
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

/** A copy-options argument as an object (or a DLPackError). */
function optionsOf(opts: unknown): { stream?: unknown } {
  if (typeof opts !== "object" || opts === null) {
    throw new DLPackError("argument", `copy options must be an options object, got ${shown(opts)}`);
  }
  return opts as { stream?: unknown };
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
    deferredObjects[deferredCount[1]++] = out; // parked before any call: the stack may be exhausted
    retryQuietly();
    throw error;
  }
  return out;
}

/** @internal A C-contiguous copy of a CUDA device view on the same device (`view.copy()`). */
export function copyOnDevice(view: BufferView): BufferView {
  const device = deviceOfView(view);
  if (!driverAvailable()) throw missingDriver(`copy() of ${formatDevice(device)} data`);
  const out = empty(shapeOf(view), infoOf(view).name, { device });
  try {
    copyInto(out, view);
  } catch (error) {
    deferredObjects[deferredCount[1]++] = out; // parked before any call: the stack may be exhausted
    retryQuietly();
    throw error;
  }
  return out;
}
