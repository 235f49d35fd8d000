/**
 * The dtype tables, both ways: names <-> DLPack (code, bits, lanes), and TypedArray constructors
 * <-> names, plus the static types that make `as(dtype, ndim)` checkable by the compiler.
 * @module
 */
import { DLPackError, shown } from "./errors.ts";
import { freeze, typedArrayTag } from "./intrinsics.ts";
import { DTYPES as ABI_DTYPES, TypeCode } from "./abi.ts";

/** Every element type the library reads and writes: the names of the native dtype table. */
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

// The union is spelled out for the documentation; the compiler checks it names exactly the
// generated table's dtypes (a dtype added in Zig fails the type check until it is added here).
type Same<A, B> = [A] extends [B] ? ([B] extends [A] ? true : false) : false;
true satisfies Same<DType, (typeof ABI_DTYPES)[number]["name"]>;

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

/** The dtype of a TypedArray type (`Float32Array` is "float32"; both Uint8 arrays are "uint8"). */
export type DTypeOfArray<T extends AnyTypedArray> = T extends Int8Array<ArrayBufferLike> ? "int8"
  : T extends Uint8Array<ArrayBufferLike> | Uint8ClampedArray<ArrayBufferLike> ? "uint8"
  : T extends Int16Array<ArrayBufferLike> ? "int16"
  : T extends Uint16Array<ArrayBufferLike> ? "uint16"
  : T extends Int32Array<ArrayBufferLike> ? "int32"
  : T extends Uint32Array<ArrayBufferLike> ? "uint32"
  : T extends Float16Array<ArrayBufferLike> ? "float16"
  : T extends Float32Array<ArrayBufferLike> ? "float32"
  : T extends Float64Array<ArrayBufferLike> ? "float64"
  : T extends BigInt64Array<ArrayBufferLike> ? "int64"
  : T extends BigUint64Array<ArrayBufferLike> ? "uint64"
  : DType;

/** A complex element as `[real, imaginary]`. */
export type Complex = readonly [number, number];

/** The JS value of one element of a dtype. */
export type ScalarOf<D extends DType> = D extends "bool" ? boolean
  : D extends "int64" | "uint64" ? bigint
  : D extends "complex32" | "complex64" | "complex128" ? Complex
  : number;

/** The TypedArray `array()` gives for dtype `D`: any of them when `D` is not one literal dtype. */
export type ArrayFor<D extends DType> = DType extends D ? AnyTypedArray : ArrayOf<D>;

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
type StorageKind = "bool" | "int" | "bigint" | "float" | "bfloat16" | "complex" | "minifloat";

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
  /** The brand of `array`'s instances ("Float32Array"), as {@link typedArrayTag} reads it. */
  readonly tag: string;
  /** `array.BYTES_PER_ELEMENT`. */
  readonly slotBytes: number;
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
  ctor: TypedArrayConstructor,
  slots = 1,
): DTypeInfo {
  return Object.freeze({
    name,
    dl: Object.freeze({ code, bits, lanes: 1 }),
    bits,
    kind,
    array: ctor,
    slots,
    tag: typedArrayTag(new ctor(new ArrayBuffer(0)))!,
    slotBytes: ctor.BYTES_PER_ELEMENT,
  });
}

// Runtimes without Float16Array hand out the raw bits.
const FLOATS: Readonly<Record<number, TypedArrayConstructor>> = {
  16: Float16 ?? Uint16Array,
  32: Float32Array,
  64: Float64Array,
};
const INTS: Readonly<Record<number, TypedArrayConstructor>> = { 8: Int8Array, 16: Int16Array, 32: Int32Array };
const UINTS: Readonly<Record<number, TypedArrayConstructor>> = { 8: Uint8Array, 16: Uint16Array, 32: Uint32Array };

/** How JS stores the elements of a dtype of the native table: what it knows per type code. */
function storedAs(name: DType, code: number, bits: number): DTypeInfo {
  const of = (arrays: Readonly<Record<number, TypedArrayConstructor>>, width: number): TypedArrayConstructor => {
    const found = arrays[width];
    if (found === undefined) throw unstorable(name, code);
    return found;
  };
  switch (code) {
    case TypeCode.bool:
      return info(name, code, bits, "bool", Uint8Array);
    case TypeCode.int:
      return bits === 64
        ? info(name, code, bits, "bigint", BigInt64Array)
        : info(name, code, bits, "int", of(INTS, bits));
    case TypeCode.uint:
      return bits === 64
        ? info(name, code, bits, "bigint", BigUint64Array)
        : info(name, code, bits, "int", of(UINTS, bits));
    case TypeCode.float:
      return info(name, code, bits, "float", of(FLOATS, bits));
    case TypeCode.bfloat:
      return info(name, code, bits, "bfloat16", Uint16Array);
    case TypeCode.complex:
      return info(name, code, bits, "complex", of(FLOATS, bits / 2), 2);
  }
  // The float8, float6 and float4 codes: one byte per element in array(), decoded by get().
  if (code >= TypeCode.float8E3m4 && code <= TypeCode.float4E2m1fn) {
    return info(name, code, bits, "minifloat", Uint8Array);
  }
  throw unstorable(name, code);
}

function unstorable(name: string, code: number): DLPackError {
  return new DLPackError(
    "library",
    `the native dtype table has ${name} (code ${code}), which this module cannot store`,
  );
}

const TABLE: readonly DTypeInfo[] = ABI_DTYPES.map((d) => storedAs(d.name, d.code, d.bits));

// Prototype-less lookup tables: a name such as "constructor" or "__proto__" finds nothing, and
// nothing a caller installs on Object.prototype is ever found.
const BY_NAME: Record<string, DTypeInfo | undefined> = { __proto__: null } as unknown as Record<string, DTypeInfo>;
for (const t of TABLE) BY_NAME[t.name] = t;
// Dense (code, bits) -> info table: the import hot path looks up every tensor's dtype.
const BY_TRIPLE: Array<DTypeInfo | undefined> = new Array(32 * 256).fill(undefined);
for (const t of TABLE) BY_TRIPLE[t.dl.code * 256 + t.dl.bits] = t;

/** The bit widths the table's dtypes of a DLPack type code have (empty for a code it lacks). */
export function widthsOfCode(code: number): readonly number[] {
  const widths: number[] = [];
  for (const t of TABLE) if (t.dl.code === code) widths.push(t.bits);
  return widths;
}

/** The DLPack type codes of the table, ascending, as text ("0-2 and 4-17"). */
export function typeCodesText(): string {
  const codes = [...new Set(TABLE.map((t) => t.dl.code))].sort((a, b) => a - b);
  const runs: string[] = [];
  for (let k = 0; k < codes.length;) {
    let end = k;
    while (end + 1 < codes.length && codes[end + 1] === codes[end]! + 1) end++;
    runs.push(end === k ? `${codes[k]}` : `${codes[k]}-${codes[end]}`);
    k = end + 1;
  }
  return runs.length < 2 ? runs.join("") : `${runs.slice(0, -1).join(", ")} and ${runs[runs.length - 1]}`;
}

/** Every dtype name, in table order. */
export const DTYPES: readonly DType[] = Object.freeze(TABLE.map((t) => t.name));
const DTYPE_LIST = DTYPES.join(", ");

/** Whether a string names a dtype. */
export function isDType(name: unknown): name is DType {
  return typeof name === "string" && BY_NAME[name] !== undefined;
}

/** The table entry of a dtype name; throws `DLPackError` ("dtype") for anything else. */
export function dtypeInfo(name: DType | string): DTypeInfo {
  const found = typeof name === "string" ? BY_NAME[name] : undefined;
  if (found === undefined) {
    throw new DLPackError("dtype", `unknown dtype ${shown(name)}; expected one of ${DTYPE_LIST}`);
  }
  return found;
}

/** The DLPack triple of a dtype name. */
export function toDLDataType(name: DType): DLDataType {
  return dtypeInfo(name).dl;
}

/** The dtype of a DLPack triple, or undefined when the library does not support it. */
export function fromDLDataType(dl: DLDataType): DType | undefined {
  if (dl === null || typeof dl !== "object") {
    throw new DLPackError("argument", `fromDLDataType takes { code, bits, lanes }, got ${shown(dl)}`);
  }
  const code: unknown = dl.code;
  const bits: unknown = dl.bits;
  const lanes: unknown = dl.lanes;
  if (lanes !== 1 || typeof code !== "number" || typeof bits !== "number") return undefined;
  return (code % 1 === 0 && code >= 0 && code < 32 && bits % 1 === 0 && bits >= 0 && bits < 256)
    ? BY_TRIPLE[code * 256 + bits]?.name
    : undefined;
}

/** The table entry for a code and bits the native validator already accepted. */
export function infoOfTriple(code: number, bits: number): DTypeInfo | undefined {
  return code < 32 && bits < 256 ? BY_TRIPLE[code * 256 + bits] : undefined;
}

/** The natural dtype of each TypedArray brand (prototype-less: see BY_NAME). */
const BY_TAG: Record<string, DType | undefined> = freeze({
  __proto__: null,
  Int8Array: "int8",
  Uint8Array: "uint8",
  Uint8ClampedArray: "uint8",
  Int16Array: "int16",
  Uint16Array: "uint16",
  Int32Array: "int32",
  Uint32Array: "uint32",
  Float32Array: "float32",
  Float64Array: "float64",
  BigInt64Array: "int64",
  BigUint64Array: "uint64",
  Float16Array: Float16 === undefined ? undefined : "float16",
}) as unknown as Record<string, DType | undefined>;

const INFO_BY_TAG: Record<string, DTypeInfo | undefined> = { __proto__: null } as unknown as Record<string, DTypeInfo>;
for (const tag of Object.keys(BY_TAG)) {
  const dtype = BY_TAG[tag];
  if (dtype !== undefined) INFO_BY_TAG[tag] = BY_NAME[dtype];
}

/** The table entry of a TypedArray brand's natural dtype (undefined for anything else). */
export function infoOfTag(tag: string): DTypeInfo | undefined {
  // Exports repeat the same kind of array: a one-entry cache beats the dictionary lookup.
  if (tag === lastTag) return lastInfo;
  const info = INFO_BY_TAG[tag];
  lastTag = tag;
  lastInfo = info;
  return info;
}

let lastTag = "";
let lastInfo: DTypeInfo | undefined;

/** The dtype of a TypedArray brand from {@link typedArrayTag} (undefined for anything else). */
export function dtypeOfTag(tag: string | undefined): DType | undefined {
  return tag === undefined ? undefined : BY_TAG[tag];
}

/** The natural dtype of a TypedArray (`Float32Array` -> "float32"), from the engine's own record of
 * its element type: an own `constructor` property or a replaced prototype cannot change it. */
export function dtypeOfArray(array: ArrayBufferView): DType {
  const found = dtypeOfTag(typedArrayTag(array));
  if (found === undefined) {
    throw new DLPackError("dtype", `${shown(array)} has no dtype; pass a TypedArray such as Float32Array`);
  }
  return found;
}

/** numpy's type codes (kind and item size, as in the typestr "<f4" or a .npy descr, without the
 * byte order) of the dtypes numpy itself has. Prototype-less: only these keys are found. */
export const NUMPY_TYPE_CODES: Readonly<Record<string, DType | undefined>> = freeze({
  __proto__: null,
  b1: "bool",
  i1: "int8",
  i2: "int16",
  i4: "int32",
  i8: "int64",
  u1: "uint8",
  u2: "uint16",
  u4: "uint32",
  u8: "uint64",
  f2: "float16",
  f4: "float32",
  f8: "float64",
  c8: "complex64",
  c16: "complex128",
}) as unknown as Record<string, DType | undefined>;

/** The TypedArray constructor `array()` uses for a dtype. */
export function arrayConstructorOf(name: DType): TypedArrayConstructor {
  return dtypeInfo(name).array;
}
