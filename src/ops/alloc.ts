/**
 * Library-owned memory: `empty` / `zeros` allocate aligned native memory behind a refcounted
 * owner, and `copyOf` makes a contiguous copy of any host view.
 * @module
 */
import { core } from "../../ffi/mod.ts";
import { checkDeviceId, DLPackError, optionsObject, shown } from "../facts/errors.ts";
import { type DType, type DTypeInfo, dtypeInfo } from "../facts/dtypes.ts";
import { type Device, deviceCode, deviceOf, formatDevice } from "../facts/devices.ts";
import { refusalError, scratch, Status, U32 } from "../native/description.ts";
import { checkShape, cStrides, layoutOf, sizeOf } from "../facts/layout.ts";
import { type BufferView, LIBRARY_NAME, newView, type TypedView, viewOrigin } from "../view/view.ts";
import { allocateCuda, CUDA_ALIGNMENT, cudaAllocationError, cudaAllocationKind } from "../native/cuda_memory.ts";
import { isCudaFamily } from "../native/cuda_driver.ts";
import { deferredCount, deferredNumbers, releaseDeferred, retryQuietly } from "../native/owner.ts";
import { ceil } from "../facts/intrinsics.ts";

/** Options of {@link empty} and {@link zeros}. */
export interface AllocOptions {
  /** Byte alignment of the data (a power of two up to 2^20); default 64. */
  readonly align?: number | undefined;
  /** Where to allocate; default the CPU. "cuda" (device memory of device `id`), "cudaHost"
   * (page-locked host memory) and "cudaManaged" (managed memory) need the CUDA driver. */
  readonly device?: { readonly type: Device["type"]; readonly id?: number | undefined } | undefined;
}

/** The default alignment: a cache line, and what AVX-512 loads want. */
export const DEFAULT_ALIGNMENT = 64;

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

function sizeText(bytes: number): string {
  const units = ["bytes", "KiB", "MiB", "GiB", "TiB", "PiB"];
  let value = bytes;
  let unit = 0;
  while (value >= 1024 && unit < units.length - 1) {
    value /= 1024;
    unit++;
  }
  return unit === 0 ? `${bytes} bytes` : `${bytes} bytes (${value.toFixed(1)} ${units[unit]})`;
}

function allocate(
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
  const device = readDevice(deviceOption);
  const size = sizeOf(checked);
  const nbytes = ceil((size * info.bits) / 8);
  let kind = -1;
  if (device.type !== "cpu") {
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
    kind = cudaAllocationKind(device);
  } else if (device.id !== 0) {
    throw new DLPackError("device", `cpu memory has device id 0, got ${device.id}`);
  }
  const where = kind < 0 ? deviceOf(1, 0) : deviceOf(kind === 0 ? 2 : kind === 1 ? 3 : 13, device.id);
  return allocateView(kind, device.id, nbytes, align, zero, info, checked, size, where);
}

/** Allocates and wraps. Once the native allocation exists it is owned here: any exception before
 * the view holds it (an exhausted stack included) frees it. */
function allocateView(
  kind: number,
  id: number,
  nbytes: number,
  align: number,
  zero: boolean,
  info: DTypeInfo,
  shape: number[],
  size: number,
  device: Device,
): BufferView {
  let owner = 0;
  try {
    const status = kind < 0
      ? core().dlpk_alloc(nbytes, align, zero ? 1 : 0, scratch.at)
      : allocateCuda(kind, id, nbytes, zero);
    if (status !== 0) {
      throw kind < 0
        ? status === Status.outOfMemory
          ? new DLPackError("library", `allocating ${sizeText(nbytes)} failed: out of memory`)
          : refusalError(status, scratch, null)
        : cudaAllocationError(status, kind, id, nbytes);
    }
    owner = scratch.u32[U32.ownerHi] * 0x1_0000_0000 + scratch.u32[U32.ownerLo];
    const address = scratch.u32[U32.addressHi] * 0x1_0000_0000 + scratch.u32[U32.addressLo];
    return contiguousView(address, owner, device, info, shape, size, nbytes);
  } catch (error) {
    if (owner !== 0) {
      deferredNumbers[deferredCount[0]++] = owner;
      retryQuietly();
    }
    throw error;
  }
}

/** The view of a fresh C-contiguous allocation the library owns, wherever it lives. */
function contiguousView(
  address: number,
  owner: number,
  device: Device,
  info: DTypeInfo,
  shape: number[],
  size: number,
  nbytes: number,
): BufferView {
  const strides = cStrides(shape);
  const facts = {
    info,
    shape,
    strides,
    size,
    nbytes,
    minOffset: 0,
    maxOffset: size === 0 ? -1 : size - 1,
    layout: layoutOf(shape, strides),
    device,
    origin: viewOrigin(LIBRARY_NAME, LIBRARY_NAME, -1, -1, 0, true),
  };
  return newView(owner, address, facts, "readwrite");
}

/** Uninitialised native memory for a C-contiguous tensor (aligned, default 64 bytes). It is freed
 * when the view and every export and share of it are gone. A literal dtype (and shape) types the
 * result: `empty([2, 3], "float32").array()` is a `Float32Array`. */
export function empty<D extends DType, const S extends readonly number[]>(
  shape: S,
  dtype: D,
  opts?: AllocOptions,
): TypedView<D, S["length"]> {
  return allocate(shape, dtype, opts, false) as TypedView<D, S["length"]>;
}

/** Like {@link empty}, filled with zero bytes. */
export function zeros<D extends DType, const S extends readonly number[]>(
  shape: S,
  dtype: D,
  opts?: AllocOptions,
): TypedView<D, S["length"]> {
  return allocate(shape, dtype, opts, true) as TypedView<D, S["length"]>;
}
