/**
 * The element codec of `BufferView`: the checks a JS value passes before it is stored as an
 * element of a dtype, and the bit arithmetic of packed sub-byte elements. Plain functions of
 * their arguments, so `get`/`set` call them as directly as they called the view's own helpers.
 * @module
 */
import { DLPackError, shown } from "../facts/errors.ts";
import type { AnyTypedArray, Complex, DType, DTypeInfo, MiniFloatDType, Scalar } from "../facts/dtypes.ts";
import { floor, isArray, typedArrayLength } from "../facts/intrinsics.ts";
import { bfloat16ToNumber, decodeMiniFloat, encodeMiniFloat, numberToBfloat16 } from "../facts/scalars.ts";

/** A float element (and a bfloat16 or minifloat one before encoding) must be a number. */
export function expectNumber(value: Scalar, dtype: DType): number {
  if (typeof value !== "number") throw typeError(dtype, "a number", value);
  return value;
}

/** The dtypes stored as JS numbers that must be integers (storage kind "int"), and as bigints. */
type NumberIntDType = "int8" | "int16" | "int32" | "uint8" | "uint16" | "uint32";
type BigIntDType = "int64" | "uint64";

// Prototype-less: only the dtype names here are found.
const INT_RANGES = {
  __proto__: null,
  int8: [-128, 127],
  int16: [-32768, 32767],
  int32: [-(2 ** 31), 2 ** 31 - 1],
  uint8: [0, 255],
  uint16: [0, 65535],
  uint32: [0, 2 ** 32 - 1],
} as unknown as Readonly<Record<NumberIntDType, readonly [number, number]>>;

const BIGINT_RANGES = {
  __proto__: null,
  int64: [-(2n ** 63n), 2n ** 63n - 1n],
  uint64: [0n, 2n ** 64n - 1n],
} as unknown as Readonly<Record<BigIntDType, readonly [bigint, bigint]>>;

/** An integer element must be an integer in the dtype's range: a TypedArray store would
 * silently truncate 1.5, wrap 300 to 44 and turn NaN into 0. */
export function expectInteger(value: Scalar, dtype: NumberIntDType): number {
  const n = expectNumber(value, dtype);
  const range = INT_RANGES[dtype];
  const lo = range[0];
  const hi = range[1];
  if (n % 1 !== 0 || n < lo || n > hi) throw typeError(dtype, `an integer in ${lo}..${hi}`, value);
  return n;
}

/** A 64-bit integer element must be a bigint in the dtype's range. */
export function expectBigInt(value: Scalar, dtype: BigIntDType): bigint {
  if (typeof value !== "bigint") throw typeError(dtype, "a bigint", value);
  const range = BIGINT_RANGES[dtype];
  const lo = range[0];
  const hi = range[1];
  if (value < lo || value > hi) throw typeError(dtype, `a bigint in ${lo}..${hi}`, value);
  return value;
}

/** The error of an element value that does not fit `dtype`. */
export function typeError(dtype: DType, expected: string, got: unknown): DLPackError {
  return new DLPackError("dtype", `a ${dtype} element takes ${expected}, got ${shown(got)}`);
}

// Bit positions pass 2^32 in views of more than 512 MiB (2^30 float4 elements): they are split
// into byte and bit with double arithmetic (exact below 2^53), never with 32-bit shifts or masks,
// which would wrap them around to an element near the start. Only the byte-sized words are shifted.

/** Bit position from the start of `array()` of the element at `at`, for packed sub-byte data
 * whose lowest element sits at `minOffset`. */
function bitOf(at: number, bits: number, minOffset: number): number {
  const loBits = minOffset * bits;
  const startBit = floor(loBits / 8) * 8;
  return (at + minOffset) * bits - startBit;
}

/** The code of the sub-byte element at `at` (`bits` per slot: 8 when padded), an element of the
 * view `bytes` holds (its byte is there; the next one may not be). */
export function readBits(bytes: Uint8Array, at: number, bits: number, minOffset: number): number {
  if (bits === 8) return bytes[at]!;
  const bit = bitOf(at, bits, minOffset);
  const byte = floor(bit / 8);
  const mask = (1 << bits) - 1;
  const word = bytes[byte]! | ((bytes[byte + 1] ?? 0) << 8);
  return (word >>> (bit - byte * 8)) & mask;
}

/** Stores `code` as the sub-byte element at `at` (as in {@link readBits}), leaving its neighbours'
 * bits alone. */
export function writeBits(bytes: Uint8Array, at: number, bits: number, minOffset: number, code: number): void {
  if (bits === 8) {
    bytes[at] = code;
    return;
  }
  const bit = bitOf(at, bits, minOffset);
  const mask = (1 << bits) - 1;
  const byte = floor(bit / 8);
  const shift = bit - byte * 8;
  const word = (bytes[byte]! | ((bytes[byte + 1] ?? 0) << 8)) & ~(mask << shift) | ((code & mask) << shift);
  bytes[byte] = word & 0xff;
  if (shift + bits > 8) bytes[byte + 1] = word >>> 8;
}

/** Packs one-code-per-element sub-byte data (C order, `bits` each) into zeroed-first `bytes`
 * (long enough for them). */
export function packCodes(codes: Uint8Array, bytes: Uint8Array, bits: number): void {
  const n = typedArrayLength(codes);
  for (let i = typedArrayLength(bytes) - 1; i >= 0; i--) bytes[i] = 0;
  for (let k = 0; k < n; k++) {
    const bit = k * bits;
    const byte = floor(bit / 8);
    const shift = bit - byte * 8;
    const word = (codes[k]! & ((1 << bits) - 1)) << shift;
    bytes[byte]! |= word & 0xff;
    if (shift + bits > 8) bytes[byte + 1]! |= word >>> 8;
  }
}

/** Checks `value` as an element of `info`'s dtype and stores it as element `k` of `out`, an array
 * in the form of `toArray()` (complex interleaved, sub-byte floats one code per element). */
export function encodeElement(info: DTypeInfo, value: Scalar, out: AnyTypedArray, k: number): void {
  switch (info.kind) {
    case "int":
      out[k] = expectInteger(value, info.name as NumberIntDType);
      return;
    case "float":
      out[k] = expectNumber(value, info.name);
      return;
    case "bigint":
      out[k] = expectBigInt(value, info.name as BigIntDType);
      return;
    case "bool":
      if (typeof value !== "boolean") throw typeError(info.name, "a boolean", value);
      out[k] = value ? 1 : 0;
      return;
    case "bfloat16":
      out[k] = numberToBfloat16(expectNumber(value, info.name));
      return;
    case "minifloat":
      out[k] = encodeMiniFloat(info.name as MiniFloatDType, expectNumber(value, info.name));
      return;
    case "complex": {
      // Each part read once.
      if (!isArray(value)) throw typeError(info.name, "[real, imaginary]", value);
      const length: unknown = value.length;
      const re: unknown = value[0];
      const im: unknown = value[1];
      if (length !== 2 || typeof re !== "number" || typeof im !== "number") {
        throw typeError(info.name, "[real, imaginary]", value);
      }
      out[2 * k] = re;
      out[2 * k + 1] = im;
      return;
    }
  }
}

/** Element `k` of `flat`, an array in the form of `toArray()`, as `get` returns it. */
export function decodeElement(info: DTypeInfo, flat: AnyTypedArray, k: number): Scalar {
  switch (info.kind) {
    case "int":
    case "float":
    case "bigint":
      return flat[k]!;
    case "bool":
      return flat[k] !== 0;
    case "bfloat16":
      return bfloat16ToNumber(flat[k] as number);
    case "minifloat":
      return decodeMiniFloat(info.name as MiniFloatDType, flat[k] as number);
    case "complex":
      return [flat[2 * k] as number, flat[2 * k + 1] as number] as Complex;
  }
}
