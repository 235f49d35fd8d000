/**
 * The CUDA driver as libdlpack exposes it (zig/src/cuda.zig): whether it is available and why not,
 * and driver failures turned into `DLPackError`s carrying the driver's error name. Nothing here
 * knows about views; src/cuda/cuda.ts builds the public API on it.
 * @module
 */
import { core } from "../../ffi/mod.ts";
import { DLPackError } from "../facts/errors.ts";
import type { DeviceType } from "../facts/devices.ts";
import { CudaStatus } from "../facts/abi.ts";

/** Capacity of `text`: a constant, so no replaced length getter can size a native write. */
const TEXT_BYTES = 1024;
const text = new Uint8Array(TEXT_BYTES);
const decoder = new TextDecoder();

function readText(length: number): string {
  const end = text.indexOf(0);
  return decoder.decode(text.subarray(0, Math.min(length, end < 0 ? length : end)));
}

/** A failed CUDA driver call: `code` is "cuda", plus the driver's own account of the failure. */
export class CudaDriverError extends DLPackError {
  /** The driver's `CUresult` (for example 2). */
  readonly result: number;
  /** The driver's name for it, from `cuGetErrorName` (for example "CUDA_ERROR_OUT_OF_MEMORY"). */
  readonly errorName: string;
  /** The driver function that failed (for example "cuMemAlloc_v2"). */
  readonly call: string;

  /** @ignore (library-internal) Made from the native side's record of the failure. */
  constructor(what: string, result: number, errorName: string, call: string, description: string) {
    super(
      "cuda",
      `${what}: ${call} failed with ${errorName} (${result})${description === "" ? "" : `: ${description}`}`,
    );
    this.name = "CudaDriverError";
    this.result = result;
    this.errorName = errorName;
    this.call = call;
  }
}

/** Whether a driver can be used (opens it on first call). */
export function driverAvailable(): boolean {
  return core().dlpk_cuda_status() === 0;
}

/** Why the driver is unavailable ("" when it is available). */
export function driverReason(): string {
  if (driverAvailable()) return "";
  return readText(core().dlpk_cuda_reason(text, TEXT_BYTES));
}

/** The error for "this needs the driver and there is none", saying why. */
export function missingDriver(what: string): DLPackError {
  return new DLPackError(
    "cuda",
    `${what} needs the CUDA driver, which is missing or unusable here: ${driverReason()}` +
      ` (set DLPACK_CUDA_LIB to the driver library if it is installed elsewhere)`,
  );
}

/** Throws the missing-driver error unless a driver is usable. */
export function ensureDriver(what: string): void {
  if (!driverAvailable()) throw missingDriver(what);
}

/** This thread's last driver failure, as the native side recorded it. */
export function lastDriverError(): { result: number; call: string; errorName: string; description: string } {
  const result = core().dlpk_cuda_last_error(text, TEXT_BYTES);
  const lines = readText(TEXT_BYTES).split("\n");
  const call = lines[0] ?? "";
  const errorName = lines[1] ?? "";
  const description = lines[2] ?? "";
  return { result, call, errorName: errorName === "" ? `CUresult ${result}` : errorName, description };
}

/** The error for a native CUDA status, or undefined for success. */
export function cudaError(status: number, what: string, device?: number): DLPackError | undefined {
  if (status === 0) return undefined;
  if (status > 0) {
    const last = lastDriverError();
    return new CudaDriverError(what, status, last.errorName, last.call, last.description);
  }
  switch (status) {
    case CudaStatus.unavailable:
      return missingDriver(what);
    case CudaStatus.invalidDevice:
      return new DLPackError(
        "device",
        `${what}: there is no CUDA device ${device ?? "?"} (the driver sees ${core().dlpk_cuda_device_count()})`,
      );
    case CudaStatus.outOfMemory:
      return new DLPackError("library", `${what}: out of host memory`);
    default:
      return new DLPackError("cuda", `${what}: invalid argument (status ${status})`);
  }
}

/** Throws unless a native CUDA call succeeded. */
export function cudaCheck(status: number, what: string, device?: number): void {
  const error = cudaError(status, what, device);
  if (error !== undefined) throw error;
}

/** CUDA, CUDAHost and CUDAManaged: the device types the driver can check and copy. */
export function isCudaFamily(type: DeviceType): boolean {
  return type === "cuda" || type === "cudaHost" || type === "cudaManaged";
}
