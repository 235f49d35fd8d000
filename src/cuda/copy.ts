/**
 * The device paths of the copy engine (`src/ops/copy.ts`): copies to, from and between CUDA
 * device memory through the driver, and `copy()` of a device view on its device. Registered as
 * this module loads; every entry loads it.
 * @module
 */
import { core } from "../../ffi/mod.ts";
import { type Device, formatDevice } from "../facts/devices.ts";
import { cudaCheck, driverAvailable, ensureDriver, missingDriver } from "../native/cuda_driver.ts";
import { deferredObjectCount, deferredObjects, retryQuietly } from "../native/journal.ts";
import { type BufferView, deviceOfView, infoOf, shapeOf } from "../view/view.ts";
import { empty } from "../ops/alloc.ts";
import { copyInto, registerDevicePaths } from "../ops/copy.ts";

/** Copies `bytes` between two addresses of which at least one is CUDA device memory, on `stream`
 * when one is given (complete on return). */
function transfer(
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

/** A C-contiguous copy of a CUDA device view on the same device (`view.copy()`). */
function copyOnDevice(view: BufferView): BufferView {
  const device = deviceOfView(view);
  if (!driverAvailable()) throw missingDriver(`copy() of ${formatDevice(device)} data`);
  const out = empty(shapeOf(view), infoOf(view).name, { device });
  try {
    copyInto(out, view);
  } catch (error) {
    deferredObjects[deferredObjectCount[0]++] = out; // parked before any call: the stack may be exhausted
    retryQuietly();
    throw error;
  }
  return out;
}

registerDevicePaths({ transfer, copyOnDevice });
