/**
 * The errors of native refusals: the message of each status, read from the details the call
 * wrote into the scratch.
 * @module
 */
import { DLPackError, type ErrorCode } from "../facts/errors.ts";
import { deviceName, formatDevice } from "../facts/devices.ts";
import { lastDriverError } from "./cuda_driver.ts";
import { DetailDim, TypeCode } from "../facts/abi.ts";
import { typeCodesText, widthsOfCode } from "../facts/dtypes.ts";
import { I32, I64, type Scratch, Status, U32 } from "./scratch.ts";

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
