/**
 * The one symbol table of libdlpack, shared by the Deno and Bun bindings. It lists exactly the
 * functions zig/src/root.zig exports; `ABI_VERSION` must match the library's `dlpk_abi_version()`.
 * @module
 */
import type { SymbolTable } from "./types.ts";

/** The native ABI this TypeScript expects; bumped together with zig/src/root.zig. */
export const ABI_VERSION = 3;

/** Bytes of the native `Description` struct every call reads or writes (zig/src/describe.zig). */
export const DESCRIPTION_BYTES = 120 + 16 * 64;

/** libdlpack's functions. */
export const symbols = {
  dlpk_abi_version: { args: [], returns: "u32" },
  dlpk_description_size: { args: [], returns: "u32" },
  dlpk_import: { args: ["usize", "u32", "buffer"], returns: "i32" },
  dlpk_describe: { args: ["usize", "u32", "buffer"], returns: "i32" },
  dlpk_owner_retain: { args: ["usize"], returns: "void" },
  dlpk_owner_release: { args: ["usize"], returns: "void" },
  dlpk_pin_new: { args: ["f64", "f64", "buffer"], returns: "i32" },
  dlpk_pins_drain: { args: ["buffer", "u32"], returns: "u32" },
  dlpk_stats: { args: ["buffer"], returns: "u32" },
  dlpk_export: { args: ["u32", "buffer"], returns: "i32" },
  dlpk_managed_delete: { args: ["usize", "u32"], returns: "void" },
  dlpk_is_own_export: { args: ["usize", "u32"], returns: "u32" },
  dlpk_alloc: { args: ["f64", "f64", "u32", "buffer"], returns: "i32" },
  dlpk_copy: { args: ["buffer", "usize", "u32"], returns: "i32" },
  // The embedded-Python bridge (GIL held by the caller).
  dlpk_py_load: { args: ["buffer"], returns: "i32" },
  dlpk_py_load_error: { args: ["buffer", "u32"], returns: "u32" },
  dlpk_py_none: { args: [], returns: "usize" },
  dlpk_py_take_error: { args: ["buffer", "u32"], returns: "i32" },
  dlpk_py_consume: { args: ["usize", "u32", "buffer"], returns: "i32" },
  // Called by Python through ctypes, listed so the table names every export of the library.
  dlpk_py_capsule: { args: ["usize", "u32"], returns: "usize" },
} as const satisfies SymbolTable;

/** The bound form of {@link symbols}. */
export type Symbols = typeof symbols;
