/**
 * The one symbol table of libdlpack, shared by the Deno and Bun bindings. It lists exactly the
 * functions zig/src/root.zig exports; `ABI_VERSION` must match the library's `dlpk_abi_version()`.
 * @module
 */
import type { SymbolTable } from "./types.ts";

/** The native ABI this TypeScript expects; bumped together with zig/src/root.zig. */
export const ABI_VERSION = 2;

/** Bytes of the native `Description` struct every call reads or writes (zig/src/describe.zig). */
export const DESCRIPTION_BYTES = 120 + 16 * 64;

/** libdlpack's functions. */
export const symbols = {
  dlpk_abi_version: { args: [], returns: "u32" },
  dlpk_description_size: { args: [], returns: "u32" },
  dlpk_import: { args: ["usize", "u32", "buffer"], returns: "i32" },
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
  // Pin realms: each JS realm (main thread, each Worker) drains only its own released pins.
  dlpk_realm_new: { args: [], returns: "usize" },
  dlpk_pin_new_in: { args: ["usize", "f64", "f64", "buffer"], returns: "i32" },
  dlpk_pins_drain_in: { args: ["usize", "buffer", "u32"], returns: "u32" },
} as const satisfies SymbolTable;

/** The bound form of {@link symbols}. */
export type Symbols = typeof symbols;
