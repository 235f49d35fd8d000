/**
 * Library-owned memory: `empty` / `zeros` allocate aligned native memory behind a refcounted
 * owner, and `copyOf` makes a contiguous copy of any host view.
 * @module
 */
import { core } from "../ffi/mod.ts";
import { checkDeviceId, DLPackError, optionsObject, shown } from "./errors.ts";
import { type DType, type DTypeInfo, dtypeInfo } from "./dtypes.ts";
import { type Device, deviceCode, deviceOf, formatDevice, isHostAccessible } from "./devices.ts";
import { refusalError, scratch } from "./description.ts";
import { checkShape, cStrides, layoutOf, sizeOf } from "./layout.ts";
import { type BufferView, LIBRARY_NAME, makeView } from "./view.ts";
import { allocateCuda, copyOnDevice, CUDA_ALIGNMENT } from "./cuda.ts";
import { isCudaFamily } from "./cuda_driver.ts";

/** Options of {@link empty} and {@link zeros}. */
export interface AllocOptions {
  /** Byte alignment of the data (a power of two up to 2^20); default 64. */
  readonly align?: number;
  /** Where to allocate; default the CPU. "cuda" (device memory of device `id`), "cudaHost"
   * (page-locked host memory) and "cudaManaged" (managed memory) need the CUDA driver. */
  readonly device?: { readonly type: Device["type"]; readonly id?: number };
}

/** The default alignment: a cache line, and what AVX-512 loads want. */
export const DEFAULT_ALIGNMENT = 64;

function checkAlignment(align: unknown): number {
  if (align === undefined) return DEFAULT_ALIGNMENT;
  if (
    typeof align !== "number" || !Number.isInteger(align) || align <= 0 || (align & (align - 1)) !== 0 ||
    align > 1 << 20
  ) {
    throw new DLPackError("requirements", `align must be a power of two up to 2^20, got ${String(align)}`);
  }
  return align;
}

function allocate(
  shape: readonly number[],
  dtype: DType,
  options: AllocOptions | undefined,
  zero: boolean,
): BufferView {
  const checked = checkShape(shape);
  const info = dtypeInfo(dtype);
  const opts = optionsObject(options, "allocation options");
  const align = checkAlignment(opts.align);
  const device = opts.device ?? { type: "cpu" as const, id: 0 };
  if (device === null || typeof device !== "object") {
    throw new DLPackError("device", `device must be { type, id? }, got ${shown(device)}`);
  }
  if (device.id !== undefined) checkDeviceId(device.id);
  const size = sizeOf(checked);
  const nbytes = Math.ceil((size * info.bits) / 8);
  if (device.type !== "cpu") {
    deviceCode(device.type);
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
    const cuda = allocateCuda(device, nbytes, zero);
    return contiguousView(cuda.address, cuda.owner, cuda.device, info, checked, size, nbytes);
  }
  const status = core().dlpk_alloc(nbytes, align, zero ? 1 : 0, scratch.at);
  if (status !== 0) throw refusalError(status, scratch, false);
  return contiguousView(scratch.address(), scratch.owner(), deviceOf(1, 0), info, checked, size, nbytes);
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
  return makeView({
    address,
    owner,
    info,
    shape,
    strides,
    size,
    nbytes,
    minOffset: 0,
    maxOffset: size === 0 ? -1 : size - 1,
    layout: layoutOf(shape, strides),
    device,
    access: "readwrite",
    version: null,
    flags: 0,
    producer: LIBRARY_NAME,
    ownerName: LIBRARY_NAME,
    verified: true,
  });
}

/** Uninitialised native memory for a C-contiguous tensor (aligned, default 64 bytes). It is freed
 * when the view and every export and share of it are gone. */
export function empty(shape: readonly number[], dtype: DType, opts?: AllocOptions): BufferView {
  return allocate(shape, dtype, opts, false);
}

/** Like {@link empty}, filled with zero bytes. */
export function zeros(shape: readonly number[], dtype: DType, opts?: AllocOptions): BufferView {
  return allocate(shape, dtype, opts, true);
}

/** A C-contiguous copy of a view in library memory (the native strided copy); CUDA device views
 * are copied on their device. */
export function copyOf(view: BufferView): BufferView {
  if (view.device.type === "cuda") return copyOnDevice(view);
  if (!isHostAccessible(view.device.type)) {
    throw new DLPackError(
      "device",
      `copy() of ${formatDevice(view.device)} memory needs a device copy; this view is not on the host`,
    );
  }
  const info = dtypeInfo(view.dtype);
  const out = empty(view.rawShape, view.dtype);
  if (view.size === 0) return out;
  if (info.bits < 8) {
    // Sub-byte elements (packed or padded): one code per byte from toArray(), packed into the copy.
    const codes = view.toArray() as Uint8Array;
    const bytes = out.array() as Uint8Array;
    bytes.fill(0);
    for (let k = 0; k < codes.length; k++) {
      const bit = k * info.bits;
      const word = (codes[k] & ((1 << info.bits) - 1)) << (bit & 7);
      bytes[bit >>> 3] |= word & 0xff;
      if ((bit & 7) + info.bits > 8) bytes[(bit >>> 3) + 1] |= word >>> 8;
    }
    return out;
  }
  scratch.setAddress(view.addressNumber);
  scratch.setLayout(view.rawShape, view.rawStrides);
  const status = core().dlpk_copy(scratch.at, out.addressNumber, info.bits / 8);
  if (status !== 0) {
    out.dispose();
    throw refusalError(status, scratch, false);
  }
  return out;
}
