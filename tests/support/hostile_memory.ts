/**
 * Hostile memory for the address tests (tests/native/testprod.zig): a guard region of a readable,
 * a PROT_NONE and an unmapped page, a read-only page, structs of random bytes, and fields
 * overwritten in place.
 * @module
 */
import { findLibrary, openLibrary } from "../../ffi/mod.ts";

const lib = openLibrary(
  findLibrary("DLPACK_TESTPROD_LIB", "dlpack_testprod"),
  {
    tp_guard_region: { args: [], returns: "usize" },
    tp_readonly_region: { args: [], returns: "usize" },
    tp_page_size: { args: [], returns: "u32" },
    tp_set_word: { args: ["usize", "u32", "u32", "u32"], returns: "void" },
    tp_get_word: { args: ["usize", "u32"], returns: "f64" },
    tp_random_bytes: { args: ["u32"], returns: "usize" },
    tp_free_uncounted: { args: ["usize", "u32"], returns: "void" },
  } as const,
);

/** Byte offsets of the fields the tests overwrite, per generation. */
export const OFFSETS = {
  versioned: { deleter: 16, shape: 56, strides: 64 },
  legacy: { deleter: 56, shape: 24, strides: 32 },
} as const;

/** The guard region's pages: `readable` read-write, `protNone` PROT_NONE, `unmapped` not mapped;
 * null where the platform does not make one (not Linux). */
export function guardRegion(): { readable: number; protNone: number; unmapped: number } | null {
  const base = lib.symbols.tp_guard_region();
  if (base === 0) return null;
  const page = lib.symbols.tp_page_size();
  return { readable: base, protNone: base + page, unmapped: base + 2 * page };
}

/** Two pages holding the float32 values 0, 1, 2, ...: `writable` read-write, `readOnly` (right
 * after it) PROT_READ; null where the platform does not make them (not Linux). */
export function readOnlyRegion(): { writable: number; readOnly: number } | null {
  const base = lib.symbols.tp_readonly_region();
  if (base === 0) return null;
  return { writable: base, readOnly: base + lib.symbols.tp_page_size() };
}

/** Overwrites the 8-byte word at `offset` bytes into the struct at `address`. */
export function setWord(address: number, offset: number, value: bigint): void {
  const v = BigInt.asUintN(64, value);
  lib.symbols.tp_set_word(address, offset, Number(v & 0xffff_ffffn), Number(v >> 32n));
}

/** Reads the 8-byte word at `offset` bytes into the struct at `address` (exact below 2^53). */
export function getWord(address: number, offset: number): number {
  return lib.symbols.tp_get_word(address, offset);
}

/** 256 random bytes from `seed`, 16-byte aligned, never freed. */
export function randomBytes(seed: number): number {
  return lib.symbols.tp_random_bytes(seed);
}

/** Frees a test-producer tensor without its deleter (one whose deleter the tests broke). */
export function freeUncounted(address: number, versioned: boolean): void {
  lib.symbols.tp_free_uncounted(address, versioned ? 1 : 0);
}
