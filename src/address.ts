/**
 * Native addresses as the public API accepts them (`bigint | number | Deno.PointerObject | null`).
 * @module
 */
import { runtime } from "../ffi/mod.ts";
import { DLPackError } from "./errors.ts";

/** An address argument: a bigint, a number, a Deno pointer object, or null. */
export type AddressLike = bigint | number | Deno.PointerObject | null;

const MAX_U64 = (1n << 64n) - 1n;

/** Normalises an address argument to what native calls take (0 for null). */
export function toAddress(value: unknown, what = "address"): number | bigint {
  const v = runtime().pointerValue(value);
  if (typeof v === "number" && Number.isSafeInteger(v) && v >= 0) return v;
  if (typeof v === "bigint" && v >= 0n && v <= MAX_U64) return v <= BigInt(Number.MAX_SAFE_INTEGER) ? Number(v) : v;
  const shown = typeof value === "bigint" ? `${value}n` : typeof value === "object" ? "an object" : String(value);
  throw new DLPackError(
    "null_data",
    `${what} must be a non-negative integer address (bigint, number or pointer object) or null, got ${typeof value} ${shown}`,
  );
}
