/**
 * The reused scratch buffer native calls describe tensors into (zig/src/describe.zig's
 * `Description`), its field offsets, and the mapping of native status codes to errors.
 * @module
 */
import { DLPackError, type ErrorCode } from "../facts/errors.ts";
import { deviceName, formatDevice } from "../facts/devices.ts";
import { lastDriverError } from "./cuda_driver.ts";
import { core, runtime, whenLoaded } from "../../ffi/mod.ts";
import {
  DESCRIPTION_BYTES,
  DescriptionF64,
  DescriptionI32,
  DescriptionI64,
  DescriptionU32,
  DetailDim,
  KEY_ADDRESS_F64,
  KEY_GENERATION_F64,
  KEY_OWNER_F64,
  KEYED_DESCRIPTION_BYTES,
  Layout,
  MAX_RANK,
  Status as NativeStatus,
  TypeCode,
} from "../facts/abi.ts";
import { typeCodesText, widthsOfCode } from "../facts/dtypes.ts";
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
/** What a keyed import writes after the description (see `dlpk_import_keyed`), as indices of
 * `scratch.f64`: the facts' generation, the owner record, element 0 (-1 beyond 2^53). */
export const KEY_GENERATION = KEY_GENERATION_F64;
export const KEY_OWNER = KEY_OWNER_F64;
export const KEY_ADDRESS = KEY_ADDRESS_F64;

/** The scratch's views: the record holds every named field (shape and strides are indexed by
 * dimension, below `ndim`). */
export type ScratchI32 = Elements<Int32Array, (typeof I32)[keyof typeof I32]>;
export type ScratchU32 = Elements<Uint32Array, (typeof U32)[keyof typeof U32]>;
export type ScratchI64 = Elements<BigInt64Array, (typeof I64)[keyof typeof I64]>;
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

/** `detail_dim` of a shape or strides refusal whose array is not in readable memory. */
const DIM_UNREADABLE = DetailDim.unreadable;

const STRUCT_NAMES = ["DLManagedTensor (legacy)", "DLManagedTensorVersioned"] as const;
const SOURCE_KEYS = ["{ legacy }", "{ versioned }"] as const;

function hex(value: bigint): string {
  return `0x${BigInt.asUintN(64, value).toString(16)}`;
}

/** Why a deleter slot may hold something else than the caller thought (`detail_limit`). */
function deleterHint(hint: bigint): string {
  switch (hint) {
    case 1n:
      return " (this looks like a DLManagedTensorVersioned passed as { legacy }: version 1 at offset 0 and code " +
        "in the versioned deleter slot)";
    case 2n:
      return " (this looks like a legacy DLManagedTensor passed as { versioned }: code in the legacy deleter slot)";
    default:
      return " (a struct of the other generation, freed memory, or not a managed tensor at all?)";
  }
}

/** The refusals made before any field was trusted: about the struct's memory and where it came
 * from, not its contents. Null for the other statuses. */
function addressRefusal(status: number, found: bigint, limit: bigint, released: boolean): DLPackError | null {
  const own = STRUCT_NAMES[limit === 1n ? 1 : 0];
  switch (status) {
    case Status.unmappedStruct:
      return new DLPackError(
        "null_data",
        `the struct at ${hex(found)} is not in readable memory (its ${limit} bytes as a ${
          STRUCT_NAMES[limit === 80n ? 1 : 0]
        } are not all mapped readable): not a managed tensor, or already freed; nothing was read and no deleter called`,
      );
    case Status.badDeleter:
      if (limit === 3n) {
        return new DLPackError(
          "null_data",
          `the struct's deleter ${hex(found)} is this library's export deleter, but the struct is not one of its ` +
            `exports (a copy of one?); the deleter was not called, so whatever the struct holds is leaked`,
        );
      }
      return new DLPackError(
        "null_data",
        `the deleter ${hex(found)} is not executable code${deleterHint(limit)}; it was not called, so the tensor ` +
          `(and whatever it holds) is leaked: calling it would crash the process`,
      );
    case Status.generation:
      return new DLPackError(
        "version",
        `${hex(found)} is one of this library's own ${own} exports, passed as ${SOURCE_KEYS[limit === 1n ? 0 : 1]}` +
          (released
            ? `; it was released through its real deleter, so the address is no longer valid (pass it as ${
              SOURCE_KEYS[limit === 1n ? 1 : 0]
            } next time)`
            : "; the capsule keeps ownership"),
      );
    case Status.alreadyImported:
      return new DLPackError(
        "consumed",
        `${hex(found)} is one of this library's own ${own} exports and an import already took it (one export, ` +
          `one import: the first import owns it until it is disposed); nothing was released`,
      );
    case Status.releasedExport:
      return new DLPackError(
        "consumed",
        `${hex(found)} was one of this library's own ${own} exports and has been released already (its deleter ` +
          `ran): importing it again would read freed memory; nothing was read or called`,
      );
    default:
      return null;
  }
}

function claimOf(s: Scratch): string {
  const type = deviceName(s.i32[I32.deviceType]) ?? "cuda";
  return formatDevice({ type, id: s.i32[I32.deviceId] });
}

/** What the CUDA driver reported for a byte, as `cuda.zig` encodes it (memory type | managed << 8). */
function memoryText(found: number, ordinal: number): string {
  if ((found >> 8) & 1) return `managed memory (device ${ordinal})`;
  switch (found & 0xff) {
    case 0:
      return "memory it does not know (pageable host memory, or nothing allocated)";
    case 1:
      return "page-locked host memory";
    case 2:
      return `device memory of cuda:${ordinal}`;
    default:
      return `memory of type ${found & 0xff}`;
  }
}

/** "8, 16, 32 or 64". */
function alternatives(values: readonly number[]): string {
  return values.length < 2 ? values.join("") : `${values.slice(0, -1).join(", ")} or ${values[values.length - 1]}`;
}

function describeDtypeRefusal(code: number, bits: number, lanes: number): string {
  const triple = `code ${code}, bits ${bits}, lanes ${lanes}`;
  if (lanes !== 1) return `vector dtypes are not supported (${triple}; lanes must be 1)`;
  if (code === TypeCode.opaqueHandle) return `opaque handles have no element type (${triple})`;
  if (code >= TypeCode.float8E3m4 && code <= TypeCode.float8E8m0fnu) {
    return `float8 codes need bits ${alternatives(widthsOfCode(code))} (got ${triple})`;
  }
  const allowed = widthsOfCode(code);
  if (allowed.length > 0) return `dtype code ${code} needs bits ${alternatives(allowed)} (got ${triple})`;
  return `unknown dtype code ${code} (${triple}); known codes are ${typeCodesText()}`;
}

/** The error for a native refusal, read from the scratch the call wrote. `released` says whether
 * the producer's deleter already ran (raw imports) or was left to its capsule (Python); null for
 * calls that take nothing (exports, copies, allocations), whose messages say nothing of either. */
export function refusalError(status: number, s: Scratch, released: boolean | null): DLPackError {
  const found = s.i64[I64.found];
  const limit = s.i64[I64.limit];
  const dim = s.i32[I32.dim];
  const early = addressRefusal(status, found, limit, released === true);
  if (early !== null) return early;
  let code: ErrorCode;
  let message: string;
  switch (status) {
    case Status.nullManaged:
      return new DLPackError("null_data", "the managed tensor pointer is NULL (nothing to import, no deleter to call)");
    case Status.version:
      code = "version";
      message = `DLPack major version ${found} is not supported: this library reads major ${limit} (any minor)`;
      break;
    case Status.flags:
      code = "flags";
      message = `reserved flag bits set: flags 0x${BigInt.asUintN(64, found).toString(16)}, ` +
        `only READ_ONLY (1), IS_COPIED (2) and IS_SUBBYTE_TYPE_PADDED (4) are defined`;
      break;
    case Status.rank:
      code = "rank";
      message = `ndim ${s.i32[I32.ndim]} is outside 0..${limit}`;
      break;
    case Status.dtype: {
      code = "dtype";
      message = describeDtypeRefusal(s.u32[U32.code], s.u32[U32.bits], s.u32[U32.lanes]);
      break;
    }
    case Status.device:
      code = "device";
      message = s.i32[I32.deviceId] < 0
        ? `device id ${s.i32[I32.deviceId]} is negative`
        : `unknown device type ${s.i32[I32.deviceType]}; DLPack 1.3 defines 1-4 and 7-18`;
      break;
    case Status.shape:
      code = "shape";
      message = dim >= 0
        ? `negative extent ${found} in dimension ${dim}`
        : dim === DetailDim.badPointer
        ? `the shape pointer 0x${BigInt.asUintN(64, found).toString(16)} cannot point at int64 values`
        : dim === DIM_UNREADABLE
        ? `the shape array at ${hex(found)} (${limit} bytes for ndim ${s.i32[I32.ndim]}) is not in readable memory`
        : `shape is NULL for a tensor of ndim ${s.i32[I32.ndim]}`;
      break;
    case Status.overflow:
      code = "overflow";
      message = dim >= 0
        ? `extent ${found} of dimension ${dim} exceeds 2^53, the largest a JavaScript number holds exactly`
        : `element count, byte span or address range overflows (limit 2^53 bytes and elements, ` +
          `the largest a JavaScript number indexes exactly)`;
      break;
    case Status.nullData:
      code = "null_data";
      message = `data is NULL but the tensor has ${found} elements`;
      break;
    case Status.byteOffset:
      code = "byte_offset";
      message = `fromDLPack is strict: byte_offset must be 0, got ${BigInt.asUintN(64, found)}` +
        ` (importDLPack folds it into the address)`;
      break;
    case Status.strides:
      code = "strides";
      message = dim === DetailDim.badPointer
        ? `the strides pointer 0x${BigInt.asUintN(64, found).toString(16)} cannot point at int64 values`
        : dim === DIM_UNREADABLE
        ? `the strides array at ${hex(found)} (${limit} bytes for ndim ${s.i32[I32.ndim]}) is not in readable memory`
        : `invalid strides`;
      break;
    case Status.deviceClaim:
      code = "device";
      message = dim === DetailDim.badPointer
        ? `the tensor claims ${claimOf(s)} but the CUDA driver sees ${limit} device(s)`
        : `the tensor claims ${claimOf(s)} but the CUDA driver reports ${
          memoryText(Number(found), Number(limit))
        } at its ${dim === 0 ? "first" : "last"} byte`;
      break;
    case Status.cuda: {
      code = "cuda";
      const last = lastDriverError();
      message = `the CUDA driver failed while checking the tensor's ${
        claimOf(s)
      } claim: ${last.call} returned ${last.errorName} (${last.result})`;
      break;
    }
    case Status.unmappedData:
      code = "null_data";
      message = `the data at ${hex(found)} (the ${limit} bytes its shape and strides reach) is not all in readable ` +
        `memory (unmapped, PROT_NONE or past the end of a mapping): a pointer that was never valid, or memory ` +
        `already freed; nothing of it was read`;
      break;
    case Status.badAddress:
      // Nothing could be read, so there is no deleter to call either.
      return new DLPackError(
        "null_data",
        `${found === 0n ? "that address" : `0x${BigInt.asUintN(64, found).toString(16)}`} cannot be a managed ` +
          `tensor (misaligned, in the first page, or beyond user space); nothing was read and no deleter called`,
      );
    case Status.outOfMemory:
      code = "library";
      message = "out of memory while recording the import";
      break;
    default:
      code = "library";
      message = `native call failed with status ${status}`;
  }
  const tail = released === null
    ? ""
    : released
    ? "; the producer's deleter was called"
    : "; the capsule keeps ownership";
  return new DLPackError(code, message + tail);
}
