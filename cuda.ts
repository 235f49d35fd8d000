/**
 * The CUDA entry of dlpack-ts: the driver's view of devices and pointers, stream and event
 * handles, and the stream fencing of the DLPack protocol. Device allocations go through `empty` /
 * `zeros` with `{ device: { type: "cuda", id } }`, copies through `view.toHost()` and
 * `view.copyFrom(src)`.
 *
 * The driver (`libcuda.so.1`, or the library `DLPACK_CUDA_LIB` names) is opened at first use;
 * nothing else in the library needs it. Without it, `available()` says why and every call here
 * that needs the driver throws `DLPackError` with code "cuda" giving that reason.
 *
 * ```ts
 * import * as cuda from "@dlpack-ts/dlpack/cuda";
 * import { empty, ready } from "@dlpack-ts/dlpack";
 *
 * await ready();
 * const status = cuda.available(); // { available: false, reason: "libcuda.so.1 could not be loaded: ..." }
 * if (status.available) {
 *   using x = empty([1024], "float32", { device: { type: "cuda", id: 0 } });
 *   using host = x.toHost();
 * }
 * ```
 * @module
 */
import "./src/ops/mod.ts"; // registers the operations BufferView methods delegate to
import "./src/cuda/copy.ts"; // registers the device paths of the copy engine
export {
  available,
  consumerStream,
  copyInto,
  type CopyOptions,
  createEvent,
  createStream,
  CUDA_ALIGNMENT,
  type CudaAvailability,
  type CudaDevice,
  CudaDriverError,
  type CudaStats,
  cudaStats,
  destroyEvent,
  destroyStream,
  devices,
  fenceExport,
  fenceForConsumer,
  isCudaFamily,
  LEGACY_STREAM,
  PER_THREAD_STREAM,
  type PointerInfo,
  pointerInfo,
  producerStream,
  recordEvent,
  setProducerStream,
  type StreamHandle,
  synchronize,
  toHost,
  waitEvent,
} from "./src/cuda/cuda.ts";
