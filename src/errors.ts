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
  | "python";

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
