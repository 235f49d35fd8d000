/**
 * The runtime boundary: picks the Deno or Bun binding, finds libdlpack, checks its ABI version.
 * Everything outside ffi/ talks to native code through `core()` and `runtime()` only.
 * @module
 */
import { DLPackError } from "../src/errors.ts";
import { bunRuntime } from "./bun.ts";
import { denoRuntime } from "./deno.ts";
import { ABI_VERSION, DESCRIPTION_BYTES, type Symbols, symbols } from "./symbols.ts";
import type { Bound, OpenLibrary, Runtime, SymbolTable } from "./types.ts";

export type { Bound, NativeType, OpenLibrary, Runtime, SymbolSpec, SymbolTable } from "./types.ts";
export { ABI_VERSION, DESCRIPTION_BYTES } from "./symbols.ts";

let current: Runtime | undefined;

/** The binding of the runtime this code runs on. */
export function runtime(): Runtime {
  if (current !== undefined) return current;
  const g = globalThis as { Deno?: unknown; Bun?: unknown };
  if (g.Deno !== undefined) current = denoRuntime();
  else if (g.Bun !== undefined) current = bunRuntime();
  else throw new DLPackError("library", "unsupported runtime: this module needs Deno (2.x) or Bun (1.x)");
  return current;
}

/** The shared library's file name on an OS. */
export function libraryFileName(os: string, stem = "dlpack"): string {
  if (os === "windows") return `${stem}.dll`;
  if (os === "darwin") return `lib${stem}.dylib`;
  return `lib${stem}.so`;
}

/** Where the local build puts a library, relative to this module (Windows puts DLLs in bin/). */
export function localBuildPath(os: string, stem = "dlpack"): string | undefined {
  const dir = os === "windows" ? "bin" : "lib";
  const url = new URL(`../zig/zig-out/${dir}/${libraryFileName(os, stem)}`, import.meta.url);
  if (url.protocol !== "file:") return undefined;
  return decodeURIComponent(url.pathname.replace(/^\/([A-Za-z]:)/, "$1"));
}

/** The command that builds the native libraries from a checkout. */
export const BUILD_COMMAND = "tools/build.sh (or: cd zig && zig build --release=safe)";

/** Finds a library: the env override first, then the local build next to this module. */
export function findLibrary(envVar: string, stem = "dlpack"): string {
  const rt = runtime();
  const tried: string[] = [];
  const override = rt.env(envVar);
  if (override !== undefined && override !== "") {
    if (rt.exists(override)) return override;
    // An explicit override that points nowhere is a configuration error, not a hint to fall back.
    throw new DLPackError(
      "library",
      `${envVar}=${override}: no such file. Unset it to use the local build, or point it at a built ${
        libraryFileName(rt.os, stem)
      }.`,
    );
  } else {
    tried.push(`${envVar} (not set)`);
  }
  const local = localBuildPath(rt.os, stem);
  if (local !== undefined) {
    if (rt.exists(local)) return local;
    tried.push(`${local} (not built)`);
  } else {
    tried.push(`the local build (this module was loaded from ${import.meta.url}, not from a file)`);
  }
  throw new DLPackError(
    "library",
    `${libraryFileName(rt.os, stem)} not found; tried: ${tried.join("; ")}. ` +
      `Build it with ${BUILD_COMMAND}, or point ${envVar} at a built copy.`,
  );
}

/** Opens any library with a neutral symbol table (tests and demos load their producers this way). */
export function openLibrary<T extends SymbolTable>(path: string, table: T): OpenLibrary<T> {
  try {
    return runtime().open(path, table);
  } catch (error) {
    throw new DLPackError("library", `could not load ${path}: ${(error as Error).message}`);
  }
}

let loaded: OpenLibrary<Symbols> | undefined;

/** libdlpack's bound functions, loaded on first use and checked against {@link ABI_VERSION}. */
export function core(): Bound<Symbols> {
  if (loaded !== undefined) return loaded.symbols;
  const path = findLibrary("DLPACK_LIB");
  // Ask for the version alone first: a library of another ABI may lack symbols of this table, and
  // the version mismatch is the error worth reporting.
  const probe = openLibrary(path, { dlpk_abi_version: symbols.dlpk_abi_version });
  const version = probe.symbols.dlpk_abi_version();
  probe.close();
  if (version !== ABI_VERSION) {
    throw new DLPackError(
      "library",
      `${path} speaks native ABI ${version}, this module needs ${ABI_VERSION}: rebuild it with ${BUILD_COMMAND}`,
    );
  }
  const lib = openLibrary(path, symbols);
  const size = lib.symbols.dlpk_description_size();
  if (size !== DESCRIPTION_BYTES) {
    lib.close();
    throw new DLPackError(
      "library",
      `${path} describes tensors in ${size} bytes, this module expects ${DESCRIPTION_BYTES}: rebuild it with ${BUILD_COMMAND}`,
    );
  }
  loaded = lib;
  return lib.symbols;
}

/** The path libdlpack was loaded from (loads it if needed). */
export function corePath(): string {
  core();
  return loaded!.path;
}
