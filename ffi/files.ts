/**
 * The file operations of library loading, written once over node:fs (both runtimes have it, and
 * both honour O_NOFOLLOW and O_NONBLOCK there): reading a file that may turn out to be anything (a
 * FIFO, a folder, a symlink, a huge file), writing a cache entry atomically, the private copy a
 * verified build is loaded from where no sealed memory file can be made, and opening a library file
 * a user named after checking what it is. Synchronous, so that a first use without `ready()` can
 * load the prebuilt library of an installed package. node:fs is looked up on first use only: it
 * costs Deno start-up time, and only loading needs it.
 * @module
 */
import type { Runtime } from "./types.ts";

type Fs = typeof import("node:fs");
let fsModule: Fs | undefined;
const nodeFs = (): Fs =>
  fsModule ??= (globalThis as unknown as { process: { getBuiltinModule(id: string): unknown } }).process
    .getBuiltinModule("node:fs") as Fs;

/** The SHA-256 of `bytes` in hex, computed synchronously (node:crypto, in both runtimes). */
export function sha256Sync(bytes: Uint8Array): string {
  const crypto = (globalThis as unknown as { process: { getBuiltinModule(id: string): unknown } }).process
    .getBuiltinModule("node:crypto") as typeof import("node:crypto");
  return crypto.createHash("sha256").update(bytes).digest("hex");
}

/** What a cache entry turned out to be. `why` says what was wrong, for the list of places tried. */
type CacheEntry =
  | { readonly kind: "file"; readonly bytes: Uint8Array<ArrayBuffer> }
  | { readonly kind: "absent" }
  | { readonly kind: "unusable"; readonly why: string }
  | { readonly kind: "denied"; readonly why: string };

/** Whether an error is the runtime refusing a permission (Deno's --allow-* flags), as opposed to
 * the file system refusing access. */
export function isPermissionRefusal(error: unknown): boolean {
  const name = (error as { name?: unknown } | null)?.name;
  return name === "NotCapable" || name === "PermissionDenied";
}

/** A file system error in words, with its errno code where there is one. */
function fsReason(error: unknown): string {
  const e = error as { code?: unknown; message?: unknown } | null;
  const code = typeof e?.code === "string" ? e.code : undefined;
  if (code === "ENOTDIR") return "a folder on its path is a file (ENOTDIR)";
  if (code === "EISDIR") return "it is a folder, not a file (EISDIR)";
  if (code === "EACCES" || code === "EPERM") return `the file system refused access (${code})`;
  if (code === "EROFS") return "the file system is read-only (EROFS)";
  if (code === "ENOSPC") return "the disk is full (ENOSPC)";
  if (code === "ELOOP") return "it is a symbolic link (ELOOP)";
  return typeof e?.message === "string" ? e.message : String(error);
}

/** What kind of thing a non-regular file system entry is. */
function kindOf(stat: { isDirectory(): boolean; isSymbolicLink(): boolean; isFIFO(): boolean; isSocket(): boolean }) {
  if (stat.isDirectory()) return "a folder";
  if (stat.isSymbolicLink()) return "a symbolic link (this module only ever writes regular files there)";
  if (stat.isFIFO()) return "a FIFO";
  if (stat.isSocket()) return "a socket";
  return "a device";
}

/**
 * Reads a file that must be a regular file of at most `limit` bytes (a cache entry, a packaged
 * build). Looked at with lstat first and opened with O_NOFOLLOW | O_NONBLOCK, so a symlink is not
 * followed and a FIFO put there cannot hang the caller even if it replaces the file between the two;
 * the open file must be the file lstat saw.
 */
export function readRegularFile(path: string, limit: number): CacheEntry {
  const fs = nodeFs();
  const failed = (error: unknown): CacheEntry => {
    if (isPermissionRefusal(error)) return { kind: "denied", why: (error as Error).message };
    if ((error as { code?: unknown }).code === "ENOENT") return { kind: "absent" };
    return { kind: "unusable", why: fsReason(error) };
  };
  let seen;
  try {
    seen = fs.lstatSync(path);
  } catch (error) {
    return failed(error);
  }
  if (!seen.isFile()) return { kind: "unusable", why: `it is ${kindOf(seen)}, not a regular file` };
  if (seen.size > limit) {
    return { kind: "unusable", why: `it has ${seen.size} bytes, more than the ${limit} a release build may have` };
  }
  const flags = fs.constants.O_RDONLY | (fs.constants.O_NOFOLLOW ?? 0) | (fs.constants.O_NONBLOCK ?? 0);
  let fd: number;
  try {
    fd = fs.openSync(path, flags);
  } catch (error) {
    return failed(error);
  }
  try {
    const opened = fs.fstatSync(fd);
    if (!opened.isFile() || opened.ino !== seen.ino || opened.dev !== seen.dev) {
      return { kind: "unusable", why: "it was replaced while being opened" };
    }
    // One byte more than expected: a file that grows while it is read is noticed, not cut short.
    const buffer = new Uint8Array(Math.min(opened.size, limit) + 1);
    let length = 0;
    for (;;) {
      const bytesRead = fs.readSync(fd, buffer, length, buffer.length - length, null);
      if (bytesRead === 0) break;
      length += bytesRead;
      if (length === buffer.length) return { kind: "unusable", why: "it grew while being read" };
    }
    return { kind: "file", bytes: buffer.subarray(0, length) };
  } catch (error) {
    return failed(error);
  } finally {
    try {
      fs.closeSync(fd);
    } catch {
      // nothing was written through it
    }
  }
}

/** Reads a file of the executable's embedded file system (the runtime serves it from memory: it
 * cannot be a FIFO or change), if it is a file of at most `limit` bytes. */
export function readEmbeddedFile(path: string, limit: number): CacheEntry {
  const fs = nodeFs();
  try {
    const seen = fs.statSync(path);
    if (!seen.isFile()) return { kind: "unusable", why: "it is not a file" };
    if (seen.size > limit) {
      return { kind: "unusable", why: `it has ${seen.size} bytes, more than the ${limit} a release build may have` };
    }
    return { kind: "file", bytes: new Uint8Array(fs.readFileSync(path)) };
  } catch (error) {
    if ((error as { code?: unknown }).code === "ENOENT") return { kind: "absent" };
    return { kind: "unusable", why: fsReason(error) };
  }
}

/** Writes `dir/name` so that readers see the old entry or the whole new file, never a part
 * (creates `dir` as needed). Returns what went wrong, or undefined. */
export function writeCacheEntry(dir: string, name: string, bytes: Uint8Array): string | undefined {
  const fs = nodeFs();
  try {
    fs.mkdirSync(dir, { recursive: true });
  } catch (error) {
    return `its folder could not be made: ${reasonOf(error)}`;
  }
  // A unique temporary name in the same folder: concurrent writers never share a file, and the
  // rename cannot cross file systems.
  const temporary = `${dir}/.${name}.${crypto.randomUUID()}.tmp`;
  try {
    fs.writeFileSync(temporary, bytes, { mode: 0o755, flag: "wx" });
    fs.renameSync(temporary, `${dir}/${name}`);
    return undefined;
  } catch (error) {
    try {
      fs.rmSync(temporary, { force: true });
    } catch {
      // best effort: a leftover temporary file is never read
    }
    return reasonOf(error);
  }
}

const reasonOf = (error: unknown) => isPermissionRefusal(error) ? (error as Error).message : fsReason(error);

/** A file to load a library from: the path to load it through, the file itself, and how to let
 * it go once loaded (a loaded library stays mapped). */
export interface LoadableFile {
  /** On Linux `/proc/self/fd/<n>` of the descriptor that holds the bytes, so the load opens that
   * very file whatever happens to any path meanwhile; elsewhere the file's path. */
  readonly loadPath: string;
  /** The file's path, to load it by where `loadPath` cannot be opened (no /proc); equal to
   * `loadPath` when there is no other way to it (a sealed memory file). */
  readonly file: string;
  /** Closes the descriptor, and deletes what was written for the load. */
  remove(): void;
}

/**
 * Writes `bytes` to a file created exclusively (O_EXCL) in a fresh folder that only this user can
 * enter, made inside the first of `places` that allows it (undefined: the system's temporary
 * folder). Loading it loads exactly the bytes in memory, unlike the shared file they were read
 * from, which anyone who can write there may replace after the check. Returns the copy, or every
 * place that failed and why.
 */
export function writePrivateCopy(
  rt: Runtime,
  places: readonly (string | undefined)[],
  name: string,
  bytes: Uint8Array,
): LoadableFile | { readonly failed: readonly string[] } {
  const fs = nodeFs();
  const failed: string[] = [];
  for (const place of places) {
    const where = place ?? "the temporary folder";
    let dir: string;
    try {
      dir = rt.makePrivateDir(place);
    } catch (error) {
      failed.push(`${where} (${reasonOf(error)})`);
      continue;
    }
    let fd: number | undefined;
    const remove = () => {
      try {
        if (fd !== undefined) fs.closeSync(fd);
        fs.rmSync(dir, { recursive: true, force: true });
      } catch {
        // swept by a later run (a loaded DLL cannot be deleted on Windows)
      }
    };
    try {
      const made = fs.lstatSync(dir);
      // mkdtemp creates 0700; a folder others may enter could have its file swapped before the load.
      if (!made.isDirectory() || (rt.os !== "windows" && (made.mode & 0o077) !== 0)) {
        throw new Error(`the new folder ${dir} has mode ${(made.mode & 0o777).toString(8)}, not 700`);
      }
      const file = `${dir}/${name}`;
      fd = fs.openSync(file, "wx", 0o700);
      for (let at = 0; at < bytes.length;) at += fs.writeSync(fd, bytes, at, bytes.length - at);
      // The descriptor names the inode written here even if the folder itself is renamed away
      // (possible where others may write to a folder above it).
      const loadPath = rt.os === "linux" ? `/proc/self/fd/${fd}` : file;
      return { loadPath, file, remove };
    } catch (error) {
      remove();
      failed.push(`${where} (${reasonOf(error)})`);
    }
  }
  return { failed };
}

/** Removes private copies older than a day from `dir`: on Windows a loaded DLL cannot be deleted,
 * so each run's copy stays behind until a later run finds it unused. Best effort. */
export function sweepPrivateCopies(dir: string): void {
  const fs = nodeFs();
  const dayAgo = Date.now() - 86_400_000;
  try {
    for (const entry of fs.readdirSync(dir)) {
      if (!entry.startsWith(".dlpack-load-")) continue;
      const stat = fs.lstatSync(`${dir}/${entry}`, { throwIfNoEntry: false });
      if (stat?.isDirectory() && stat.mtimeMs < dayAgo) fs.rmSync(`${dir}/${entry}`, { recursive: true, force: true });
    }
  } catch {
    // an unreadable folder keeps its leftovers
  }
}

/**
 * Opens the library file at `path` (symlinks followed: a user's own build may be one) without
 * blocking, and checks that it is a regular file: a FIFO there would make `dlopen` wait forever for
 * a writer, and a folder or device fail obscurely. Returns the checked file, or what it is instead.
 * A path stat sees but open cannot (a file in an executable's embedded file system, which only the
 * runtime's dlopen reads) is handed on as it is.
 */
export function openLibraryFile(rt: Runtime, path: string): LoadableFile | { readonly problem: string } {
  const fs = nodeFs();
  let seen;
  try {
    seen = fs.statSync(path);
  } catch (error) {
    return { problem: (error as { code?: unknown }).code === "ENOENT" ? "no such file" : reasonOf(error) };
  }
  if (!seen.isFile()) return { problem: `it is ${kindOf(seen)}, not a library file` };
  let fd: number;
  try {
    fd = fs.openSync(path, fs.constants.O_RDONLY | (fs.constants.O_NONBLOCK ?? 0));
  } catch (error) {
    if ((error as { code?: unknown }).code === "ENOENT") return { loadPath: path, file: path, remove() {} };
    return { problem: reasonOf(error) };
  }
  const remove = () => {
    try {
      fs.closeSync(fd);
    } catch {
      // already closed
    }
  };
  try {
    const opened = fs.fstatSync(fd);
    if (!opened.isFile() || opened.ino !== seen.ino || opened.dev !== seen.dev) {
      remove();
      return { problem: "it was replaced while being opened" };
    }
  } catch (error) {
    remove();
    return { problem: reasonOf(error) };
  }
  return { loadPath: rt.os === "linux" ? `/proc/self/fd/${fd}` : path, file: path, remove };
}
