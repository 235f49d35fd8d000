/**
 * CUDA-family allocations (device, page-locked host, managed memory) through libdlpack's driver
 * plumbing: what `empty`/`zeros` call for a CUDA device.
 * @module
 */
import { core } from "../../ffi/mod.ts";
import { DLPackError } from "../facts/errors.ts";
import { type DeviceType, formatDevice } from "../facts/devices.ts";
import { scratch } from "./scratch.ts";
import { cudaError, ensureDriver } from "./cuda_driver.ts";

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
