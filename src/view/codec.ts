/**
 * The element codec of `BufferView`: the checks a JS value passes before it is stored as an
 * element of a dtype, and the bit arithmetic of packed sub-byte elements. Plain functions of
 * their arguments, so `get`/`set` call them as directly as they called the view's own helpers.
 * @module
 */
import { DLPackError, shown } from "../facts/errors.ts";
import type { DType, Scalar } from "../facts/dtypes.ts";
import { floor, typedArrayLength } from "../facts/intrinsics.ts";

/** A float element (and a bfloat16 or minifloat one before encoding) must be a number. */
export function expectNumber(value: Scalar, dtype: DType): number {
  if (typeof value !== "number") throw typeError(dtype, "a number", value);
  return value;
}

// Prototype-less: only the dtype names here are found.
const INT_RANGES = {
  __proto__: null,
  int8: [-128, 127],
  int16: [-32768, 32767],
  int32: [-(2 ** 31), 2 ** 31 - 1],
  uint8: [0, 255],
  uint16: [0, 65535],
  uint32: [0, 2 ** 32 - 1],
} as unknown as Readonly<Record<string, readonly [number, number]>>;

const BIGINT_RANGES = {
  __proto__: null,
  int64: [-(2n ** 63n), 2n ** 63n - 1n],
  uint64: [0n, 2n ** 64n - 1n],
} as unknown as Readonly<Record<string, readonly [bigint, bigint]>>;

/** An integer element must be an integer in the dtype's range: a TypedArray store would
 * silently truncate 1.5, wrap 300 to 44 and turn NaN into 0. */
export function expectInteger(value: Scalar, dtype: DType): number {
  const n = expectNumber(value, dtype);
  const range = INT_RANGES[dtype];
  const lo = range[0];
  const hi = range[1];
  if (n % 1 !== 0 || n < lo || n > hi) throw typeError(dtype, `an integer in ${lo}..${hi}`, value);
  return n;
}

/** A 64-bit integer element must be a bigint in the dtype's range. */
export function expectBigInt(value: Scalar, dtype: DType): bigint {
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

/** Bit position from the start of `array()` of the element at `at`, for packed sub-byte data
 * whose lowest element sits at `minOffset`. */
function bitOf(at: number, bits: number, minOffset: number): number {
  const loBits = minOffset * bits;
  const startBit = floor(loBits / 8) * 8;
  return (at + minOffset) * bits - startBit;
}

/** The code of the sub-byte element at `at` (`bits` per slot: 8 when padded). */
export function readBits(bytes: Uint8Array, at: number, bits: number, minOffset: number): number {
  if (bits === 8) return bytes[at];
  const bit = bitOf(at, bits, minOffset);
  const mask = (1 << bits) - 1;
  const word = bytes[bit >>> 3] | ((bytes[(bit >>> 3) + 1] ?? 0) << 8);
  return (word >>> (bit & 7)) & mask;
}

/** Stores `code` as the sub-byte element at `at`, leaving its neighbours' bits alone. */
export function writeBits(bytes: Uint8Array, at: number, bits: number, minOffset: number, code: number): void {
  if (bits === 8) {
    bytes[at] = code;
    return;
  }
  const bit = bitOf(at, bits, minOffset);
  const mask = (1 << bits) - 1;
  const byte = bit >>> 3;
  const shift = bit & 7;
  const word = (bytes[byte] | ((bytes[byte + 1] ?? 0) << 8)) & ~(mask << shift) | ((code & mask) << shift);
  bytes[byte] = word & 0xff;
  if (shift + bits > 8) bytes[byte + 1] = word >>> 8;
}

/** Packs one-code-per-element sub-byte data (C order, `bits` each) into zeroed-first `bytes`. */
export function packCodes(codes: Uint8Array, bytes: Uint8Array, bits: number): void {
  const n = typedArrayLength(codes);
  for (let i = typedArrayLength(bytes) - 1; i >= 0; i--) bytes[i] = 0;
  for (let k = 0; k < n; k++) {
    const bit = k * bits;
    const word = (codes[k] & ((1 << bits) - 1)) << (bit & 7);
    bytes[bit >>> 3] |= word & 0xff;
    if ((bit & 7) + bits > 8) bytes[(bit >>> 3) + 1] |= word >>> 8;
  }
}
