/**
 * The dtype tables, both ways: names <-> DLPack (code, bits, lanes), and TypedArray constructors
 * <-> names, plus the static types that make `as(dtype, ndim)` checkable by the compiler.
 * @module
 */
import { DLPackError } from "./errors.ts";

/** Every element type the library reads and writes. */
export type DType =
  | "bool"
  | "int8"
  | "int16"
  | "int32"
  | "int64"
  | "uint8"
  | "uint16"
  | "uint32"
  | "uint64"
  | "float16"
  | "float32"
  | "float64"
  | "bfloat16"
  | "complex32"
  | "complex64"
  | "complex128"
  | "float8_e3m4"
  | "float8_e4m3"
  | "float8_e4m3b11fnuz"
  | "float8_e4m3fn"
  | "float8_e4m3fnuz"
  | "float8_e5m2"
  | "float8_e5m2fnuz"
  | "float8_e8m0fnu"
  | "float6_e2m3fn"
  | "float6_e3m2fn"
  | "float4_e2m1fn";

/** The DLPack triple of a dtype. */
export interface DLDataType {
  /** `DLDataTypeCode` (Int 0, UInt 1, Float 2, Bfloat 4, Complex 5, Bool 6, FP8/6/4 7-17). */
  readonly code: number;
  /** Bits per element (per lane). */
  readonly bits: number;
  /** Vector lanes; always 1 for the dtypes this library supports. */
  readonly lanes: number;
}

/** The 8-bit and smaller float formats (read through `get`, stored as raw bits in `array()`). */
export type MiniFloatDType = Extract<DType, `float8_${string}` | `float6_${string}` | `float4_${string}`>;

/** The TypedArray `array()` returns for a dtype. */
export type ArrayOf<D extends DType> = D extends "int8" ? Int8Array<ArrayBuffer>
  : D extends "int16" ? Int16Array<ArrayBuffer>
  : D extends "int32" ? Int32Array<ArrayBuffer>
  : D extends "int64" ? BigInt64Array<ArrayBuffer>
  : D extends "uint16" | "bfloat16" ? Uint16Array<ArrayBuffer>
  : D extends "uint32" ? Uint32Array<ArrayBuffer>
  : D extends "uint64" ? BigUint64Array<ArrayBuffer>
  : D extends "float16" | "complex32" ? Float16Array<ArrayBuffer>
  : D extends "float32" | "complex64" ? Float32Array<ArrayBuffer>
  : D extends "float64" | "complex128" ? Float64Array<ArrayBuffer>
  : Uint8Array<ArrayBuffer>;

/** A complex element as `[real, imaginary]`. */
export type Complex = readonly [number, number];

/** The JS value of one element of a dtype. */
export type ScalarOf<D extends DType> = D extends "bool" ? boolean
  : D extends "int64" | "uint64" ? bigint
  : D extends "complex32" | "complex64" | "complex128" ? Complex
  : number;

/** Any element value. */
export type Scalar = number | bigint | boolean | Complex;

/** Any TypedArray the library can export or hand out. */
export type AnyTypedArray =
  | Int8Array<ArrayBufferLike>
  | Uint8Array<ArrayBufferLike>
  | Uint8ClampedArray<ArrayBufferLike>
  | Int16Array<ArrayBufferLike>
  | Uint16Array<ArrayBufferLike>
  | Int32Array<ArrayBufferLike>
  | Uint32Array<ArrayBufferLike>
  | Float16Array<ArrayBufferLike>
  | Float32Array<ArrayBufferLike>
  | Float64Array<ArrayBufferLike>
  | BigInt64Array<ArrayBufferLike>
  | BigUint64Array<ArrayBufferLike>;

/** How `get`/`set` and `array()` treat a dtype's storage. */
export type StorageKind = "bool" | "int" | "bigint" | "float" | "bfloat16" | "complex" | "minifloat";

/** Everything the library knows about one dtype. */
export interface DTypeInfo {
  readonly name: DType;
  readonly dl: DLDataType;
  /** Bits per element (4 and 6 for the packed sub-byte floats). */
  readonly bits: number;
  readonly kind: StorageKind;
  /** The TypedArray constructor of `array()`. */
  readonly array: TypedArrayConstructor;
  /** TypedArray slots per element: 2 for complex (interleaved), else 1. */
  readonly slots: number;
}

/** A TypedArray constructor as the dtype table uses it. */
export type TypedArrayConstructor = {
  new (buffer: ArrayBuffer, byteOffset?: number, length?: number): AnyTypedArray;
  readonly BYTES_PER_ELEMENT: number;
};

const Float16 = (globalThis as { Float16Array?: TypedArrayConstructor }).Float16Array;

function info(
  name: DType,
  code: number,
  bits: number,
  kind: StorageKind,
  array: TypedArrayConstructor | undefined,
  slots = 1,
): DTypeInfo {
  return Object.freeze({
    name,
    dl: Object.freeze({ code, bits, lanes: 1 }),
    bits,
    kind,
    // Runtimes without Float16Array hand out the raw bits.
    array: array ?? Uint16Array,
    slots,
  });
}

const TABLE: readonly DTypeInfo[] = [
  info("bool", 6, 8, "bool", Uint8Array),
  info("int8", 0, 8, "int", Int8Array),
  info("int16", 0, 16, "int", Int16Array),
  info("int32", 0, 32, "int", Int32Array),
  info("int64", 0, 64, "bigint", BigInt64Array),
  info("uint8", 1, 8, "int", Uint8Array),
  info("uint16", 1, 16, "int", Uint16Array),
  info("uint32", 1, 32, "int", Uint32Array),
  info("uint64", 1, 64, "bigint", BigUint64Array),
  info("float16", 2, 16, "float", Float16),
  info("float32", 2, 32, "float", Float32Array),
  info("float64", 2, 64, "float", Float64Array),
  info("bfloat16", 4, 16, "bfloat16", Uint16Array),
  info("complex32", 5, 32, "complex", Float16, 2),
  info("complex64", 5, 64, "complex", Float32Array, 2),
  info("complex128", 5, 128, "complex", Float64Array, 2),
  info("float8_e3m4", 7, 8, "minifloat", Uint8Array),
  info("float8_e4m3", 8, 8, "minifloat", Uint8Array),
  info("float8_e4m3b11fnuz", 9, 8, "minifloat", Uint8Array),
  info("float8_e4m3fn", 10, 8, "minifloat", Uint8Array),
  info("float8_e4m3fnuz", 11, 8, "minifloat", Uint8Array),
  info("float8_e5m2", 12, 8, "minifloat", Uint8Array),
  info("float8_e5m2fnuz", 13, 8, "minifloat", Uint8Array),
  info("float8_e8m0fnu", 14, 8, "minifloat", Uint8Array),
  info("float6_e2m3fn", 15, 6, "minifloat", Uint8Array),
  info("float6_e3m2fn", 16, 6, "minifloat", Uint8Array),
  info("float4_e2m1fn", 17, 4, "minifloat", Uint8Array),
];

const BY_NAME = new Map<string, DTypeInfo>(TABLE.map((t) => [t.name, t]));
// Dense (code, bits) -> info table: the import hot path looks up every tensor's dtype.
const BY_TRIPLE: Array<DTypeInfo | undefined> = new Array(32 * 256).fill(undefined);
for (const t of TABLE) BY_TRIPLE[t.dl.code * 256 + t.dl.bits] = t;

/** Every dtype name, in table order. */
export const DTYPES: readonly DType[] = Object.freeze(TABLE.map((t) => t.name));

/** Whether a string names a dtype. */
export function isDType(name: unknown): name is DType {
  return typeof name === "string" && BY_NAME.has(name);
}

/** The table entry of a dtype name; throws `DLPackError` ("dtype") for anything else. */
export function dtypeInfo(name: DType | string): DTypeInfo {
  const found = BY_NAME.get(name);
  if (found === undefined) {
    throw new DLPackError("dtype", `unknown dtype ${JSON.stringify(name)}; expected one of ${DTYPES.join(", ")}`);
  }
  return found;
}

/** The DLPack triple of a dtype name. */
export function toDLDataType(name: DType): DLDataType {
  return dtypeInfo(name).dl;
}

/** The dtype of a DLPack triple, or undefined when the library does not support it. */
export function fromDLDataType(dl: DLDataType): DType | undefined {
  if (dl.lanes !== 1) return undefined;
  return (dl.code >= 0 && dl.code < 32 && dl.bits >= 0 && dl.bits < 256)
    ? BY_TRIPLE[dl.code * 256 + dl.bits]?.name
    : undefined;
}

/** The table entry for a code and bits the native validator already accepted. */
export function infoOfTriple(code: number, bits: number): DTypeInfo | undefined {
  return code < 32 && bits < 256 ? BY_TRIPLE[code * 256 + bits] : undefined;
}

const BY_ARRAY = new Map<unknown, DType>([
  [Int8Array, "int8"],
  [Uint8Array, "uint8"],
  [Uint8ClampedArray, "uint8"],
  [Int16Array, "int16"],
  [Uint16Array, "uint16"],
  [Int32Array, "int32"],
  [Uint32Array, "uint32"],
  [Float32Array, "float32"],
  [Float64Array, "float64"],
  [BigInt64Array, "int64"],
  [BigUint64Array, "uint64"],
]);
if (Float16 !== undefined) BY_ARRAY.set(Float16, "float16");

/** The natural dtype of a TypedArray (`Float32Array` -> "float32"). */
export function dtypeOfArray(array: ArrayBufferView): DType {
  const found = BY_ARRAY.get(array.constructor);
  if (found === undefined) {
    throw new DLPackError("dtype", `${array.constructor.name} has no dtype; pass a TypedArray such as Float32Array`);
  }
  return found;
}

/** The TypedArray constructor `array()` uses for a dtype. */
export function arrayConstructorOf(name: DType): TypedArrayConstructor {
  return dtypeInfo(name).array;
}
