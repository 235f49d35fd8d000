/**
 * The one error type of the library.
 * @module
 */

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
  /** A value of the wrong type or form where the API expects something else (a string where an
   * index belongs, a missing required argument, an object that only pretends to be a view). */
  | "argument";

/** Every refusal the library makes: a code, a message saying what was found and expected, and for
 * requirement failures one line per failed check. */
export class DLPackError extends Error {
  /** The stable code of this error. */
  readonly code: ErrorCode;
  /** For `require()` failures: each failed check as `"<field>: required <x>, got <y>"`. */
  readonly refusals: readonly string[];

  /** Makes an error; `refusals` is only set by requirement checks. */
  constructor(code: ErrorCode, message: string, refusals: readonly string[] = []) {
    super(message);
    this.name = "DLPackError";
    this.code = code;
    this.refusals = refusals;
  }
}

/** Describes a value for an error message (`number NaN`, `bigint 5n`, `string "x"`). */
export function shown(value: unknown): string {
  if (typeof value === "bigint") return `bigint ${value}n`;
  if (typeof value === "string") return `string ${JSON.stringify(value)}`;
  if (value === null) return "null";
  if (Array.isArray(value)) return `an array of length ${value.length}`;
  if (typeof value === "object") return "an object";
  if (typeof value === "function") return "a function";
  return `${typeof value} ${String(value)}`;
}

/** Checks an options argument: undefined or null (no options), or an object (arrays and
 * functions are mistakes too). Returns it typed, so callers read fields without guarding each. */
export function optionsObject<T extends object>(value: T | undefined | null, what: string): Partial<T> {
  if (value === undefined || value === null) return {};
  if (typeof value !== "object" || Array.isArray(value)) {
    throw new DLPackError("requirements", `${what} must be an options object, got ${shown(value)}`);
  }
  return value;
}

/** Checks an optional boolean option. */
export function optionalBoolean(value: unknown, what: string): boolean | undefined {
  if (value === undefined || typeof value === "boolean") return value;
  throw new DLPackError("requirements", `${what} must be true or false, got ${shown(value)}`);
}

/** Checks a device id: a non-negative integer that fits the struct's int32. */
export function checkDeviceId(id: unknown, what = "device id"): number {
  if (typeof id !== "number" || !Number.isInteger(id) || id < 0 || id > 0x7fff_ffff) {
    throw new DLPackError("device", `${what} must be an integer in 0..2^31-1, got ${shown(id)}`);
  }
  return id;
}
