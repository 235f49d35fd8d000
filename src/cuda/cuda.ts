/**
 * CUDA: the driver's view of devices and pointers, device / page-locked / managed allocations,
 * copies between host and device memory, and the stream fencing of the DLPack protocol. The
 * driver (`libcuda.so.1`, or `DLPACK_CUDA_LIB`) is opened by libdlpack at first use; without it
 * every call here throws `DLPackError` with code "cuda" saying why, and the rest of the library
 * works as before.
 * @module
 */
import { core } from "../../ffi/mod.ts";
import { DLPackError, shown } from "../facts/errors.ts";
import { CUDA_COUNTERS, CudaCounter } from "../facts/abi.ts";
import { type AddressLike, toAddress } from "../native/address.ts";
import { cudaCheck, driverAvailable, driverReason, ensureDriver } from "../native/cuda_driver.ts";
import { type Elements, objectSlots, toBigInt } from "../facts/intrinsics.ts";
import { handleOf, LEGACY_STREAM, PER_THREAD_STREAM, type StreamHandle } from "../ops/streams.ts";

export { CudaDriverError, isCudaFamily } from "../native/cuda_driver.ts";
export { CUDA_ALIGNMENT } from "../native/cuda_memory.ts";
export {
  consumerStream,
  fenceExport,
  fenceForConsumer,
  LEGACY_STREAM,
  PER_THREAD_STREAM,
  producerStream,
  setProducerStream,
  type StreamHandle,
} from "../ops/streams.ts";
export { copyInto, type CopyOptions, toHost } from "../ops/copy.ts";

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

const infoOut = new Float64Array(8) as Elements<Float64Array, 0 | 1 | 2 | 3 | 4 | 5 | 6 | 7>;
/** Capacity of `textOut`: a constant, so no replaced length getter can size a native write. */
const TEXT_OUT_BYTES = 512;
const textOut = new Uint8Array(TEXT_OUT_BYTES);
const decoder = new TextDecoder();

/** Every device the driver sees. Throws `DLPackError` ("cuda") without a driver. */
export function devices(): CudaDevice[] {
  ensureDriver("cuda.devices()");
  const count = core().dlpk_cuda_device_count();
  const out = objectSlots<CudaDevice>(count);
  for (let id = 0; id < count; id++) {
    textOut.fill(0);
    cudaCheck(core().dlpk_cuda_device_info(id, infoOut, textOut, TEXT_OUT_BYTES - 1), "cuda.devices()", id);
    const end = textOut.indexOf(0);
    const lines = decoder.decode(textOut.subarray(0, end < 0 ? TEXT_OUT_BYTES : end)).split("\n");
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
    rangeStart: infoOut[4] > 0 ? toBigInt(infoOut[3]) : null,
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

const statsOut = new Float64Array(CUDA_COUNTERS) as Elements<
  Float64Array,
  (typeof CudaCounter)[keyof typeof CudaCounter]
>;

/** The live CUDA counts (all zero when nothing is held; needs no driver). */
export function cudaStats(): CudaStats {
  statsOut.fill(0);
  core().dlpk_cuda_stats(statsOut);
  return {
    deviceAllocations: statsOut[CudaCounter.deviceAllocations],
    deviceBytes: statsOut[CudaCounter.deviceBytes],
    hostAllocations: statsOut[CudaCounter.hostAllocations],
    hostBytes: statsOut[CudaCounter.hostBytes],
    managedAllocations: statsOut[CudaCounter.managedAllocations],
    managedBytes: statsOut[CudaCounter.managedBytes],
    events: statsOut[CudaCounter.events],
    freeFailures: statsOut[CudaCounter.freeFailures],
  };
}

// ---------------------------------------------------------------------------------------------
// Streams and events

const handleOut = new BigUint64Array(1) as Elements<BigUint64Array, 0>;

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
export function synchronize(stream?: StreamHandle, device?: number): void {
  const d = deviceArg(device, "cuda.synchronize()");
  const s = handleOf(stream === undefined ? LEGACY_STREAM : stream, "stream");
  cudaCheck(core().dlpk_cuda_stream_synchronize(d, s), "cuda.synchronize()", d);
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
