/**
 * The runtime boundary: picks the Deno or Bun binding, finds libdlpack, checks its ABI version.
 * Everything outside ffi/ talks to native code through `core()` and `runtime()` only.
 * @module
 */
import { DLPackError } from "../src/errors.ts";
import { bunRuntime } from "./bun.ts";
import { denoRuntime } from "./deno.ts";
import { ABI_VERSION, DESCRIPTION_BYTES, type Symbols, symbols } from "./symbols.ts";
import { RELEASE_VERSION } from "./checksums.ts";
import { fetchRelease, releaseFileName } from "./remote.ts";
import type { Bound, OpenLibrary, Runtime, SymbolTable } from "./types.ts";

export type { Bound, NativeType, OpenLibrary, Runtime, SymbolSpec, SymbolTable } from "./types.ts";
export { ABI_VERSION, DESCRIPTION_BYTES } from "./symbols.ts";
export { RELEASE_CHECKSUMS, RELEASE_VERSION } from "./checksums.ts";
export { baseUrl, cacheDirectory, DEFAULT_BASE_URL, releaseFileName } from "./remote.ts";

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

/** A file: URL as a path of this OS (undefined for other protocols). */
function filePath(url: URL): string | undefined {
  if (url.protocol !== "file:") return undefined;
  return decodeURIComponent(url.pathname.replace(/^\/([A-Za-z]:)/, "$1"));
}

/** Where the local build puts a library, relative to this module (Windows puts DLLs in bin/). */
export function localBuildPath(os: string, stem = "dlpack"): string | undefined {
  const dir = os === "windows" ? "bin" : "lib";
  return filePath(new URL(`../zig/zig-out/${dir}/${libraryFileName(os, stem)}`, import.meta.url));
}

/** The command that builds the native libraries from a checkout. */
export const BUILD_COMMAND = "tools/build.sh (or: cd zig && zig build --release=safe)";

/** The documented lookup order: the env override, a path the program chose, the local build next
 * to this module. Returns the path, or what was tried when none of them has the library. */
function lookup(envVar: string, stem: string, chosen?: string): { path: string } | { tried: string[] } {
  const rt = runtime();
  const tried: string[] = [];
  const override = rt.env(envVar);
  if (override !== undefined && override !== "") {
    if (rt.exists(override)) return { path: override };
    // An explicit override that points nowhere is a configuration error, not a hint to fall back.
    throw new DLPackError(
      "library",
      `${envVar}=${override}: no such file. Unset it to use the local build, or point it at a built ${
        libraryFileName(rt.os, stem)
      }.`,
    );
  }
  tried.push(`${envVar} (not set)`);
  // Not checked for existence: a compiled single binary hands over a path in its own embedded
  // file system, which only dlopen understands.
  if (chosen !== undefined) return { path: chosen };
  const local = localBuildPath(rt.os, stem);
  if (local !== undefined) {
    if (rt.exists(local)) return { path: local };
    tried.push(`${local} (not built)`);
  } else {
    tried.push(`the local build (this module was loaded from ${import.meta.url}, not from a file)`);
  }
  return { tried };
}

/** Finds a library: the env override first, then the local build next to this module. */
export function findLibrary(envVar: string, stem = "dlpack"): string {
  const found = lookup(envVar, stem);
  if ("path" in found) return found.path;
  throw new DLPackError(
    "library",
    `${libraryFileName(runtime().os, stem)} not found; tried: ${found.tried.join("; ")}. ` +
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
/** Set by {@link useLibrary}. */
let chosen: string | undefined;
/** A verified release build {@link ready} downloaded or found in the cache. */
let prepared: string | undefined;
let preparing: Promise<string> | undefined;

const remoteHint = () =>
  `Set DLPACK_LIB to a built libdlpack, build one with ${BUILD_COMMAND}, or set DLPACK_BASE_URL to where ${
    releaseFileName(RELEASE_VERSION, runtime().os, runtime().arch)
  } can be downloaded.`;

function corePathOrThrow(): string {
  const found = lookup("DLPACK_LIB", "dlpack", chosen);
  if ("path" in found) return found.path;
  if (prepared !== undefined) return prepared;
  const rt = runtime();
  const release = releaseFileName(RELEASE_VERSION, rt.os, rt.arch);
  const remote = filePath(new URL(import.meta.url)) === undefined;
  throw new DLPackError(
    "library",
    `${libraryFileName(rt.os)} not found; tried: ${found.tried.join("; ")}. ` +
      (remote
        ? `This module was loaded from ${import.meta.url}: call \`await ready()\` once before first use; ` +
          `it downloads the release build ${release}, checks it and caches it.`
        : `Build it with ${BUILD_COMMAND}, point DLPACK_LIB at a built copy, or call \`await ready()\` ` +
          `first to download the release build ${release}.`),
  );
}

/**
 * Makes libdlpack ready to use and returns the path it was loaded from. With a local build (or
 * `DLPACK_LIB`, or {@link useLibrary}) this only loads it. Without one, for instance when the
 * module is imported by URL, it downloads the release build for this OS and CPU from
 * `DLPACK_BASE_URL` (default: the project's GitHub release of this version), checks its SHA-256
 * against the table shipped in this module, and caches it under `DLPACK_CACHE`, `$DENO_DIR/dlpack-ts`,
 * `$XDG_CACHE_HOME/dlpack-ts` or `~/.cache/dlpack-ts`, so later runs need no network.
 * Everything else in the API is synchronous and needs this to have finished first (a top-level
 * `await ready()` in the program's entry). Throws `DLPackError("library")` listing everything
 * tried.
 */
export function ready(): Promise<string> {
  preparing ??= prepare().catch((error) => {
    preparing = undefined; // a later call may succeed (network back, server fixed)
    throw error;
  });
  return preparing;
}

async function prepare(): Promise<string> {
  if (loaded !== undefined) return loaded.path;
  const found = lookup("DLPACK_LIB", "dlpack", chosen);
  if (!("path" in found) && prepared === undefined) {
    prepared = await fetchRelease(runtime(), found.tried, remoteHint());
  }
  core();
  return loaded!.path;
}

/**
 * Loads libdlpack from `path` instead of the local build (a `DLPACK_LIB` set in the environment
 * still wins). Meant for programs that ship the library themselves, such as single binaries that
 * embed it. Call it before the first use; changing it afterwards throws.
 */
export function useLibrary(path: string | URL): void {
  const resolved = typeof path === "string" ? path : filePath(path);
  if (resolved === undefined || resolved === "") {
    throw new DLPackError("library", `useLibrary() needs a file path or file: URL, got ${String(path)}`);
  }
  if (loaded !== undefined && loaded.path !== resolved) {
    throw new DLPackError(
      "library",
      `libdlpack is already loaded from ${loaded.path}; call useLibrary(${resolved}) before its first use`,
    );
  }
  chosen = resolved;
}

/** libdlpack's bound functions, loaded on first use and checked against {@link ABI_VERSION}. */
export function core(): Bound<Symbols> {
  if (loaded !== undefined) return loaded.symbols;
  const path = corePathOrThrow();
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
  // Deleters and capsule destructors handed to foreign code point into this library: it must stay
  // mapped even if this runtime closes its handle (Deno does when an isolate ends).
  lib.symbols.dlpk_retain_library();
  loaded = lib;
  return lib.symbols;
}

/** libdlpack's bound functions if something has loaded it already; never loads it. */
export function loadedCore(): Bound<Symbols> | undefined {
  return loaded?.symbols;
}

/** The path libdlpack was loaded from (loads it if needed). */
export function corePath(): string {
  core();
  return loaded!.path;
}
