/**
 * The one error type of the library.
 * @module
 */
import { freeze, isArray, isInteger, quote, typedArrayTag } from "./intrinsics.ts";

/** What went wrong, as a stable machine-readable code. */
export type ErrorCode =
  | "version"
  | "dtype"
  | "rank"
  | "shape"
  | "strides"
  | "byte_offset"
  | "device"
  | "null_data"
  | "overflow"
  | "flags"
  | "readonly"
  | "consumed"
  | "disposed"
  | "requirements"
  | "library"
  | "cuda"
  | "python"
  /** A file that cannot be read or written as asked (missing, not a regular file, refused by the
   * OS or by Deno's permissions), or whose contents are not the format it claims (`io.ts`). */
  | "file"
  /** A value of the wrong type or form where the API expects something else (a string where an
   * index belongs, a missing required argument, an object that only pretends to be a view). */
  | "argument"
  /** The JS stack ran out after an import had taken its tensor, before it could return the view:
   * the library released the tensor (an import that runs out of stack before taking it throws the
   * engine's RangeError, and the tensor is still the caller's). */
  | "stack";

let branded: (x: unknown) => boolean;

/** Every refusal the library makes: a code, a message saying what was found and expected, and for
 * requirement failures one line per failed check. */
export class DLPackError extends Error {
  #brand = true;
  static {
    branded = (x) => typeof x === "object" && x !== null && #brand in x;
  }
  /** The stable code of this error. */
  readonly code: ErrorCode;
  /** For `require()` failures: each failed check as `"<field>: required <x>, got <y>"`. */
  readonly refusals: readonly string[];

  /** Makes an error; `refusals` is only set by requirement checks. */
  constructor(code: ErrorCode, message: string, refusals?: readonly string[]) {
    super(message);
    this.name = "DLPackError";
    this.code = code;
    this.refusals = refusals === undefined ? [] : refusals;
  }
}

/** Whether `x` is an error this library made (a private-field check: no prototype, `instanceof`
 * hook or Proxy can make anything else pass, nor make one of them fail). */
export function isDLPackError(x: unknown): x is DLPackError {
  return branded(x);
}

/** Describes a value for an error message (`number NaN`, `bigint 5n`, `string "x"`, `a Float32Array`).
 * Reads nothing from objects: a getter, Proxy trap or `toString` of the caller's must not run while
 * an error is being built. */
export function shown(value: unknown): string {
  if (typeof value === "bigint") return `bigint ${value}n`;
  if (typeof value === "string") return `string ${quote(value)}`;
  if (typeof value === "symbol") return "a symbol";
  if (value === null) return "null";
  if (isArray(value)) return "an array";
  if (typeof value === "object") {
    const tag = typedArrayTag(value);
    return tag === undefined ? "an object" : `a ${tag}`;
  }
  if (typeof value === "function") return "a function";
  if (value === undefined) return "undefined";
  return `${typeof value} ${value}`;
}

/** No options: prototype-less, so absent fields never resolve through `Object.prototype`. */
const NO_OPTIONS: Record<string, never> = freeze({ __proto__: null }) as unknown as Record<string, never>;

/** Checks an options argument: undefined or null (no options), or an object (arrays and
 * functions are mistakes too). Returns it typed, so callers read fields without guarding each. */
export function optionsObject<T extends object>(value: T | undefined | null, what: string): Partial<T> {
  if (value === undefined || value === null) return NO_OPTIONS as Partial<T>;
  if (typeof value !== "object" || isArray(value)) {
    throw new DLPackError("argument", `${what} must be an options object, got ${shown(value)}`);
  }
  return value;
}

/** Checks a copy-options argument (`copyFrom`, `toHost`): undefined or null (none), or any object;
 * returns its `stream`, read once. */
export function copyStreamOption(opts: unknown): unknown {
  if (opts === undefined || opts === null) return undefined;
  if (typeof opts !== "object") {
    throw new DLPackError("argument", `copy options must be an options object, got ${shown(opts)}`);
  }
  return (opts as { stream?: unknown }).stream;
}

/** Checks an optional boolean option. */
export function optionalBoolean(value: unknown, what: string): boolean | undefined {
  if (value === undefined || typeof value === "boolean") return value;
  throw new DLPackError("argument", `${what} must be true or false, got ${shown(value)}`);
}

/** Checks a device id: a non-negative integer that fits the struct's int32. */
export function checkDeviceId(id: unknown, what = "device id"): number {
  if (!isInteger(id) || id < 0 || id > 0x7fff_ffff) {
    throw new DLPackError("device", `${what} must be an integer in 0..2^31-1, got ${shown(id)}`);
  }
  return id;
}
