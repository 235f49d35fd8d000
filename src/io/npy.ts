/**
 * numpy's .npy format (versions 1.0, 2.0 and 3.0), as pure functions over bytes (no I/O): reading
 * a header and checking it against the file's size, and writing one as `np.save` does.
 *
 * A file is the magic `\x93NUMPY`, the version (major, minor), the header's length (u16 for 1.0,
 * u32 for 2.0 and 3.0, little-endian), the header, then the data. The header is the text of a
 * Python dict literal, `{'descr': '<f4', 'fortran_order': False, 'shape': (2, 3), }`, padded with
 * spaces and a newline so that the data starts at a multiple of 64. It is read here as exactly
 * that grammar, never evaluated: a dict of the three keys, each once, a string, a bool and a
 * tuple of whole numbers.
 * @module
 */
import { DLPackError } from "../facts/errors.ts";
import type { DType } from "../facts/dtypes.ts";
import { dtypeInfo, NUMPY_TYPE_CODES } from "../facts/dtypes.ts";
import { ceil, freeze, slots } from "../facts/intrinsics.ts";
import { MAX_EXACT } from "../facts/layout.ts";
import { MAX_RANK } from "../facts/abi.ts";

const ReflectApply = Reflect.apply;
const fromCharCode = String.fromCharCode;
const charCodeAt = String.prototype.charCodeAt;

const MAGIC = [0x93, 0x4e, 0x55, 0x4d, 0x50, 0x59] as const;
/** Bytes before the header of a version 1.0 file (magic, version, u16 length). */
const PREAMBLE_BYTES = 10;
/** The header lengths read here at most (numpy's own reader stops at 10,000 unless told more). */
const NPY_HEADER_MAX = 65_536;
/** Where `np.save` starts the data: a multiple of this. */
const ALIGN = 64;
/** `np.save` leaves room for the growing axis's extent to reach this many digits. */
const GROWTH_AXIS_MAX_DIGITS = 21;

// descr -> dtype, for the byte-order characters numpy writes (and '=' and none: native, which is
// little-endian on every target of this library).
const BY_CODE = NUMPY_TYPE_CODES;

const BY_DTYPE: Record<string, string | undefined> = { __proto__: null } as unknown as Record<string, string>;
for (const code of Object.keys(BY_CODE)) {
  const dtype = BY_CODE[code]!;
  BY_DTYPE[dtype] = `${code.length === 2 && code[1] === "1" ? "|" : "<"}${code}`;
}

/** The library dtypes a .npy file can hold (numpy's own types). */
export const NPY_DTYPES: readonly DType[] = freeze(Object.keys(BY_DTYPE) as DType[]);
const NPY_DTYPE_NAMES = NPY_DTYPES.join(", ");

/** The descr `np.save` writes for a dtype, or undefined when numpy has no such type. */
export function npyDescr(dtype: DType): string | undefined {
  return BY_DTYPE[dtype];
}

/** A header, checked against the file it came from. */
export interface NpyHeader {
  readonly version: readonly [number, number];
  readonly dtype: DType;
  /** A fresh array of own elements. */
  readonly shape: readonly number[];
  readonly size: number;
  /** Whether the data is in Fortran (column-major) order. */
  readonly fortran: boolean;
  /** Where the data starts in the file, and its bytes. */
  readonly dataStart: number;
  readonly dataBytes: number;
}

/** Where the header ends (the data starts), from the file's first 12 bytes (`bytes` holds at
 * least `min(12, fileBytes)` of them), checked against the file's size. */
export function npyDataStart(bytes: Uint8Array, fileBytes: number, where: string): number {
  for (let i = 0; i < MAGIC.length; i++) {
    if (i >= fileBytes || bytes[i] !== MAGIC[i]) {
      throw new DLPackError("file", `${where}: not a .npy file (its first bytes are not the magic \\x93NUMPY)`);
    }
  }
  if (fileBytes < PREAMBLE_BYTES) {
    throw new DLPackError("file", `${where}: ${fileBytes} bytes is too short for a .npy file`);
  }
  const major = bytes[6]!;
  const minor = bytes[7]!;
  if (major < 1 || major > 3 || minor !== 0) {
    throw new DLPackError("file", `${where}: .npy version ${major}.${minor} is not one of 1.0, 2.0 and 3.0`);
  }
  const wide = major > 1;
  if (wide && fileBytes < PREAMBLE_BYTES + 2) throw new DLPackError("file", `${where}: the file ends in its preamble`);
  const length = wide
    ? bytes[8]! + bytes[9]! * 0x100 + bytes[10]! * 0x1_0000 + bytes[11]! * 0x100_0000
    : bytes[8]! + bytes[9]! * 0x100;
  if (length > NPY_HEADER_MAX) {
    throw new DLPackError(
      "file",
      `${where}: the header length ${length} is absurd (at most ${NPY_HEADER_MAX} read here)`,
    );
  }
  const start = PREAMBLE_BYTES + (wide ? 2 : 0) + length;
  if (start > fileBytes) {
    throw new DLPackError("file", `${where}: the header length ${length} is beyond the file (${fileBytes} bytes)`);
  }
  return start;
}

/** Reads and checks the header in `bytes` (the file's first {@link npyDataStart} bytes at least).
 * Throws `DLPackError` ("file") naming `where` and what is wrong. */
export function parseNpyHeader(bytes: Uint8Array, fileBytes: number, where: string): NpyHeader {
  const dataStart = npyDataStart(bytes, fileBytes, where);
  const major = bytes[6]!;
  const literal = new Literal(bytes, PREAMBLE_BYTES + (major > 1 ? 2 : 0), dataStart, where, major < 3);
  const fields = literal.header();
  const size = elementCount(fields.shape, where);
  const bits = dtypeInfo(fields.dtype).bits;
  const dataBytes = size * (bits / 8);
  if (dataBytes > MAX_EXACT || dataStart + dataBytes > fileBytes) {
    throw new DLPackError(
      "file",
      `${where}: the data is shorter than the shape says: ${shapeText(fields.shape)} of ${fields.dtype} needs ` +
        `${dataBytes} bytes, the file holds ${fileBytes - dataStart} after its header`,
    );
  }
  return freeze({ version: freeze([major, 0] as const), ...fields, size, dataStart, dataBytes });
}

function elementCount(shape: readonly number[], where: string): number {
  let size = 1;
  for (let d = 0; d < shape.length; d++) {
    const extent = shape[d]!;
    if (extent !== 0 && size > MAX_EXACT / extent) {
      throw new DLPackError("file", `${where}: the shape ${shapeText(shape)} has more than 2^53 elements`);
    }
    size *= extent;
  }
  return size;
}

/** A shape as Python writes the tuple: `()`, `(3,)`, `(2, 3)`. */
function shapeText(shape: readonly number[]): string {
  let text = "(";
  for (let d = 0; d < shape.length; d++) text += `${d === 0 ? "" : ", "}${shape[d]}`;
  return text + (shape.length === 1 ? ",)" : ")");
}

interface Fields {
  readonly dtype: DType;
  readonly shape: readonly number[];
  readonly fortran: boolean;
}

/** The header's Python literal, read as exactly the grammar `np.save` writes. */
class Literal {
  readonly bytes: Uint8Array;
  at: number;
  readonly end: number;
  readonly where: string;
  /** Versions 1.0 and 2.0 (written by Python 2 as well): integers may end in `L`. */
  readonly longs: boolean;

  constructor(bytes: Uint8Array, at: number, end: number, where: string, longs: boolean) {
    this.bytes = bytes;
    this.at = at;
    this.end = end;
    this.where = where;
    this.longs = longs;
  }

  fail(what: string): DLPackError {
    return new DLPackError(
      "file",
      `${this.where}: the header is not the Python literal np.save writes: ${what} at byte ${this.at}`,
    );
  }

  /** The next byte after whitespace (-1 at the end). */
  peek(): number {
    while (this.at < this.end) {
      const b = this.bytes[this.at]!;
      // Python's whitespace between tokens (inside brackets a newline is one too).
      if (b !== 0x20 && b !== 0x09 && b !== 0x0a && b !== 0x0d && b !== 0x0c) break;
      this.at++;
    }
    return this.at < this.end ? this.bytes[this.at]! : -1;
  }

  expect(byte: number, what: string): void {
    if (this.peek() !== byte) throw this.fail(`expected ${what}`);
    this.at++;
  }

  take(byte: number): boolean {
    if (this.peek() !== byte) return false;
    this.at++;
    return true;
  }

  /** `{'descr': ..., 'fortran_order': ..., 'shape': ..., }`, then only whitespace. */
  header(): Fields {
    let descr: string | undefined;
    let fortran: boolean | undefined;
    let shape: number[] | undefined;
    this.expect(0x7b, "'{' (a dict)");
    while (!this.take(0x7d)) {
      const key = this.text();
      this.expect(0x3a, "':'");
      if (key === "descr" && descr === undefined) descr = this.descr();
      else if (key === "fortran_order" && fortran === undefined) fortran = this.bool();
      else if (key === "shape" && shape === undefined) shape = this.tuple();
      else throw this.fail(`the key '${key}' (the keys are 'descr', 'fortran_order' and 'shape', each once)`);
      if (!this.take(0x2c)) {
        this.expect(0x7d, "',' or '}'");
        break;
      }
    }
    if (this.peek() !== -1) throw this.fail("text after the dict");
    if (descr === undefined || fortran === undefined || shape === undefined) {
      const missing = descr === undefined ? "descr" : fortran === undefined ? "fortran_order" : "shape";
      throw this.fail(`no '${missing}' key`);
    }
    return { dtype: this.dtypeOf(descr), shape, fortran };
  }

  /** A string in single or double quotes with no escapes, of printable ASCII. */
  text(): string {
    const quote = this.peek();
    if (quote !== 0x27 && quote !== 0x22) {
      if (quote === 0x5b) throw this.fail("a list (a structured dtype, which this library has no view of)");
      throw this.fail("expected a string");
    }
    const start = ++this.at;
    while (this.at < this.end && this.bytes[this.at] !== quote) {
      const b = this.bytes[this.at]!;
      if (b < 0x20 || b > 0x7e || b === 0x5c) throw this.fail("a string that is not plain ASCII text");
      this.at++;
    }
    if (this.at >= this.end) throw this.fail("a string that is not closed");
    let out = "";
    for (let i = start; i < this.at; i++) out += fromCharCode(this.bytes[i]!);
    this.at++;
    return out;
  }

  descr(): string {
    const text = this.text();
    if (text.length > 8) throw this.fail(`the descr '${text}' (a numpy type string such as '<f4')`);
    return text;
  }

  bool(): boolean {
    const b = this.peek();
    const word = b === 0x54 ? TRUE : b === 0x46 ? FALSE : undefined;
    if (word === undefined) throw this.fail("expected True or False");
    for (let i = 0; i < word.length; i++) {
      if (this.bytes[this.at + i] !== word[i]) throw this.fail("expected True or False");
    }
    this.at += word.length;
    return word === TRUE;
  }

  /** `()`, `(n,)`, `(n, m)`, `(n, m,)`: whole numbers, at most {@link MAX_RANK}. */
  tuple(): number[] {
    this.expect(0x28, "'(' (the shape tuple)");
    const values = extents;
    let n = 0;
    while (!this.take(0x29)) {
      if (n === MAX_RANK) throw this.fail(`a shape of more than ${MAX_RANK} dimensions`);
      values[n++] = this.integer();
      if (!this.take(0x2c)) {
        // Python's (3) is the number 3, not a tuple.
        if (n === 1) throw this.fail("expected ',' (a 1-tuple is written (n,))");
        this.expect(0x29, "',' or ')'");
        break;
      }
    }
    const shape = slots(n);
    for (let d = 0; d < n; d++) shape[d] = values[d]!;
    return shape;
  }

  /** A non-negative decimal integer below 2^53 (`L` after it in versions 1.0 and 2.0). */
  integer(): number {
    this.peek();
    const start = this.at;
    let value = 0;
    while (this.at < this.end && this.bytes[this.at]! >= 0x30 && this.bytes[this.at]! <= 0x39) {
      value = value * 10 + (this.bytes[this.at]! - 0x30);
      this.at++;
    }
    const digits = this.at - start;
    if (digits === 0) throw this.fail("expected a whole number (a non-negative extent)");
    if ((digits > 1 && this.bytes[start] === 0x30) || digits > 16 || value > 2 ** 53 - 1) {
      throw this.fail("an extent that is no whole number below 2^53");
    }
    if (this.longs && this.bytes[this.at] === 0x4c) this.at++;
    return value;
  }

  dtypeOf(descr: string): DType {
    const order = descr[0];
    const native = order === "<" || order === "|" || order === "=";
    let code = "";
    for (let i = native || order === ">" ? 1 : 0; i < descr.length; i++) code += descr[i];
    const dtype = BY_CODE[code];
    if (dtype !== undefined && order === ">" && code[1] !== "1") {
      throw new DLPackError(
        "file",
        `${this.where}: the descr '${descr}' is big-endian; views here are little-endian (byteswap it in numpy first)`,
      );
    }
    if (dtype === undefined) {
      throw new DLPackError(
        "file",
        `${this.where}: the descr '${descr}' is no dtype this library has (it reads numpy's ${NPY_DTYPE_NAMES})`,
      );
    }
    return dtype;
  }
}

/** Where {@link Literal.tuple} collects the extents. */
const extents = new Float64Array(MAX_RANK);

const TRUE = [0x54, 0x72, 0x75, 0x65] as const;
const FALSE = [0x46, 0x61, 0x6c, 0x73, 0x65] as const;

/**
 * The bytes `np.save` writes before the data of an array of `dtype` and `shape` (C order, or
 * Fortran order): magic, version 1.0 (2.0 when the header needs more than 65,535 bytes), length,
 * the dict, spaces and a newline up to a multiple of 64 bytes. Throws "dtype" for a dtype numpy
 * lacks.
 */
export function npyPrefix(dtype: DType, shape: readonly number[], fortran: boolean): Uint8Array<ArrayBuffer> {
  const descr = BY_DTYPE[dtype];
  if (descr === undefined) {
    throw new DLPackError("dtype", `.npy has no ${dtype} (numpy's own types: ${NPY_DTYPE_NAMES})`);
  }
  let dict = `{'descr': '${descr}', 'fortran_order': ${fortran ? "True" : "False"}, 'shape': ${shapeText(shape)}, }`;
  if (shape.length > 0) {
    const growing = `${shape[fortran ? shape.length - 1 : 0]}`;
    for (let i = growing.length; i < GROWTH_AXIS_MAX_DIGITS; i++) dict += " ";
  }
  const wide = dict.length + 1 + PREAMBLE_BYTES > 65_535;
  const before = PREAMBLE_BYTES + (wide ? 2 : 0);
  const total = ceil((before + dict.length + 1) / ALIGN) * ALIGN;
  const out = new Uint8Array(new ArrayBuffer(total));
  for (let i = 0; i < MAGIC.length; i++) out[i] = MAGIC[i]!;
  out[6] = wide ? 2 : 1;
  out[7] = 0;
  const length = total - before;
  out[8] = length & 0xff;
  out[9] = (length >>> 8) & 0xff;
  if (wide) {
    out[10] = (length >>> 16) & 0xff;
    out[11] = (length >>> 24) & 0xff;
  }
  for (let i = 0; i < dict.length; i++) out[before + i] = ReflectApply(charCodeAt, dict, [i]) as number;
  for (let i = before + dict.length; i < total - 1; i++) out[i] = 0x20;
  out[total - 1] = 0x0a;
  return out;
}
