/**
 * The element codec: the checks a JS value passes before it is stored as an element of a dtype,
 * the bit arithmetic of packed sub-byte elements, and where a view's elements lie in memory (its
 * span) and how they are gathered into C order and scattered back. Plain functions of their
 * arguments, so `get`/`set` call them as directly as they would the view's own helpers.
 * @module
 */
import { core, runtime } from "../../ffi/mod.ts";
import type { MemoryReads } from "../../ffi/types.ts";
import { DLPackError, shown, withArticle } from "../facts/errors.ts";
import {
  type AnyTypedArray,
  type Complex,
  type DType,
  type DTypeInfo,
  dtypeInfo,
  type MiniFloatDType,
  type Scalar,
} from "../facts/dtypes.ts";
import { ArrayBufferCtor, ceil, floor, isArray, slots, typedArrayLength } from "../facts/intrinsics.ts";
import { bfloat16ToNumber, decodeMiniFloat, encodeMiniFloat, numberToBfloat16 } from "../facts/scalars.ts";
import { nextOffset } from "../facts/layout.ts";
import { Flag, TypeCode } from "../facts/abi.ts";
import type { ViewFacts } from "./state.ts";
import { formatDevice, isHostAccessible } from "../facts/devices.ts";

const SUBBYTE_PADDED = Flag.isSubbyteTypePadded;

/** A float element (and a bfloat16 or minifloat one before encoding) must be a number. */
function expectNumber(value: Scalar, dtype: DType): number {
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
function expectInteger(value: Scalar, dtype: NumberIntDType): number {
  const n = expectNumber(value, dtype);
  const range = INT_RANGES[dtype];
  const lo = range[0];
  const hi = range[1];
  if (n % 1 !== 0 || n < lo || n > hi) throw typeError(dtype, `an integer in ${lo}..${hi}`, value);
  return n;
}

/** A 64-bit integer element must be a bigint in the dtype's range. */
function expectBigInt(value: Scalar, dtype: BigIntDType): bigint {
  if (typeof value !== "bigint") throw typeError(dtype, "a bigint", value);
  const range = BIGINT_RANGES[dtype];
  const lo = range[0];
  const hi = range[1];
  if (value < lo || value > hi) throw typeError(dtype, `a bigint in ${lo}..${hi}`, value);
  return value;
}

/** The error of an element value that does not fit `dtype`. */
function typeError(dtype: DType, expected: string, got: unknown): DLPackError {
  return new DLPackError("dtype", `${withArticle(dtype)} element takes ${expected}, got ${shown(got)}`);
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
function readBits(bytes: Uint8Array, at: number, bits: number, minOffset: number): number {
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

/** Bits each element occupies in memory (padded sub-byte types take a whole byte). */
export function slotBitsOf(facts: ViewFacts): number {
  const bits = facts.info.bits;
  return bits < 8 && (facts.origin.flags & SUBBYTE_PADDED) !== 0 ? 8 : bits;
}

/** Bytes from element 0 to the first byte of a non-empty view's span (its lowest element). */
export function spanStart(facts: ViewFacts): number {
  const bits = facts.info.bits;
  if (bits >= 8) return facts.minOffset * (bits >> 3);
  return floor((facts.minOffset * slotBitsOf(facts)) / 8);
}

/** Bytes of a non-empty view's span, from its lowest element to its highest. */
export function spanBytes(facts: ViewFacts): number {
  const bits = facts.info.bits;
  if (bits >= 8) return (facts.maxOffset - facts.minOffset + 1) * (bits >> 3);
  const slot = slotBitsOf(facts);
  return ceil(((facts.maxOffset + 1) * slot) / 8) - floor((facts.minOffset * slot) / 8);
}

/** A TypedArray of the view's array type over the span of host memory whose element 0 is at
 * `address`, for an engine's own use during one call (nothing detaches it: it must not escape). */
export function spanArray(address: number, facts: ViewFacts): AnyTypedArray {
  const Ctor = facts.info.array;
  if (facts.size === 0) return new Ctor(new ArrayBufferCtor(0));
  const byteLength = spanBytes(facts);
  const buffer = runtime().arrayBuffer(address + spanStart(facts), byteLength);
  return new Ctor(buffer, 0, floor(byteLength / facts.info.slotBytes));
}

/** A new ArrayBuffer of `bytes` for a copy in JS memory (`what` makes it), refused with a
 * DLPackError where the engine cannot make one that large (copy() gives library memory instead). */
export function jsBuffer(bytes: number, what: string): ArrayBuffer {
  try {
    return new ArrayBufferCtor(bytes);
  } catch {
    throw new DLPackError(
      "library",
      `${what} needs a JS ArrayBuffer of ${bytes} bytes, which this runtime could not allocate; ` +
        `copy() makes the copy in library memory, or take part of the view with slice()`,
    );
  }
}

/** The elements of a view whose span `src` holds (as `array()` does), in C order in a new JS
 * TypedArray: complex interleaved, packed sub-byte types one code per element (`toArray()`). */
export function gather(facts: ViewFacts, src: AnyTypedArray): AnyTypedArray {
  const info = facts.info;
  const slot = slotBitsOf(facts);
  const packed = info.kind === "minifloat" && slot < 8;
  const slotCount = info.slots;
  const out = new info.array(jsBuffer(facts.size * slotCount * info.slotBytes, "toArray()"));
  if (facts.size === 0) return out;
  const shape = facts.shape;
  const strides = facts.strides;
  const index = slots(shape.length);
  const minOffset = facts.minOffset;
  let at = -minOffset;
  for (let k = 0; k < facts.size; k++) {
    if (packed) out[k] = readBits(src as Uint8Array, at, slot, minOffset);
    // Offsets the layout walk reaches lie within the span (the facts span them).
    else if (slotCount === 2) {
      out[2 * k] = src[2 * at]!;
      out[2 * k + 1] = src[2 * at + 1]!;
    } else out[k] = src[at]!;
    at = nextOffset(index, shape, strides, at);
  }
  return out;
}

/** Writes `src` (the view's elements in C order, in the form of `toArray()`, as many as it has)
 * into the span `dst` holds: the inverse of {@link gather}. */
export function scatter(facts: ViewFacts, dst: AnyTypedArray, src: AnyTypedArray): void {
  const slot = slotBitsOf(facts);
  const packed = facts.info.kind === "minifloat" && slot < 8;
  const pairs = facts.info.slots === 2;
  const shape = facts.shape;
  const strides = facts.strides;
  const index = slots(shape.length);
  const minOffset = facts.minOffset;
  let at = -minOffset;
  for (let k = 0; k < facts.size; k++) {
    // `src` holds the view's elements (its caller checked its length).
    if (packed) writeBits(dst as Uint8Array, at, slot, minOffset, (src as Uint8Array)[k]!);
    else if (pairs) {
      dst[2 * at] = src[2 * k]!;
      dst[2 * at + 1] = src[2 * k + 1]!;
    } else dst[at] = src[k]!;
    at = nextOffset(index, shape, strides, at);
  }
}

/** The position in `array()` units of the element at `index` (a caller's indices, as many as the
 * rank, each in -extent..extent-1, negative from the end), after every check (`what`: the method,
 * for messages). */
export function elementAt(facts: ViewFacts, index: readonly number[], what: string): number {
  const shape = facts.shape;
  if (index.length !== shape.length) {
    throw new DLPackError(
      "shape",
      `${what}() needs ${shape.length} indices for ${withArticle(`${shape.length}-d`)} view, got ${index.length}`,
    );
  }
  const strides = facts.strides;
  let at = -facts.minOffset;
  for (let d = 0; d < shape.length; d++) {
    const i: unknown = index[d];
    if (typeof i !== "number") {
      throw new DLPackError("argument", `${what}(): index ${d} must be a number, got ${shown(i)}`);
    }
    if (i % 1 !== 0) {
      throw new DLPackError("shape", `index ${i} of dimension ${d} is not an integer`);
    }
    // The strides are as long as the shape. Negative indices count from the end, as numpy's do.
    const extent = shape[d]!;
    const j = i < 0 ? i + extent : i;
    if (j < 0 || j >= extent) {
      throw new DLPackError("shape", `index ${i} is out of range for dimension ${d} of extent ${extent}`);
    }
    at += j * strides[d]!;
  }
  return at;
}

let reads: MemoryReads | undefined;

/** The runtime's scalar reads of host memory (made on first use), given libdlpack's loader to
 * build on where the runtime's own reads cost more. */
function memoryReads(): MemoryReads {
  return reads ??= runtime().reads(core().dlpk_load);
}
// A float16 element's bits become what array() holds for it (the number where the runtime has
// Float16Array, else the bits themselves, as its Uint16Array holds them).
const halfBuffer = new ArrayBufferCtor(2);
const half = new (dtypeInfo("float16").array)(halfBuffer);
const halfBits = new Uint16Array(halfBuffer);

function float16Of(bits: number): number {
  halfBits[0] = bits;
  return half[0] as number;
}

/**
 * The element at `at` ({@link elementAt}'s position) of a live view of host memory whose element
 * 0 is at `address`, read in place (no ArrayBuffer is made), as `get` returns it: what the view's
 * `array()` holds there, decoded. Refused for memory the CPU cannot read. perf(import+get+dispose):
 * an ArrayBuffer made per read (and detached by dispose) cost several times the import.
 */
export function readAt(facts: ViewFacts, address: number, at: number): Scalar {
  requireHost(facts, "get()");
  const info = facts.info;
  const m = memoryReads();
  // Elements from element 0 (negative strides put some before it).
  const e = at + facts.minOffset;
  const bits = info.bits;
  const p = address + e * (bits >> 3);
  switch (info.kind) {
    case "float":
      return bits === 32 ? m.f32(p) : bits === 64 ? m.f64(p) : float16Of(m.u16(p));
    case "int": {
      const signed = info.dl.code === TypeCode.int;
      if (bits === 8) return signed ? m.i8(p) : m.u8(p);
      if (bits === 16) return signed ? m.i16(p) : m.u16(p);
      return signed ? m.i32(p) : m.u32(p);
    }
    case "bigint":
      return info.dl.code === TypeCode.int ? m.i64(p) : m.u64(p);
    case "bool":
      return m.u8(p) !== 0;
    case "bfloat16":
      return bfloat16ToNumber(m.u16(p));
    case "complex": {
      const part = bits >> 4;
      const q = p + part;
      if (bits === 64) return [m.f32(p), m.f32(q)] as Complex;
      if (bits === 128) return [m.f64(p), m.f64(q)] as Complex;
      return [float16Of(m.u16(p)), float16Of(m.u16(q))] as Complex;
    }
    case "minifloat":
      return decodeMiniFloat(info.name as MiniFloatDType, readCode(m, facts, address, e));
  }
}

/** The code of the sub-byte float `e` elements from element 0 (at `address`, on a byte boundary):
 * its byte, and the next only when the element's bits reach into it (it may lie past the span). */
function readCode(m: MemoryReads, facts: ViewFacts, address: number, e: number): number {
  const slot = slotBitsOf(facts);
  if (slot === 8) return m.u8(address + e);
  const bit = e * slot;
  const byte = floor(bit / 8);
  const shift = bit - byte * 8;
  let word = m.u8(address + byte);
  if (shift + slot > 8) word |= m.u8(address + byte + 1) << 8;
  return (word >>> shift) & ((1 << slot) - 1);
}

// set()'s element, encoded in JS memory of its own (16 bytes: a complex128) and copied natively into
// the view's memory: neither runtime writes through a pointer. Its address is cached (its storage
// never moves); an array of each element type over it is made once (two slots: a complex pair).
const staged = new ArrayBufferCtor(16);
const stagedBytes = new Uint8Array(staged);
let stagedAt = 0;
const stagedArrays = { __proto__: null } as unknown as Record<string, AnyTypedArray | undefined>;

/**
 * Checks `value` as an element of `facts`' dtype (refusing memory the CPU cannot reach) and
 * encodes it for {@link storeAt} (returns the code of a sub-byte float, which it then takes;
 * else 0). Caller code may run here (a complex pair's reads), so the caller checks its view is
 * still live before storing; a `set()` that runs inside it has stored its own element by the time
 * this one is encoded.
 */
export function stageValue(facts: ViewFacts, value: Scalar): number {
  requireHost(facts, "set()");
  const info = facts.info;
  if (info.kind === "minifloat") return encodeMiniFloat(info.name as MiniFloatDType, expectNumber(value, info.name));
  encodeElement(info, value, stagedArrays[info.tag] ??= new info.array(staged, 0, 2), 0);
  return 0;
}

/**
 * Stores the element {@link stageValue} encoded (`code`: what it returned) in place at `at`
 * ({@link elementAt}'s position) of a live view of host memory whose element 0 is at `address`,
 * with no ArrayBuffer made.
 */
export function storeAt(facts: ViewFacts, address: number, at: number, code: number): void {
  const info = facts.info;
  const e = at + facts.minOffset;
  if (info.kind === "minifloat") writeCode(facts, address, e, code);
  else store(address + e * (info.bits >> 3), info.bits >> 3);
}

/** Stores the sub-byte code of the element `e` elements from element 0 (at `address`), leaving
 * its neighbours' bits alone (as in {@link readCode}). */
function writeCode(facts: ViewFacts, address: number, e: number, code: number): void {
  const slot = slotBitsOf(facts);
  if (slot === 8) {
    stagedBytes[0] = code;
    store(address + e, 1);
    return;
  }
  const m = memoryReads();
  const bit = e * slot;
  const byte = floor(bit / 8);
  const shift = bit - byte * 8;
  const two = shift + slot > 8;
  const mask = (1 << slot) - 1;
  const word = m.u8(address + byte) | (two ? m.u8(address + byte + 1) << 8 : 0);
  const next = (word & ~(mask << shift)) | ((code & mask) << shift);
  stagedBytes[0] = next & 0xff;
  stagedBytes[1] = next >>> 8;
  store(address + byte, two ? 2 : 1);
}

/** Copies the first `bytes` staged bytes to `dst` (one element of that size, natively). */
function store(dst: number, bytes: number): void {
  const status = core().dlpk_store(dst, stagedAt ||= runtime().addressOf(stagedBytes), bytes);
  if (status !== 0) throw new DLPackError("library", `the native copy of one element refused it (status ${status})`);
}

/** Refuses (`what` needs it) a view whose memory the CPU cannot read. */
export function requireHost(facts: ViewFacts, what: string): void {
  const device = facts.device;
  if (device.type === "cpu" || isHostAccessible(device.type)) return;
  throw new DLPackError(
    "device",
    `${what} needs host-accessible memory; this view is on ${formatDevice(device)} (copy it to the host first)`,
  );
}
