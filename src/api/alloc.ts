/**
 * `empty` / `zeros`: library-owned memory, aligned native memory behind a refcounted owner (host,
 * or CUDA-family through the driver).
 * @module
 */
import { checkDeviceId, DLPackError, optionsObject, shown } from "../facts/errors.ts";
import { type DType, dtypeInfo } from "../facts/dtypes.ts";
import { type Device, deviceCode, formatDevice } from "../facts/devices.ts";
import { checkShape } from "../facts/layout.ts";
import { CUDA_ALIGNMENT, cudaAllocationKind } from "../native/cuda_memory.ts";
import { isCudaFamily } from "../native/cuda_driver.ts";
import { releaseDeferred } from "../native/journal.ts";
import { allocate, DEFAULT_ALIGNMENT, HOST, type Placement } from "../engines/alloc.ts";
import { type BufferView, newView, type TypedView } from "../view/view.ts";

export { DEFAULT_ALIGNMENT };

/** Options of {@link empty} and {@link zeros}. */
export interface AllocOptions {
  /** Byte alignment of the data (a power of two up to 2^20); default 64. */
  readonly align?: number | undefined;
  /** Where to allocate; default the CPU. "cuda" (device memory of device `id`), "cudaHost"
   * (page-locked host memory) and "cudaManaged" (managed memory) need the CUDA driver. */
  readonly device?: { readonly type: Device["type"]; readonly id?: number | undefined } | undefined;
}

function checkAlignment(align: unknown): number {
  if (align === undefined) return DEFAULT_ALIGNMENT;
  if (typeof align !== "number") {
    throw new DLPackError("argument", `align must be a number (a power of two up to 2^20), got ${shown(align)}`);
  }
  if (align % 1 !== 0 || align <= 0 || (align & (align - 1)) !== 0 || align > 1 << 20) {
    throw new DLPackError("requirements", `align must be a power of two up to 2^20, got ${align}`);
  }
  return align;
}

/** Where an allocation goes, read once from the caller's options. */
function readDevice(value: unknown): { type: Device["type"]; id: number } {
  if (value === undefined) return { type: "cpu", id: 0 };
  if (value === null || typeof value !== "object") {
    throw new DLPackError("device", `device must be { type, id? }, got ${shown(value)}`);
  }
  const type: unknown = (value as { type?: unknown }).type;
  const id: unknown = (value as { id?: unknown }).id;
  deviceCode(type as Device["type"]); // throws "device" for an unknown type
  return { type: type as Device["type"], id: id === undefined ? 0 : checkDeviceId(id) };
}

/** The placement of an allocation on `device` with `align`. */
function placementOf(device: { type: Device["type"]; id: number }, align: number): Placement {
  if (device.type === "cpu") {
    if (device.id !== 0) throw new DLPackError("device", `cpu memory has device id 0, got ${device.id}`);
    return HOST;
  }
  if (!isCudaFamily(device.type)) {
    throw new DLPackError(
      "device",
      `allocation on ${formatDevice(device)} is not available (cpu, cuda, cudaHost and cudaManaged are)`,
    );
  }
  if (align > CUDA_ALIGNMENT) {
    throw new DLPackError(
      "requirements",
      `align ${align} is above the ${CUDA_ALIGNMENT} bytes CUDA allocations guarantee`,
    );
  }
  return { kind: cudaAllocationKind(device), id: device.id };
}

/** A library allocation of `shape` (checked) and `dtype` where `options` say, zeroed on request. */
export function allocateView(
  shape: readonly number[],
  dtype: DType,
  options: AllocOptions | undefined,
  zero: boolean,
): BufferView {
  releaseDeferred();
  const checked = checkShape(shape);
  const info = dtypeInfo(dtype);
  const opts = optionsObject(options, "allocation options");
  // Each option read once.
  const alignOption: unknown = opts.align;
  const deviceOption: unknown = opts.device;
  const align = checkAlignment(alignOption);
  const placement = placementOf(readDevice(deviceOption), align);
  return newView(allocate(checked, info, placement, align, zero));
}

/** Uninitialised native memory for a C-contiguous tensor (aligned, default 64 bytes). It is freed
 * when the view and every export and share of it are gone. A literal dtype (and shape) types the
 * result: `empty([2, 3], "float32").array()` is a `Float32Array`. */
export function empty<D extends DType, const S extends readonly number[]>(
  shape: S,
  dtype: D,
  opts?: AllocOptions,
): TypedView<D, S["length"]> {
  return allocateView(shape, dtype, opts, false) as TypedView<D, S["length"]>;
}

/** Like {@link empty}, filled with zero bytes. */
export function zeros<D extends DType, const S extends readonly number[]>(
  shape: S,
  dtype: D,
  opts?: AllocOptions,
): TypedView<D, S["length"]> {
  return allocateView(shape, dtype, opts, true) as TypedView<D, S["length"]>;
}
