/**
 * Element codecs for the formats JavaScript has no TypedArray for: bfloat16 and the FP8/FP6/FP4
 * families (ml_dtypes semantics: bias, NaN and infinity encodings per format; rounding to nearest,
 * ties to even).
 * @module
 */
import { DLPackError } from "./errors.ts";
import { abs, type Elements } from "./intrinsics.ts";
import type { MiniFloatDType } from "./dtypes.ts";

const f32 = new Float32Array(1) as Elements<Float32Array, 0>;
const u32 = new Uint32Array(f32.buffer) as Elements<Uint32Array, 0>;

/** bfloat16 bits -> number. */
export function bfloat16ToNumber(bits: number): number {
  u32[0] = (bits & 0xffff) << 16;
  return f32[0];
}

/** number -> bfloat16 bits, rounding to nearest even (NaN stays a quiet NaN). */
export function numberToBfloat16(value: number): number {
  f32[0] = value;
  const bits = u32[0];
  if (f32[0] !== f32[0]) return ((bits >>> 16) | 0x0040) & 0xffff;
  return ((bits + 0x7fff + ((bits >>> 16) & 1)) >>> 16) & 0xffff;
}

/** How one small float format encodes its values. */
interface Format {
  readonly exponentBits: number;
  readonly mantissaBits: number;
  readonly bias: number;
  readonly signed: boolean;
  /** IEEE-style: the all-ones exponent holds infinities and NaNs. */
  readonly ieee: boolean;
  /** "fn": only the all-ones pattern (either sign) is NaN. */
  readonly finiteNaNAllOnes: boolean;
  /** "fnuz": the negative-zero pattern is the only NaN, and there is no negative zero. */
  readonly nanIsNegativeZero: boolean;
}

const FORMATS: Readonly<Record<MiniFloatDType, Format>> = {
  __proto__: null,
  float8_e3m4: fmt(3, 4, 3, { ieee: true }),
  float8_e4m3: fmt(4, 3, 7, { ieee: true }),
  float8_e4m3b11fnuz: fmt(4, 3, 11, { nanIsNegativeZero: true }),
  float8_e4m3fn: fmt(4, 3, 7, { finiteNaNAllOnes: true }),
  float8_e4m3fnuz: fmt(4, 3, 8, { nanIsNegativeZero: true }),
  float8_e5m2: fmt(5, 2, 15, { ieee: true }),
  float8_e5m2fnuz: fmt(5, 2, 16, { nanIsNegativeZero: true }),
  float8_e8m0fnu: fmt(8, 0, 127, { signed: false, finiteNaNAllOnes: true }),
  float6_e2m3fn: fmt(2, 3, 1, {}),
  float6_e3m2fn: fmt(3, 2, 3, {}),
  float4_e2m1fn: fmt(2, 1, 1, {}),
} as unknown as Record<MiniFloatDType, Format>;

function fmt(
  exponentBits: number,
  mantissaBits: number,
  bias: number,
  o: { signed?: boolean; ieee?: boolean; finiteNaNAllOnes?: boolean; nanIsNegativeZero?: boolean },
): Format {
  return {
    exponentBits,
    mantissaBits,
    bias,
    signed: o.signed ?? true,
    ieee: o.ieee ?? false,
    finiteNaNAllOnes: o.finiteNaNAllOnes ?? false,
    nanIsNegativeZero: o.nanIsNegativeZero ?? false,
  };
}

function decodeWith(f: Format, code: number): number {
  const width = f.exponentBits + f.mantissaBits + (f.signed ? 1 : 0);
  const signBit = f.signed ? 1 << (width - 1) : 0;
  const negative = (code & signBit) !== 0;
  const magnitude = code & ~signBit & ((1 << width) - 1);
  const exponent = magnitude >>> f.mantissaBits;
  const mantissa = magnitude & ((1 << f.mantissaBits) - 1);
  const maxExponent = (1 << f.exponentBits) - 1;
  if (f.nanIsNegativeZero && negative && magnitude === 0) return NaN;
  if (f.finiteNaNAllOnes && exponent === maxExponent && mantissa === (1 << f.mantissaBits) - 1) return NaN;
  if (f.ieee && exponent === maxExponent) return mantissa === 0 ? (negative ? -Infinity : Infinity) : NaN;
  const scale = 2 ** f.mantissaBits;
  const value = exponent === 0 && f.mantissaBits > 0
    ? (mantissa / scale) * 2 ** (1 - f.bias)
    : (1 + mantissa / scale) * 2 ** (exponent - f.bias);
  return negative ? -value : value;
}

/** Decoding tables and the sorted finite magnitudes each format can hold. */
interface Codec {
  readonly decode: Float64Array;
  /** Non-negative finite values ascending, with the code of each. */
  readonly magnitudes: Float64Array;
  readonly codes: Uint8Array;
  readonly signBit: number;
  readonly nanCode: number | undefined;
  readonly infCode: number | undefined;
  readonly signed: boolean;
  readonly negativeZero: boolean;
  /** Exponent-only formats (e8m0) have no mantissa bit to make even: ties round up. */
  readonly tiesUp: boolean;
}

// Prototype-less: only codecs made here are found.
const codecs: Record<string, Codec | undefined> = { __proto__: null } as unknown as Record<string, Codec>;

function codecOf(dtype: MiniFloatDType): Codec {
  let codec = codecs[dtype];
  if (codec !== undefined) return codec;
  const f = FORMATS[dtype];
  const width = f.exponentBits + f.mantissaBits + (f.signed ? 1 : 0);
  const count = 1 << width;
  const signBit = f.signed ? 1 << (width - 1) : 0;
  const decode = new Float64Array(count);
  const positives: Array<[number, number]> = [];
  let nanCode: number | undefined;
  let infCode: number | undefined;
  for (let code = 0; code < count; code++) {
    const value = decodeWith(f, code);
    decode[code] = value;
    if (value !== value) nanCode ??= code;
    else if (value === Infinity) infCode = code;
    else if ((code & signBit) === 0) positives.push([value, code]);
  }
  positives.sort((a, b) => a[0] - b[0]);
  codec = {
    decode,
    magnitudes: Float64Array.from(positives, (p) => p[0]),
    codes: Uint8Array.from(positives, (p) => p[1]),
    signBit,
    nanCode,
    infCode,
    signed: f.signed,
    negativeZero: f.signed && !f.nanIsNegativeZero,
    tiesUp: f.mantissaBits === 0,
  };
  codecs[dtype] = codec;
  return codec;
}

/** A small float's bits -> number. */
export function decodeMiniFloat(dtype: MiniFloatDType, code: number): number {
  // The table covers every code of the format's width (a power of two long); bits above it are a
  // padded element's padding, which holds no part of the value.
  const decode = codecOf(dtype).decode;
  return decode[code & (decode.length - 1)]!;
}

/** number -> a small float's bits, as ml_dtypes rounds: nearest value, ties to the even code (up
 * for the exponent-only e8m0); overflow goes to infinity, else NaN, else the largest finite value
 * (formats with neither); values a format cannot hold (e8m0: zero, negatives) become NaN. */
export function encodeMiniFloat(dtype: MiniFloatDType, value: number): number {
  const c = codecOf(dtype);
  if (value !== value) {
    if (c.nanCode === undefined) throw new DLPackError("dtype", `${dtype} cannot hold NaN`);
    return c.nanCode;
  }
  const negative = value < 0 || (value === 0 && 1 / value < 0);
  const mags = c.magnitudes;
  // Unsigned formats without a zero (e8m0) hold neither negatives nor zero: like ml_dtypes, NaN.
  if (!c.signed && (negative || (value === 0 && mags[0] !== 0))) return c.nanCode!;
  const magnitude = abs(value);
  // Every format holds at least two finite magnitudes, and the search keeps 0 <= lo < hi <= last:
  // each index below is within `mags` and `codes` (one code per magnitude).
  const last = mags.length - 1;
  const codes = c.codes;
  let code: number;
  if (magnitude >= mags[last]!) {
    // Past the largest finite value by more than half a step rounds out of range; exactly half a
    // step ties to even, as if the next (out-of-range) code existed.
    const top = mags[last]!;
    const half = top + (top - mags[last - 1]!) / 2;
    const out = magnitude > half || (magnitude === half && (codes[last]! & 1) === 1);
    if (out && (c.infCode !== undefined || c.nanCode !== undefined)) {
      if (c.infCode !== undefined) return negative ? (c.infCode | c.signBit) : c.infCode;
      return c.nanCode!;
    }
    code = codes[last]!;
  } else {
    let lo = 0;
    let hi = last;
    while (hi - lo > 1) {
      const mid = (lo + hi) >>> 1;
      if (mags[mid]! <= magnitude) lo = mid;
      else hi = mid;
    }
    const below = magnitude - mags[lo]!;
    const above = mags[hi]! - magnitude;
    const loCode = codes[lo]!;
    const hiCode = codes[hi]!;
    if (below < above) code = loCode;
    else if (above < below) code = hiCode;
    else code = c.tiesUp || (loCode & 1) !== 0 ? hiCode : loCode;
  }
  if (negative && (code !== 0 || c.negativeZero)) code |= c.signBit;
  return code;
}

// Every codec is built while the module loads, with the built-ins as they were then (sort,
// push, Float64Array.from): nothing replaced later can change how values are encoded.
for (const name of Object.keys(FORMATS) as MiniFloatDType[]) codecOf(name);

/** Whether a dtype name is one of the small float formats. */
export function isMiniFloat(dtype: string): dtype is MiniFloatDType {
  return typeof dtype === "string" && dtype in FORMATS;
}
