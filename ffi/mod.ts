/**
 * The runtime boundary: picks the Deno or Bun binding, finds libdlpack, checks its ABI version.
 * Everything outside ffi/ talks to native code through `core()` and `runtime()` only.
 * @module
 */
import { DLPackError, shown } from "../src/facts/errors.ts";
import { bunRuntime } from "./bun.ts";
import { denoRuntime } from "./deno.ts";
import { ABI_VERSION, DESCRIPTION_BYTES, type Symbols, symbols } from "./symbols.ts";
import { RELEASE_VERSION } from "./checksums.ts";
import { type PrivateCopy, sweepPrivateCopies, writePrivateCopy } from "./files.ts";
import { fetchRelease, releaseFileName } from "./remote.ts";
import type { Bound, OpenLibrary, Runtime, SymbolTable } from "./types.ts";

export type { Bound, NativeType, OpenLibrary, Runtime, SymbolSpec, SymbolTable } from "./types.ts";
export { ABI_VERSION, DESCRIPTION_BYTES } from "./symbols.ts";
export { RELEASE_CHECKSUMS, RELEASE_VERSION } from "./checksums.ts";
export { baseUrl, cacheDirectory, DEFAULT_BASE_URL, MAX_RELEASE_BYTES, releaseFileName } from "./remote.ts";

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

/** A file: URL as a path of this OS (undefined for other protocols, and for what is no URL). */
function filePath(url: URL): string | undefined {
  try {
    if (url.protocol !== "file:") return undefined;
    return decodeURIComponent(url.pathname.replace(/^\/([A-Za-z]:)/, "$1"));
  } catch {
    return undefined; // a malformed %-escape, or an object that only pretends to be a URL
  }
}

/** Where the local build puts a library, relative to this module (Windows puts DLLs in bin/). */
export function localBuildPath(os: string, stem = "dlpack"): string | undefined {
  const dir = os === "windows" ? "bin" : "lib";
  return filePath(new URL(`../zig/zig-out/${dir}/${libraryFileName(os, stem)}`, import.meta.url));
}

/** The command that builds the native libraries from a checkout. */
export const BUILD_COMMAND = "tools/build.sh (or: cd zig && zig build --release=safe)";

/** What a lookup found: the path, or everything tried; `denied` says which permission Deno refused
 * for a check, which then must not count as "not there". */
type Found = { path: string } | { tried: string[]; denied?: string };

/** The documented lookup order: the env override, a path the program chose, the local build next
 * to this module. A check that Deno's permissions forbid is never taken for a missing file: an
 * override that cannot be read is an error naming the flag, and an unchecked local build is
 * reported as such. */
function lookup(envVar: string, stem: string, chosen?: string): Found {
  const rt = runtime();
  const tried: string[] = [];
  if (!rt.granted("env", envVar)) {
    throw new DLPackError(
      "library",
      `cannot tell whether ${envVar} is set: Deno denies reading it, and a set ${envVar} must never be passed ` +
        `over silently. Run with --allow-env=${envVar} (or --allow-env).`,
    );
  }
  const override = rt.env(envVar);
  if (override !== undefined && override !== "") {
    if (!rt.granted("read", override)) {
      throw new DLPackError(
        "library",
        `${envVar}=${override}: Deno denies reading it, so it cannot be checked. Run with --allow-read=${override} ` +
          `(or --allow-read).`,
      );
    }
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
  if (local === undefined) {
    tried.push(`the local build (this module was loaded from ${import.meta.url}, not from a file)`);
  } else if (!rt.granted("read", local)) {
    tried.push(`${local} (not checked: Deno denies reading it)`);
    return { tried, denied: `run with --allow-read=${local} (or --allow-read)` };
  } else if (rt.exists(local)) {
    return { path: local };
  } else {
    tried.push(`${local} (not built)`);
  }
  return { tried };
}

/** The error for a lookup that a refused permission stopped. */
function deniedError(name: string, found: { tried: string[]; denied?: string }): DLPackError {
  return new DLPackError(
    "library",
    `${name} could not be looked for: ${found.denied}; tried: ${found.tried.join("; ")}.`,
  );
}

/** Finds a library: the env override first, then the local build next to this module. */
export function findLibrary(envVar: string, stem = "dlpack"): string {
  const found = lookup(envVar, stem);
  if ("path" in found) return found.path;
  const name = libraryFileName(runtime().os, stem);
  if (found.denied !== undefined) throw deniedError(name, found);
  throw new DLPackError(
    "library",
    `${name} not found; tried: ${found.tried.join("; ")}. Build it with ${BUILD_COMMAND}, or point ${envVar} at a ` +
      `built copy.`,
  );
}

/** Opens any library with a neutral symbol table (tests and demos load their producers this way).
 * Every failure, a permission Deno refuses included, is a `DLPackError("library")`. */
export function openLibrary<T extends SymbolTable>(path: string, table: T, shownPath = path): OpenLibrary<T> {
  try {
    return runtime().open(path, table);
  } catch (error) {
    // Deno's own message names the flag when it is the permission that failed.
    throw new DLPackError("library", `could not load ${shownPath}: ${(error as Error)?.message ?? String(error)}`);
  }
}

let loaded: OpenLibrary<Symbols> | undefined;
/** `loaded.symbols`, read by {@link core} without going through `loaded`. */
let bound: Bound<Symbols> | undefined;
/** Set by {@link useLibrary}. */
let chosen: string | undefined;
let preparing: Promise<string> | undefined;

/** Whether this module was imported by URL: there is then no checkout, and no build script, next to it. */
const importedByUrl = (): boolean => filePath(new URL(import.meta.url)) === undefined;

const remoteHint = () => {
  const release = releaseFileName(RELEASE_VERSION, runtime().os, runtime().arch);
  return importedByUrl()
    ? `Set DLPACK_BASE_URL to a mirror that serves ${release}, or DLPACK_LIB to a libdlpack of this version ` +
      `(built from a clone of the repository).`
    : `Set DLPACK_LIB to a built libdlpack, build one with ${BUILD_COMMAND}, or set DLPACK_BASE_URL to where ${release} ` +
      `can be downloaded.`;
};

/** What to do about a library of another ABI: rebuild it in a checkout; by URL, use the release build. */
const rebuildHint = () =>
  importedByUrl()
    ? `point DLPACK_LIB at a libdlpack of this version, or unset it (and do not call useLibrary) so that ` +
      `\`await ready()\` loads the verified release build`
    : `rebuild it with ${BUILD_COMMAND}`;

function corePathOrThrow(): string {
  const found = lookup("DLPACK_LIB", "dlpack", chosen);
  if ("path" in found) return found.path;
  const rt = runtime();
  if (found.denied !== undefined) throw deniedError(libraryFileName(rt.os), found);
  const release = releaseFileName(RELEASE_VERSION, rt.os, rt.arch);
  const remote = importedByUrl();
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

/** Loads a private copy through its descriptor, or by its path where /proc is not mounted. */
function loadCopy(copy: PrivateCopy, origin: string): void {
  if (copy.loadPath === copy.file) {
    load(copy.file, origin);
    return;
  }
  try {
    load(copy.loadPath, origin);
  } catch (error) {
    if (!(error instanceof DLPackError) || !error.message.startsWith(`could not load ${origin}: `)) throw error;
    load(copy.file, origin);
  }
}

/**
 * Makes libdlpack ready to use and returns where it came from. With a local build (or
 * `DLPACK_LIB`, or {@link useLibrary}) this only loads it and returns its path. Without one, for
 * instance when the module is imported by URL, it downloads the release build for this OS and CPU
 * from `DLPACK_BASE_URL` (default: the project's GitHub release of this version), checks its SHA-256
 * against the table shipped in this module, and caches it under `DLPACK_CACHE`, `$DENO_DIR/dlpack-ts`,
 * `$XDG_CACHE_HOME/dlpack-ts` or `~/.cache/dlpack-ts`, so later runs need no network; it then returns
 * the cached file's path (or the URL, when the download could not be cached). The verified bytes are
 * loaded from a private copy, never from the shared cache file they were checked in.
 * Everything else in the API is synchronous and needs this to have finished first (a top-level
 * `await ready()` in the program's entry). Throws `DLPackError("library")` listing everything
 * tried.
 */
export function ready(): Promise<string> {
  preparing ??= prepare().catch((error) => {
    preparing = undefined; // a later call may succeed (network back, server fixed)
    throw error instanceof DLPackError
      ? error
      : new DLPackError("library", `ready() failed: ${(error as Error)?.message ?? String(error)}`);
  });
  return preparing;
}

async function prepare(): Promise<string> {
  if (loaded !== undefined) return loaded.path;
  const rt = runtime();
  const found = lookup("DLPACK_LIB", "dlpack", chosen);
  if ("path" in found) return load(found.path, found.path).path;
  if (found.denied !== undefined) throw deniedError(libraryFileName(rt.os), found);
  const release = await fetchRelease(rt, found.tried, remoteHint());
  // useLibrary() and a first use during the download loaded another library meanwhile: keep that one.
  const meanwhile = loaded as OpenLibrary<Symbols> | undefined;
  if (meanwhile !== undefined) return meanwhile.path;
  checkFfiPermission(rt);
  const name = releaseFileName(RELEASE_VERSION, rt.os, rt.arch);
  const places = release.cacheDir === undefined ? [undefined] : [release.cacheDir, undefined];
  const copy = await writePrivateCopy(rt, places, name, release.bytes);
  if ("failed" in copy) {
    throw new DLPackError(
      "library",
      `the verified ${name} (from ${release.origin}) could not be written to a private file to load it from; ` +
        `tried: ${copy.failed.join("; ")}. Run with --allow-write=${release.cacheDir ?? "<a writable folder>"}.`,
    );
  }
  try {
    loadCopy(copy, release.origin);
  } finally {
    // Once loaded the file can go: the mapping stays (except on Windows, swept on a later run).
    await copy.remove();
  }
  if (release.cacheDir !== undefined) await sweepPrivateCopies(release.cacheDir);
  if (release.uncached !== undefined) {
    console.warn(
      `dlpack-ts: loaded the verified release build from ${release.origin}, but ${release.uncached}; ` +
        `the next run downloads it again`,
    );
  }
  return loaded!.path;
}

/**
 * Loads libdlpack from `path` instead of the local build (a `DLPACK_LIB` set in the environment
 * still wins). Meant for programs that ship the library themselves, such as single binaries that
 * embed it. Call it before the first use; changing it afterwards throws.
 */
export function useLibrary(path: string | URL): void {
  if (typeof path !== "string" && !(path instanceof URL)) {
    throw new DLPackError("argument", `useLibrary() needs a file path or a file: URL, got ${shown(path)}`);
  }
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

// The hooks as one chain of closures, oldest first: no array whose index writes could reach a
// setter a caller put on Array.prototype.
let loadHooks: (lib: Bound<Symbols>) => void = () => {};

/** Runs `hook` once libdlpack is loaded (at once if it is), before anything else uses it: for
 * views of the state the library keeps per thread. */
export function whenLoaded(hook: (lib: Bound<Symbols>) => void): void {
  if (bound !== undefined) {
    hook(bound); // the library is loaded once: nothing to keep the hook for
    return;
  }
  const earlier = loadHooks;
  loadHooks = (lib) => {
    earlier(lib);
    hook(lib);
  };
}

/** libdlpack's bound functions, loaded on first use and checked against {@link ABI_VERSION}. */
export function core(): Bound<Symbols> {
  // Kept under V8's size for functions it always inlines: every import and dispose calls this.
  return bound !== undefined ? bound : loadCore();
}

function loadCore(): Bound<Symbols> {
  const path = corePathOrThrow();
  return load(path, path).symbols;
}

/** Refuses, up front, an FFI permission that would let the library load but fail its first use:
 * Deno's pointer functions (`Deno.UnsafePointer`, `Deno.UnsafePointerView`), which every import
 * and export calls, need `--allow-ffi` without a path. */
function checkFfiPermission(rt: Runtime): void {
  if (rt.granted("ffi")) return;
  throw new DLPackError(
    "library",
    "libdlpack needs Deno's FFI permission without a path: run with --allow-ffi. A path-scoped " +
      "--allow-ffi=<dir> lets Deno load the library but not run the pointer functions (Deno.UnsafePointer, " +
      "Deno.UnsafePointerView) that every import and export uses.",
  );
}

/**
 * Loads `file` (reported as `shownPath`), checks its ABI and keeps it. The version is asked for
 * alone first, so a library of another ABI that lacks symbols of this table gets the version
 * mismatch reported; that probe stays open while the whole table is bound, so the second dlopen
 * finds the library already loaded under the same name and returns it without opening the file
 * again: both handles are the same bytes.
 */
function load(file: string, shownPath: string): OpenLibrary<Symbols> {
  checkFfiPermission(runtime());
  const probe = openLibrary(file, { dlpk_abi_version: symbols.dlpk_abi_version }, shownPath);
  let lib: OpenLibrary<Symbols>;
  try {
    const version = probe.symbols.dlpk_abi_version();
    if (version !== ABI_VERSION) {
      throw new DLPackError(
        "library",
        `${shownPath} speaks native ABI ${version}, this module needs ${ABI_VERSION}: ${rebuildHint()}`,
      );
    }
    lib = openLibrary(file, symbols, shownPath);
  } finally {
    probe.close();
  }
  const size = lib.symbols.dlpk_description_size();
  if (size !== DESCRIPTION_BYTES) {
    lib.close();
    throw new DLPackError(
      "library",
      `${shownPath} describes tensors in ${size} bytes, this module expects ${DESCRIPTION_BYTES}: ${rebuildHint()}`,
    );
  }
  // Deleters and capsule destructors handed to foreign code point into this library: it must stay
  // mapped even if this runtime closes its handle (Deno does when an isolate ends).
  lib.symbols.dlpk_retain_library();
  loadHooks(lib.symbols);
  loaded = { path: shownPath, symbols: lib.symbols, close: lib.close };
  bound = lib.symbols;
  return loaded;
}

/** libdlpack's bound functions if something has loaded it already; never loads it. */
export function loadedCore(): Bound<Symbols> | undefined {
  return loaded?.symbols;
}

/** The path libdlpack was loaded from (loads it if needed); for a release build, what
 * {@link ready} returned. */
export function corePath(): string {
  core();
  return loaded!.path;
}
