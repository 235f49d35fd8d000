/**
 * A reader of JSON text held as UTF-8 bytes, for headers of files that may be hostile: it reads
 * the values a caller asks for where it asks for them (an object's keys, a string, a whole
 * number), skips the others, and refuses everything else with a `DLPackError` ("file") that says
 * what was found at which byte. No `eval`, no `JSON.parse` (it keeps the last of duplicate keys
 * and nests as deep as the text does), no built-in a caller can replace after load: strings are
 * decoded here, invalid UTF-8 and lone surrogates refused.
 * @module
 */
import { DLPackError } from "../facts/errors.ts";
import { objectSlots, quote } from "../facts/intrinsics.ts";

const ReflectApply = Reflect.apply;
const fromCharCode = String.fromCharCode;

/** What a value is called in errors: text, or a function that makes it (only when an error is made:
 * most names are never shown). */
export type Label = string | (() => string);

function label(what: Label): string {
  return typeof what === "string" ? what : what();
}

/** How deep a value that is skipped may nest. */
const SKIP_DEPTH_MAX = 64;

/** Code units decoded per `String.fromCharCode` call (its arguments go on the stack). */
const CHUNK = 4096;
const units = new Uint16Array(CHUNK);

const QUOTE = 0x22;
const BACKSLASH = 0x5c;

/** Bytes as JSON's grammar reads them, from `at` to `end`. `where` starts every error message. */
export class JsonReader {
  readonly bytes: Uint8Array;
  at: number;
  readonly end: number;
  readonly where: string;

  constructor(bytes: Uint8Array, at: number, end: number, where: string) {
    this.bytes = bytes;
    this.at = at;
    this.end = end;
    this.where = where;
  }

  /** The error for what is at the cursor (or at `at`). */
  fail(what: string, at = this.at): DLPackError {
    return new DLPackError("file", `${this.where}: ${what} at byte ${at}`);
  }

  /** What the byte at the cursor is, in words. */
  found(): string {
    if (this.at >= this.end) return "the end of the header";
    const b = this.bytes[this.at]!;
    return b >= 0x20 && b < 0x7f ? `'${fromCharCode(b)}'` : `byte 0x${b.toString(16).padStart(2, "0")}`;
  }

  /** Skips JSON whitespace; returns the next byte (-1 at the end). */
  peek(): number {
    const bytes = this.bytes;
    let at = this.at;
    while (at < this.end) {
      const b = bytes[at]!;
      if (b !== 0x20 && b !== 0x0a && b !== 0x0d && b !== 0x09) break;
      at++;
    }
    this.at = at;
    return at < this.end ? bytes[at]! : -1;
  }

  /** Consumes `byte` (after whitespace) or fails saying `what` was expected. */
  expect(byte: number, what: Label): void {
    if (this.peek() !== byte) throw this.fail(`expected ${label(what)}, found ${this.found()}`);
    this.at++;
  }

  /** Consumes `byte` if it is next (after whitespace). */
  take(byte: number): boolean {
    if (this.peek() !== byte) return false;
    this.at++;
    return true;
  }

  /** Calls `member(key)` for each key of the object at the cursor, with the cursor on its value
   * (which `member` must consume); a key seen twice is refused. */
  object(what: Label, member: (key: string, at: number) => void): void {
    if (this.peek() !== 0x7b) this.expect(0x7b, `${label(what)} (a JSON object)`);
    this.at++;
    if (this.take(0x7d)) return;
    // The keys seen: the first FEW in an array searched linearly (a header's entries have three
    // keys, and a prototype-less object, which V8 makes a dictionary, costs more to make than to
    // search); beyond them, a prototype-less object as the set (any key works, nothing of a
    // caller's is read).
    const few = ["", "", "", "", "", "", "", ""];
    let count = 0;
    let seen: Record<string, true | undefined> | undefined;
    for (;;) {
      const at = this.peek() === QUOTE ? this.at : -1;
      if (at < 0) throw this.fail(`expected a key (a string) in ${label(what)}, found ${this.found()}`);
      const key = this.string();
      let twice = false;
      for (let i = 0; i < count && i < FEW; i++) twice ||= few[i] === key;
      if (seen !== undefined) twice ||= seen[key] === true;
      if (twice) throw this.fail(`key ${quoted(key)} appears twice in ${label(what)}`, at);
      if (count < FEW) few[count] = key;
      else (seen ??= { __proto__: null } as unknown as Record<string, true | undefined>)[key] = true;
      count++;
      this.expect(0x3a, "':'");
      member(key, at);
      if (this.take(0x7d)) return;
      if (!this.take(0x2c)) this.expect(0x2c, `',' or '}' in ${label(what)}`);
    }
  }

  /** Calls `element(i)` for each element of the array at the cursor, at most `max` of them. */
  array(what: Label, max: number, element: (i: number) => void): number {
    if (this.peek() !== 0x5b) this.expect(0x5b, `${label(what)} (a JSON array)`);
    this.at++;
    if (this.take(0x5d)) return 0;
    let n = 0;
    for (;;) {
      if (n === max) throw this.fail(`${label(what)} has more than ${max} elements`);
      element(n++);
      if (this.take(0x5d)) return n;
      if (!this.take(0x2c)) this.expect(0x2c, `',' or ']' in ${label(what)}`);
    }
  }

  /** A whole number from 0 to 2^53 - 1 in plain notation (no sign, fraction or exponent);
   * `what` (with `index`, an element of a list) names it in errors. */
  count(what: Label, index = -1): number {
    const bytes = this.bytes;
    this.peek();
    const start = this.at;
    let at = start;
    let value = 0;
    while (at < this.end && bytes[at]! >= 0x30 && bytes[at]! <= 0x39) {
      value = value * 10 + (bytes[at]! - 0x30);
      at++;
    }
    const digits = at - start;
    const next = at < this.end ? bytes[at]! : -1;
    if (digits === 0 || next === 0x2e || next === 0x65 || next === 0x45) {
      this.at = at;
      throw this.fail(`${named(what, index)} must be a whole number from 0 to 2^53 - 1, found ${this.found()}`, start);
    }
    if ((digits > 1 && bytes[start] === 0x30) || digits > 16 || value > MAX_SAFE_INTEGER) {
      throw this.fail(`${named(what, index)} must be a whole number from 0 to 2^53 - 1 (no leading zeros)`, start);
    }
    this.at = at;
    return value;
  }

  /** The string at the cursor, decoded (escapes, UTF-8) and validated. */
  string(): string {
    this.expect(QUOTE, "a string");
    // Most strings (names, dtypes, keys) are plain ASCII: built from their bytes directly.
    const bytes = this.bytes;
    const start = this.at;
    let end = start;
    let hash = 0;
    while (end < this.end) {
      const b = bytes[end]!;
      if (b < 0x20 || b >= 0x80 || b === QUOTE || b === BACKSLASH) break;
      hash = (hash * 31 + b) & (INTERNED - 1);
      end++;
    }
    if (end >= this.end || bytes[end] !== QUOTE) return this.slowString();
    this.at = end + 1;
    // Short strings recur (every entry's "dtype", "shape", "data_offsets", its dtype's name): one
    // seen before is found by its bytes instead of made again.
    const n = end - start;
    if (n > INTERNED_BYTES) return asciiText(bytes, start, end);
    const slot = hash * INTERNED_BYTES;
    if (internedLength[hash] === n) {
      let same = true;
      for (let i = 0; i < n && same; i++) same = internedBytes[slot + i] === bytes[start + i];
      if (same) return internedText[hash]!;
    }
    const text = asciiText(bytes, start, end);
    for (let i = 0; i < n; i++) internedBytes[slot + i] = bytes[start + i]!;
    internedLength[hash] = n;
    internedText[hash] = text;
    return text;
  }

  /** {@link JsonReader.string} byte by byte, after its opening quote. */
  private slowString(): string {
    let out = "";
    let n = 0;
    const bytes = this.bytes;
    for (;;) {
      if (this.at >= this.end) throw this.fail("a string is not closed");
      const b = bytes[this.at]!;
      if (b === QUOTE) break;
      if (n > CHUNK - 2) {
        out += ReflectApply(fromCharCode, null, units.subarray(0, n));
        n = 0;
      }
      if (b < 0x20) throw this.fail(`control character 0x${b.toString(16)} in a string`);
      if (b === BACKSLASH) n = this.escape(n);
      else if (b < 0x80) {
        units[n++] = b;
        this.at++;
      } else n = this.utf8(n);
    }
    this.at++;
    return n === 0 ? out : out + ReflectApply(fromCharCode, null, units.subarray(0, n));
  }

  /** One escape sequence into `units` from index `n`; returns the new count. */
  private escape(n: number): number {
    const at = this.at;
    const c = this.at + 1 < this.end ? this.bytes[this.at + 1]! : -1;
    this.at += 2;
    switch (c) {
      case QUOTE:
      case BACKSLASH:
      case 0x2f:
        units[n] = c;
        return n + 1;
      case 0x62:
        units[n] = 0x08;
        return n + 1;
      case 0x66:
        units[n] = 0x0c;
        return n + 1;
      case 0x6e:
        units[n] = 0x0a;
        return n + 1;
      case 0x72:
        units[n] = 0x0d;
        return n + 1;
      case 0x74:
        units[n] = 0x09;
        return n + 1;
      case 0x75:
        return this.unicodeEscape(n, at);
    }
    throw this.fail("an invalid escape sequence in a string", at);
  }

  /** `\uXXXX`, with a surrogate pair as two of them (a lone surrogate is refused). */
  private unicodeEscape(n: number, at: number): number {
    const unit = this.hex4(at);
    if (unit >= 0xdc00 && unit <= 0xdfff) throw this.fail("a lone surrogate escape in a string", at);
    if (unit < 0xd800 || unit > 0xdbff) {
      units[n] = unit;
      return n + 1;
    }
    if (this.bytes[this.at] !== BACKSLASH || this.bytes[this.at + 1] !== 0x75) {
      throw this.fail("a lone surrogate escape in a string", at);
    }
    this.at += 2;
    const low = this.hex4(at);
    if (low < 0xdc00 || low > 0xdfff) throw this.fail("a lone surrogate escape in a string", at);
    units[n] = unit;
    units[n + 1] = low;
    return n + 2;
  }

  private hex4(at: number): number {
    if (this.at + 4 > this.end) throw this.fail("an invalid \\u escape in a string", at);
    let value = 0;
    for (let i = 0; i < 4; i++) {
      const c = this.bytes[this.at++]!;
      const digit = c >= 0x30 && c <= 0x39
        ? c - 0x30
        : (c | 0x20) >= 0x61 && (c | 0x20) <= 0x66
        ? (c | 0x20) - 0x57
        : -1;
      if (digit < 0) throw this.fail("an invalid \\u escape in a string", at);
      value = value * 16 + digit;
    }
    return value;
  }

  /** One UTF-8 sequence (2 to 4 bytes, shortest form, no surrogates, at most U+10FFFF). */
  private utf8(n: number): number {
    const bytes = this.bytes;
    const at = this.at;
    const b = bytes[at]!;
    const length = b >= 0xf0 ? 4 : b >= 0xe0 ? 3 : b >= 0xc0 ? 2 : 0;
    if (length === 0 || b > 0xf4 || at + length > this.end) throw this.fail("invalid UTF-8", at);
    let cp = b & (0x7f >> length);
    for (let i = 1; i < length; i++) {
      const c = bytes[at + i]!;
      if ((c & 0xc0) !== 0x80) throw this.fail("invalid UTF-8", at);
      cp = (cp << 6) | (c & 0x3f);
    }
    const least = length === 2 ? 0x80 : length === 3 ? 0x800 : 0x10000;
    if (cp < least || cp > 0x10ffff || (cp >= 0xd800 && cp <= 0xdfff)) throw this.fail("invalid UTF-8", at);
    this.at = at + length;
    if (cp < 0x10000) {
      units[n] = cp;
      return n + 1;
    }
    units[n] = 0xd800 + ((cp - 0x10000) >> 10);
    units[n + 1] = 0xdc00 + ((cp - 0x10000) & 0x3ff);
    return n + 2;
  }

  /** Skips any JSON value (nested at most {@link SKIP_DEPTH_MAX} deep). */
  skip(depth = 0): void {
    if (depth >= SKIP_DEPTH_MAX) throw this.fail(`a value nested more than ${SKIP_DEPTH_MAX} deep`);
    const b = this.peek();
    if (b === QUOTE) this.string();
    else if (b === 0x7b) this.object("an object", () => this.skip(depth + 1));
    else if (b === 0x5b) this.array("an array", Infinity, () => this.skip(depth + 1));
    else if (b === 0x74) this.word(TRUE);
    else if (b === 0x66) this.word(FALSE);
    else if (b === 0x6e) this.word(NULL);
    else this.number();
  }

  private word(text: readonly number[]): void {
    for (let i = 0; i < text.length; i++) {
      if (this.bytes[this.at + i] !== text[i]) throw this.fail(`expected a JSON value, found ${this.found()}`);
    }
    this.at += text.length;
  }

  /** Any JSON number (its value is not needed). */
  private number(): void {
    const start = this.at;
    if (this.bytes[this.at] === 0x2d) this.at++;
    const whole = this.digits();
    if (whole === 0 || (whole > 1 && this.bytes[this.at - whole] === 0x30)) {
      throw this.fail(`expected a JSON value, found ${this.found()}`);
    }
    if (this.bytes[this.at] === 0x2e) {
      this.at++;
      if (this.digits() === 0) throw this.fail("a number without digits after '.'", start);
    }
    if (this.bytes[this.at] === 0x65 || this.bytes[this.at] === 0x45) {
      this.at++;
      if (this.bytes[this.at] === 0x2b || this.bytes[this.at] === 0x2d) this.at++;
      if (this.digits() === 0) throw this.fail("a number without exponent digits", start);
    }
  }

  /** Skips decimal digits; returns how many. */
  private digits(): number {
    const from = this.at;
    while (this.at < this.end && this.bytes[this.at]! >= 0x30 && this.bytes[this.at]! <= 0x39) this.at++;
    return this.at - from;
  }
}

const MAX_SAFE_INTEGER = 2 ** 53 - 1;

/** How many keys an object's first check holds in an array (see {@link JsonReader.object}). */
const FEW = 8;

/** Slots of the cache of short ASCII strings (a power of 2), and the longest string it holds. */
const INTERNED = 256;
const INTERNED_BYTES = 16;
/** Each slot's string, its bytes (INTERNED_BYTES a slot) and their count: every slot starts as "". */
const internedText = objectSlots<string>(INTERNED) as string[];
for (let i = 0; i < INTERNED; i++) internedText[i] = "";
const internedBytes = new Uint8Array(INTERNED * INTERNED_BYTES);
const internedLength = new Uint8Array(INTERNED);

/** The string of the ASCII bytes `[start, end)`. */
function asciiText(bytes: Uint8Array, start: number, end: number): string {
  let out = "";
  for (let i = start; i < end; i++) out += fromCharCode(bytes[i]!);
  return out;
}

function named(what: Label, index: number): string {
  return index < 0 ? label(what) : `${label(what)}[${index}]`;
}

const TRUE = [0x74, 0x72, 0x75, 0x65] as const;
const FALSE = [0x66, 0x61, 0x6c, 0x73, 0x65] as const;
const NULL = [0x6e, 0x75, 0x6c, 0x6c] as const;

/** A string in double quotes for an error message, cut to 80 characters. */
export function quoted(text: string): string {
  return quote(text.length > 80 ? `${text.slice(0, 80)}...` : text);
}
