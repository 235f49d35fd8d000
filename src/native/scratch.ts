/**
 * The scratch: the record every native call of this thread writes its results into and reads its
 * inputs from (zig/src/abi.zig's `KeyedDescription`, a `Description` first), and its field indices.
 * @module
 */
import { DLPackError } from "../facts/errors.ts";
import { core, runtime, whenLoaded } from "../../ffi/mod.ts";
import {
  DESCRIPTION_BYTES,
  DescriptionF64,
  DescriptionI32,
  DescriptionI64,
  DescriptionU32,
  KEY_ADDRESS_F64,
  KEY_GENERATION_F64,
  KEY_OWNER_F64,
  KEYED_DESCRIPTION_BYTES,
  Layout,
  MAX_RANK,
  Status as NativeStatus,
} from "../facts/abi.ts";
import {
  BigInt64ArrayCtor,
  type Elements,
  Float64ArrayCtor,
  Int32ArrayCtor,
  Uint32ArrayCtor,
  Uint8ArrayCtor,
} from "../facts/intrinsics.ts";

export { MAX_RANK };

// Room for a KeyedDescription: every native call writes its Description first, and keyed imports
// the generation and last facts after it.
const BYTES = KEYED_DESCRIPTION_BYTES;

// Offsets in units of each view (see the comptime asserts beside `Description`).
// Short names for the generated indices (src/facts/abi.ts holds the numbers).
export const I32 = {
  status: DescriptionI32.status,
  dim: DescriptionI32.detailDim,
  ndim: DescriptionI32.ndim,
  deviceType: DescriptionI32.deviceType,
  deviceId: DescriptionI32.deviceId,
  major: DescriptionI32.versionMajor,
  minor: DescriptionI32.versionMinor,
} as const;
export const U32 = {
  flags: DescriptionU32.flags,
  code: DescriptionU32.dtypeCode,
  bits: DescriptionU32.dtypeBits,
  lanes: DescriptionU32.dtypeLanes,
  layout: DescriptionU32.layout,
  addressLo: DescriptionU32.addressLo,
  addressHi: DescriptionU32.addressHi,
  ownerLo: DescriptionU32.ownerLo,
  ownerHi: DescriptionU32.ownerHi,
} as const;
export const I64 = { found: DescriptionI64.detailFound, limit: DescriptionI64.detailLimit } as const;
export const F64 = DescriptionF64;
/** What a keyed import writes after the description (see `dlpk_import`), as indices of
 * `scratch.f64`: the facts' generation, the owner record, element 0 (-1 beyond 2^53). */
export const KEY_GENERATION = KEY_GENERATION_F64;
export const KEY_OWNER = KEY_OWNER_F64;
export const KEY_ADDRESS = KEY_ADDRESS_F64;

/** The scratch's views: the record holds every named field (shape and strides are indexed by
 * dimension, below `ndim`). */
type ScratchI32 = Elements<Int32Array, (typeof I32)[keyof typeof I32]>;
type ScratchU32 = Elements<Uint32Array, (typeof U32)[keyof typeof U32]>;
type ScratchI64 = Elements<BigInt64Array, (typeof I64)[keyof typeof I64]>;
export type ScratchF64 = Elements<
  Float64Array,
  (typeof F64)[keyof typeof F64] | typeof KEY_GENERATION | typeof KEY_OWNER | typeof KEY_ADDRESS
>;

export const LAYOUT_C = Layout.c;
export const LAYOUT_F = Layout.f;
/** `layout` bit: the device claim is confirmed (host memory, or the CUDA driver agreed). */
export const DEVICE_VERIFIED = Layout.deviceVerified;

/** The scratch of this thread: the library's own keyed description (`dlpk_scratch()`), viewed
 * from the moment the library is loaded, so that the one-argument imports need not be told where
 * it is and every copy of this module in the thread shares it (each worker has its own). */
export class Scratch {
  #address = 0;
  // Until the library is loaded (no native call has written anything yet), placeholders.
  buffer: ArrayBuffer = new ArrayBuffer(BYTES);
  bytes: Uint8Array = new Uint8Array(this.buffer);
  i32: ScratchI32 = new Int32Array(this.buffer) as ScratchI32;
  u32: ScratchU32 = new Uint32Array(this.buffer) as ScratchU32;
  i64: ScratchI64 = new BigInt64Array(this.buffer) as ScratchI64;
  f64: ScratchF64 = new Float64Array(this.buffer) as ScratchF64;

  /** The scratch's own address, passed to native calls (its memory never moves or goes away). */
  get at(): number {
    // Small enough for V8 to inline without spending its budget: every native call reads it.
    const address = this.#address;
    return address !== 0 ? address : this.#locate();
  }

  #locate(): number {
    core(); // loading the library attaches the scratch
    return this.#address;
  }

  /** @internal Views the library's scratch at `address` (once, as the library loads). */
  attach(address: number): void {
    const buffer = runtime().arrayBuffer(address, BYTES);
    // A call may write its inputs before it loads the library: they carry over. (Only the
    // description: what follows it is the library's record of the last keyed import, which
    // another copy of this module in the thread may be using.)
    // (Constructors captured at load: this runs later, after callers may have replaced the globals.)
    const placeholder = this.bytes;
    const bytes = new Uint8ArrayCtor(buffer);
    for (let i = 0; i < DESCRIPTION_BYTES; i++) bytes[i] = placeholder[i]!;
    this.bytes = bytes;
    // BYTES long, as the placeholders: every field is there.
    this.i32 = new Int32ArrayCtor(buffer) as ScratchI32;
    this.u32 = new Uint32ArrayCtor(buffer) as ScratchU32;
    this.i64 = new BigInt64ArrayCtor(buffer) as ScratchI64;
    this.f64 = new Float64ArrayCtor(buffer) as ScratchF64;
    this.buffer = buffer;
    this.#address = address;
  }

  /** Element 0's address, exact below 2^53 (which every 64-bit OS's user space is). */
  address(): number {
    return join(this.u32[U32.addressLo], this.u32[U32.addressHi]);
  }

  /** The error for an element 0 address beyond 2^53 (only empty tensors have one). */
  beyondExact(): DLPackError {
    return beyondExact(this.u32[U32.addressLo], this.u32[U32.addressHi]);
  }

  /** The native owner record's address. */
  owner(): number {
    return join(this.u32[U32.ownerLo], this.u32[U32.ownerHi]);
  }

  /** Writes an address (data for exports and copies) as native calls read it. */
  setAddress(value: number): void {
    // Operators only (no Math.floor a caller could replace): exact for integers below 2^53.
    const lo = value % 0x1_0000_0000;
    this.u32[U32.addressLo] = lo;
    this.u32[U32.addressHi] = (value - lo) / 0x1_0000_0000;
  }

  /** Writes an owner record address. */
  setOwner(value: number): void {
    const lo = value % 0x1_0000_0000;
    this.u32[U32.ownerLo] = lo;
    this.u32[U32.ownerHi] = (value - lo) / 0x1_0000_0000;
  }

  /** Writes ndim, shape and strides (as long as the shape). */
  setLayout(shape: readonly number[], strides: readonly number[]): void {
    this.i32[I32.ndim] = shape.length;
    const f64 = this.f64;
    for (let d = 0; d < shape.length; d++) {
      f64[F64.shape + d] = shape[d]!;
      f64[F64.strides + d] = strides[d]!;
    }
  }
}

// Small enough to inline on the import path; the error is built out of line.
function join(lo: number, hi: number): number {
  if (hi >= 0x200000) throw beyondExact(lo, hi);
  return hi * 0x1_0000_0000 + lo;
}

function beyondExact(lo: number, hi: number): DLPackError {
  return new DLPackError("overflow", `address 0x${hi.toString(16)}${lo.toString(16).padStart(8, "0")} is beyond 2^53`);
}

/** The scratch every native call of this thread writes into. */
export const scratch: Scratch = new Scratch();
whenLoaded((lib) => scratch.attach(lib.dlpk_scratch()));

/** Native status codes (generated from zig/src/abi.zig `Status`). */
export const Status = NativeStatus;
