/**
 * Library allocations: aligned native memory (host, or CUDA-family through the driver) behind a
 * refcounted owner record, with the facts of a C-contiguous tensor over it. What is made is an
 * owned record the caller turns into a view (or releases).
 * @module
 */
import { core } from "../../ffi/mod.ts";
import { DLPackError } from "../facts/errors.ts";
import type { DTypeInfo } from "../facts/dtypes.ts";
import { type Device, deviceOf } from "../facts/devices.ts";
import { cStrides, layoutOf, sizeOf } from "../facts/layout.ts";
import { ceil, copyNumbers } from "../facts/intrinsics.ts";
import { refusalError } from "../native/refusals.ts";
import { scratch, Status, U32 } from "../native/scratch.ts";
import { allocateCuda, cudaAllocationError } from "../native/cuda_memory.ts";
import { LIBRARY_NAME, type Owned, type ViewFacts, viewOrigin } from "./state.ts";

/** The default alignment: a cache line, and what AVX-512 loads want. */
export const DEFAULT_ALIGNMENT = 64;

/** Where an allocation goes: `kind` -1 for host memory, else the `dlpk_cuda_alloc` kind (0 device,
 * 1 page-locked host, 2 managed) on device `id`. */
export interface Placement {
  readonly kind: number;
  readonly id: number;
}

/** Host memory. */
export const HOST: Placement = { kind: -1, id: 0 };

/** The device record of a placement. */
function deviceOfPlacement(p: Placement): Device {
  return p.kind < 0 ? deviceOf(1, 0) : deviceOf(p.kind === 0 ? 2 : p.kind === 1 ? 3 : 13, p.id);
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

/**
 * Allocates a C-contiguous tensor of `shape` (an array the caller no longer changes) of `info`
 * where `p` says, zeroed on request. The owner record is journaled until its holder (a view, or the
 * engine releasing a temporary) ends the entry: an exception before that leaves it to be freed.
 */
export function allocate(
  shape: number[],
  info: DTypeInfo,
  p: Placement,
  align: number,
  zero: boolean,
): Owned {
  const size = sizeOf(shape);
  const nbytes = ceil((size * info.bits) / 8);
  const status = p.kind < 0
    ? core().dlpk_alloc(nbytes, align, zero ? 1 : 0, scratch.at)
    : allocateCuda(p.kind, p.id, nbytes, zero);
  if (status !== 0) {
    throw p.kind < 0
      ? status === Status.outOfMemory
        ? new DLPackError("library", `allocating ${sizeText(nbytes)} failed: out of memory`)
        : refusalError(status, scratch, null)
      : cudaAllocationError(status, p.kind, p.id, nbytes);
  }
  const owner = scratch.u32[U32.ownerHi] * 0x1_0000_0000 + scratch.u32[U32.ownerLo];
  const address = scratch.u32[U32.addressHi] * 0x1_0000_0000 + scratch.u32[U32.addressLo];
  const facts = contiguousFacts(info, shape, size, nbytes, deviceOfPlacement(p));
  return { owner, address, facts, access: "readwrite" };
}

/** The facts of a fresh C-contiguous allocation the library owns, wherever it lives. */
function contiguousFacts(info: DTypeInfo, shape: number[], size: number, nbytes: number, device: Device): ViewFacts {
  const strides = cStrides(shape);
  return {
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
}

/** Host memory for a C-contiguous copy of `shape` (copied: the caller's array is not kept). */
export function allocateHost(shape: readonly number[], info: DTypeInfo): Owned {
  return allocate(copyNumbers(shape), info, HOST, DEFAULT_ALIGNMENT, false);
}
