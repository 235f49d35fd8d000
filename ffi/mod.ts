/**
 * The runtime boundary: picks the Deno or Bun binding, finds libdlpack, checks its ABI version.
 * Everything outside ffi/ talks to native code through `core()` and `runtime()` only.
 * @module
 */
import { DLPackError, shown } from "../src/facts/errors.ts";
import { quote } from "../src/facts/intrinsics.ts";
import { bunRuntime } from "./bun.ts";
import { denoRuntime } from "./deno.ts";
import { ABI_VERSION, DESCRIPTION_BYTES, type Symbols, symbols } from "./symbols.ts";
import { RELEASE_CHECKSUMS, RELEASE_VERSION } from "./checksums.ts";
import {
  type LoadableFile,
  openLibraryFile,
  readEmbeddedFile,
  readRegularFile,
  sha256Sync,
  sweepPrivateCopies,
  writePrivateCopy,
} from "./files.ts";
import { sealedMemoryFile } from "./memfd.ts";
import { Permissions } from "./permissions.ts";
import { fetchRelease, MAX_RELEASE_BYTES, releaseFileName } from "./remote.ts";
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
const BUILD_COMMAND = "tools/build.sh (or: cd zig && zig build --release=safe)";

/** The prebuilt libraries the package's Bun entry registered (their paths inside an executable that
 * `bun build --compile` made, or in node_modules), by release file name. */
let registered: Readonly<Record<string, string>> | undefined;

/**
 * Registers the prebuilt library files of an installed package, by release file name. The Bun
 * entries of the npm package call it with `type: "file"` imports of every target's file, so that
 * `bun build --compile` embeds them and the compiled program finds its own. Not needed otherwise:
 * the lookup finds `prebuilt/` next to this module by itself.
 */
export function usePrebuilt(files: Readonly<Record<string, string>>): void {
  registered = Object.freeze({ ...files });
}

/** Where an installed package carries the release build `name`: what its Bun entry registered, else
 * `prebuilt/` next to this module (undefined when the module is no file). */
export function packagedPath(name: string): string | undefined {
  return registered?.[name] ?? filePath(new URL(`../prebuilt/${name}`, import.meta.url));
}

/** What a lookup found: a path to open (`file`: the override, open and checked), the verified bytes
 * of a release build, or nothing. `tried` lists every place looked at; `stopped`: a check Deno's
 * permissions refused ended the lookup where the library may well be. */
type Found =
  | { readonly kind: "path"; readonly path: string; readonly file?: LoadableFile; readonly tried: string[] }
  | { readonly kind: "bytes"; readonly bytes: Uint8Array; readonly origin: string; readonly tried: string[] }
  | { readonly kind: "none"; readonly tried: string[]; readonly stopped: boolean };

/**
 * The documented lookup order: the env override, a path the program chose, the local build next
 * to this module, then (`packaged`) the prebuilt build of an installed package, checked against the
 * release table. Every permission Deno refuses along the way is gathered in `perm`: a check that
 * was refused is never taken for a missing file, and an override that cannot be read is never
 * passed over (the caller throws `perm.error`). User-named files are opened and checked for what
 * they are first: a FIFO there would make dlopen wait forever.
 */
function lookup(perm: Permissions, envVar: string, stem: string, chosen?: string, packaged = false): Found {
  const rt = runtime();
  const tried: string[] = [];
  const named = (path: string, what: string, orElse: string): Found => {
    const file = openLibraryFile(rt, path);
    if ("problem" in file) throw new DLPackError("library", `${what}: ${file.problem}. ${orElse}`);
    return { kind: "path", path, file, tried };
  };
  if (perm.have("env", envVar)) {
    const override = rt.env(envVar);
    if (override !== undefined && override !== "") {
      if (!perm.have("read", override)) {
        tried.push(`${envVar}=${override} (not checked: Deno denies reading it)`);
        return { kind: "none", tried, stopped: true };
      }
      // An explicit override that points nowhere is a configuration error, not a hint to fall back.
      const orElse = `Unset it to use the local build, or point it at a built ${libraryFileName(rt.os, stem)}.`;
      return named(override, `${envVar}=${override}`, orElse);
    }
    tried.push(`${envVar} (not set)`);
  } else {
    tried.push(`${envVar} (not checked: Deno denies reading it, and a set ${envVar} is never passed over)`);
  }
  if (chosen !== undefined) {
    if (!perm.have("read", chosen)) {
      tried.push(`${chosen} (from useLibrary(); not checked: Deno denies reading it)`);
      return { kind: "none", tried, stopped: true };
    }
    return named(chosen, `could not load ${chosen}`, "useLibrary() needs a built libdlpack.");
  }
  const local = localBuildPath(rt.os, stem);
  const name = releaseFileName(RELEASE_VERSION, rt.os, rt.arch);
  const prebuilt = packaged ? packagedPath(name) : undefined;
  if (local === undefined) {
    tried.push(`the local build (this module was loaded from ${import.meta.url}, not from a file)`);
  } else if (!perm.have("read", local)) {
    tried.push(`${local} (not checked: Deno denies reading it)`);
    // The prebuilt build would be next: its permission goes in the same error.
    if (prebuilt !== undefined && !perm.have("read", prebuilt)) tried.push(`${prebuilt} (not checked either)`);
    return { kind: "none", tried, stopped: true };
  } else if (rt.exists(local)) {
    return { kind: "path", path: local, tried };
  } else {
    tried.push(`${local} (not built)`);
  }
  if (prebuilt === undefined) return { kind: "none", tried, stopped: false };
  if (!perm.have("read", prebuilt)) {
    tried.push(`${prebuilt} (not checked: Deno denies reading it)`);
    return { kind: "none", tried, stopped: true };
  }
  const verified = packagedBuild(prebuilt, name, tried);
  return verified ?? { kind: "none", tried, stopped: false };
}

/** The verified bytes of the prebuilt build at `path`, or undefined with what was wrong in `tried`. */
function packagedBuild(path: string, name: string, tried: string[]): Found | undefined {
  const rt = runtime();
  const entry = rt.embedded(path)
    ? readEmbeddedFile(path, MAX_RELEASE_BYTES)
    : readRegularFile(path, MAX_RELEASE_BYTES);
  if (entry.kind === "absent") {
    tried.push(`${path} (no prebuilt build: not an installed package)`);
    return undefined;
  }
  if (entry.kind !== "file") {
    tried.push(`${path} (${entry.why}: ignored)`);
    return undefined;
  }
  const expected = RELEASE_CHECKSUMS[name];
  const digest = sha256Sync(entry.bytes);
  if (expected !== undefined && digest === expected) return { kind: "bytes", bytes: entry.bytes, origin: path, tried };
  tried.push(`${path} (SHA-256 ${digest}, expected ${expected ?? "none for this platform"}: ignored)`);
  return undefined;
}

/** Finds a library: the env override first, then the local build next to this module. */
export function findLibrary(envVar: string, stem = "dlpack"): string {
  const perm = new Permissions(runtime());
  const found = lookup(perm, envVar, stem);
  if (found.kind === "path") found.file?.remove();
  if (perm.missing) throw perm.error(found.tried);
  if (found.kind === "path") return found.path;
  throw new DLPackError(
    "library",
    `${libraryFileName(runtime().os, stem)} not found; tried: ${found.tried.join("; ")}. Build it with ` +
      `${BUILD_COMMAND}, or point ${envVar} at a built copy.`,
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

/** What to do when no release build could be had; `baseUrlSet`: DLPACK_BASE_URL named the place,
 * so the advice is to check it rather than to set it. */
const remoteHint = (baseUrlSet: boolean) => {
  const release = releaseFileName(RELEASE_VERSION, runtime().os, runtime().arch);
  const mirror = baseUrlSet
    ? `check that DLPACK_BASE_URL serves ${release}`
    : `set DLPACK_BASE_URL to a mirror that serves ${release}`;
  return importedByUrl()
    ? `${mirror.charAt(0).toUpperCase()}${mirror.slice(1)}, or set DLPACK_LIB to a libdlpack of this version ` +
      `(built from a clone of the repository).`
    : `Set DLPACK_LIB to a built libdlpack, build one with ${BUILD_COMMAND}, or ${mirror}.`;
};

/** What to do about a library of another ABI: rebuild it in a checkout; by URL, use the release build. */
const rebuildHint = () =>
  importedByUrl()
    ? `point DLPACK_LIB at a libdlpack of this version, or unset it (and do not call useLibrary) so that ` +
      `\`await ready()\` loads the verified release build`
    : `rebuild it with ${BUILD_COMMAND}`;

/** The lookup a first use or `ready()` makes, with the FFI permission every use needs. */
function locateCore(perm: Permissions): Found {
  perm.have("ffi");
  return lookup(perm, "DLPACK_LIB", "dlpack", chosen, true);
}

/** Loads what a lookup found. */
function loadFound(found: Found): OpenLibrary<Symbols> {
  if (found.kind === "none") throw new DLPackError("library", "no library was found to load");
  if (found.kind === "bytes") {
    const name = releaseFileName(RELEASE_VERSION, runtime().os, runtime().arch);
    loadVerified(found.bytes, name, found.origin, [undefined]);
    return loaded!;
  }
  if (found.file === undefined) return load(found.path, found.path);
  try {
    loadCopy(found.file, found.path);
    return loaded!;
  } finally {
    found.file.remove();
  }
}

/** Whether `error` is the runtime failing to open `origin` (as opposed to a library refused). */
const couldNotLoad = (error: unknown, origin: string) =>
  error instanceof DLPackError && error.message.startsWith(`could not load ${origin}: `);

/** Loads a file through its descriptor, or by its path where /proc is not mounted. */
function loadCopy(copy: LoadableFile, origin: string): void {
  if (copy.loadPath === copy.file) {
    load(copy.file, origin);
    return;
  }
  try {
    load(copy.loadPath, origin);
  } catch (error) {
    if (!couldNotLoad(error, origin)) throw error;
    load(copy.file, origin);
  }
}

/** Loads verified release bytes: from a sealed memory file where there can be one (nothing written,
 * nothing anyone can change), else from a private copy in the first of `places` that takes one.
 * Returns whether a private copy was written. */
function loadVerified(bytes: Uint8Array, name: string, origin: string, places: (string | undefined)[]): boolean {
  const rt = runtime();
  const memory = sealedMemoryFile(rt, name, bytes);
  if (typeof memory !== "string") {
    try {
      load(memory.loadPath, origin);
      return false;
    } catch (error) {
      if (!couldNotLoad(error, origin)) throw error;
    } finally {
      memory.remove();
    }
  }
  const copy = writePrivateCopy(rt, places, name, bytes);
  if ("failed" in copy) {
    throw new DLPackError(
      "library",
      `the verified ${name} (from ${origin}) could not be written to a private file to load it from; ` +
        `tried: ${copy.failed.join("; ")}. Run with --allow-write=${places[0] ?? "<a writable folder>"}.`,
    );
  }
  try {
    loadCopy(copy, origin);
  } finally {
    // Once loaded the file can go: the mapping stays (except on Windows, swept on a later run).
    copy.remove();
  }
  return true;
}

/**
 * Makes libdlpack ready to use and returns where it came from. With a local build, the prebuilt
 * library of an installed package, `DLPACK_LIB` or {@link useLibrary} this only loads it (a first
 * use would too) and returns its path. Without one, for instance when the module is imported from
 * JSR or by URL, it downloads the release build for this OS and CPU from `DLPACK_BASE_URL`
 * (default: the project's GitHub release of this version), checks its SHA-256 against the table
 * shipped in this module, and caches it under `DLPACK_CACHE`, `$DENO_DIR/dlpack-ts`,
 * `$XDG_CACHE_HOME/dlpack-ts` or `~/.cache/dlpack-ts`, so later runs need no network; it then returns
 * the cached file's path (or the URL, when the download could not be cached). The verified bytes are
 * loaded themselves (from a sealed memory file, or a private copy), never from the file they were
 * checked in. Everything else in the API is synchronous and needs the library loaded first (a
 * top-level `await ready()` in the program's entry). Throws `DLPackError("library")` listing
 * everything tried, or naming every Deno permission the lookup needs at once.
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
  const perm = new Permissions(rt);
  const found = locateCore(perm);
  if (found.kind !== "none" || found.stopped) {
    if (perm.missing) throw perm.error(found.tried);
    return loadFound(found).path;
  }
  const release = await fetchRelease(rt, found.tried, remoteHint, perm);
  // useLibrary() and a first use during the download loaded another library meanwhile: keep that one.
  const meanwhile = loaded as OpenLibrary<Symbols> | undefined;
  if (meanwhile !== undefined) return meanwhile.path;
  const name = releaseFileName(RELEASE_VERSION, rt.os, rt.arch);
  const places = release.cacheDir === undefined ? [undefined] : [release.cacheDir, undefined];
  if (loadVerified(release.bytes, name, release.origin, places) && release.cacheDir !== undefined) {
    sweepPrivateCopies(release.cacheDir);
  }
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
  // dlopen reads a path up to its first NUL: "x.so\0junk" would load x.so, a file nobody named.
  for (let i = 0; i < resolved.length; i++) {
    if (resolved[i] === "\0") {
      throw new DLPackError("argument", `useLibrary() got a path with a NUL character: ${quote(resolved)}`);
    }
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
  const rt = runtime();
  const perm = new Permissions(rt);
  const found = locateCore(perm);
  if (perm.missing) throw perm.error(found.tried);
  if (found.kind !== "none") return loadFound(found).symbols;
  const release = releaseFileName(RELEASE_VERSION, rt.os, rt.arch);
  throw new DLPackError(
    "library",
    `${libraryFileName(rt.os)} not found; tried: ${found.tried.join("; ")}. ` +
      (importedByUrl()
        ? `This module was loaded from ${import.meta.url}: call \`await ready()\` once before first use; ` +
          `it downloads the release build ${release}, checks it and caches it.`
        : `Build it with ${BUILD_COMMAND}, point DLPACK_LIB at a built copy, or call \`await ready()\` ` +
          `first to download the release build ${release}.`),
  );
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
