/**
 * Turns a native description (the scratch a native call just wrote) into a `BufferView`.
 * @module
 */
import { core } from "../ffi/mod.ts";
import { DEVICE_VERIFIED, F64, I32, type Scratch, U32 } from "./description.ts";
import { infoOfTriple } from "./dtypes.ts";
import { deviceOf } from "./devices.ts";
import { DLPackError } from "./errors.ts";
import { type Access, type BufferView, makeView } from "./view.ts";

/** What the scratch cannot say about a view. */
export interface ViewOrigin {
  readonly access: Access;
  readonly producer: string | null;
  readonly ownerName: string;
  readonly keepAlive?: unknown;
  readonly verified?: boolean;
}

/** The library's name, recorded as `owner` on memory it allocated. */
export const LIBRARY_NAME = "dlpack-ts";

/** Builds a view from a successful native description. The description's owner share passes to
 * the view; if building fails, the share is released so nothing leaks. */
export function viewFromScratch(s: Scratch, origin: ViewOrigin): BufferView {
  const owner = s.owner();
  try {
    const f64 = s.f64;
    const ndim = s.i32[I32.ndim];
    const shape = new Array<number>(ndim);
    const strides = new Array<number>(ndim);
    for (let d = 0; d < ndim; d++) {
      shape[d] = f64[F64.shape + d];
      strides[d] = f64[F64.strides + d];
    }
    const info = infoOfTriple(s.u32[U32.code], s.u32[U32.bits]);
    if (info === undefined) throw new DLPackError("dtype", "native and TS dtype tables disagree");
    const major = s.i32[I32.major];
    return makeView({
      address: s.address(),
      owner,
      info,
      shape,
      strides,
      size: f64[F64.size],
      nbytes: f64[F64.nbytes],
      minOffset: f64[F64.minOffset],
      maxOffset: f64[F64.maxOffset],
      layout: s.u32[U32.layout],
      device: deviceOf(s.i32[I32.deviceType], s.i32[I32.deviceId]),
      access: origin.access,
      version: major < 0 ? null : { major, minor: s.i32[I32.minor] },
      flags: s.u32[U32.flags],
      producer: origin.producer,
      ownerName: origin.ownerName,
      verified: origin.verified ?? (s.u32[U32.layout] & DEVICE_VERIFIED) !== 0,
      keepAlive: origin.keepAlive,
    });
  } catch (error) {
    core().dlpk_owner_release(owner);
    throw error;
  }
}
