/**
 * Native addresses as the public API accepts them (`bigint | number | Deno.PointerObject | null`).
 * @module
 */
import { runtime } from "../../ffi/mod.ts";
import { DLPackError } from "../facts/errors.ts";
import { isCount } from "../facts/intrinsics.ts";
import type { PointerObject } from "../../ffi/types.ts";

export type { PointerObject };

/** An address argument: a bigint, a number, a Deno pointer object, or null. */
export type AddressLike = bigint | number | PointerObject | null;

const MAX_U64 = (1n << 64n) - 1n;
const MAX_EXACT = 2n ** 53n;
/** Captured at load: a caller may replace the global afterwards. */
const NumberCtor = Number;

/** Normalises an address argument to what native calls take: a number (0 for null). Addresses at
 * or above 2^53 (no 64-bit OS hands those to user space) are refused like any non-address. Below
 * that, whether anything is mapped there is for the native side to say: it checks the process's
 * mappings (x86-64 user space ends at 2^47, AArch64's at 2^48 or 2^52) and refuses with a message
 * that says the memory is not readable. */
export function toAddress(value: unknown, what = "address"): number {
  const v = runtime().pointerValue(value);
  if (isCount(v)) return v;
  if (typeof v === "bigint" && v >= 0n && v < MAX_EXACT) return NumberCtor(v);
  if (typeof v === "bigint" && v >= MAX_EXACT && v <= MAX_U64) {
    // No 64-bit OS hands out user addresses this high: it cannot point at anything.
    throw new DLPackError(
      "null_data",
      `${what} 0x${v.toString(16)} is at or above 2^53, beyond any user-space address this library handles`,
    );
  }
  const shown = typeof value === "bigint"
    ? `${value}n`
    : typeof value === "object"
    ? "an object"
    : typeof value === "symbol"
    ? "a symbol"
    : `${value as string}`;
  throw new DLPackError(
    "null_data",
    `${what} must be a non-negative integer address (bigint, number or pointer object) or null, got ${typeof value} ${shown}`,
  );
}
