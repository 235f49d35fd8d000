/**
 * The file operations of the release cache, written once over node:fs/promises (both runtimes
 * have it, and both honour O_NOFOLLOW and O_NONBLOCK there): reading a cache entry that may turn out
 * to be anything (a FIFO, a folder, a symlink, a huge file), writing one atomically, and the private
 * copy a verified build is loaded from. node:fs is imported on first use only: it costs Deno start-up
 * time, and only `ready()`'s release path needs it.
 * @module
 */
import type { Runtime } from "./types.ts";

type Fs = typeof import("node:fs/promises");
let fsModule: Promise<Fs> | undefined;
const nodeFs = (): Promise<Fs> => (fsModule ??= import("node:fs/promises"));

/** What a cache entry turned out to be. `why` says what was wrong, for the list of places tried. */
export type CacheEntry =
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
export function fsReason(error: unknown): string {
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
 * Reads a cache entry that must be a regular file of at most `limit` bytes. Looked at with lstat
 * first and opened with O_NOFOLLOW | O_NONBLOCK, so a symlink is not followed and a FIFO put there
 * cannot hang the caller even if it replaces the file between the two; the open file must be the
 * file lstat saw.
 */
export async function readCacheEntry(path: string, limit: number): Promise<CacheEntry> {
  const fs = await nodeFs();
  const failed = (error: unknown): CacheEntry => {
    if (isPermissionRefusal(error)) return { kind: "denied", why: (error as Error).message };
    if ((error as { code?: unknown }).code === "ENOENT") return { kind: "absent" };
    return { kind: "unusable", why: fsReason(error) };
  };
  let seen;
  try {
    seen = await fs.lstat(path);
  } catch (error) {
    return failed(error);
  }
  if (!seen.isFile()) return { kind: "unusable", why: `it is ${kindOf(seen)}, not a regular file` };
  if (seen.size > limit) {
    return { kind: "unusable", why: `it has ${seen.size} bytes, more than the ${limit} a release build may have` };
  }
  const flags = fs.constants.O_RDONLY | (fs.constants.O_NOFOLLOW ?? 0) | (fs.constants.O_NONBLOCK ?? 0);
  let handle;
  try {
    handle = await fs.open(path, flags);
  } catch (error) {
    return failed(error);
  }
  try {
    const opened = await handle.stat();
    if (!opened.isFile() || opened.ino !== seen.ino || opened.dev !== seen.dev) {
      return { kind: "unusable", why: "it was replaced while being opened" };
    }
    // One byte more than expected: a file that grows while it is read is noticed, not cut short.
    const buffer = new Uint8Array(Math.min(opened.size, limit) + 1);
    let length = 0;
    for (;;) {
      const { bytesRead } = await handle.read(buffer, length, buffer.length - length, null);
      if (bytesRead === 0) break;
      length += bytesRead;
      if (length === buffer.length) return { kind: "unusable", why: "it grew while being read" };
    }
    return { kind: "file", bytes: buffer.subarray(0, length) };
  } catch (error) {
    return failed(error);
  } finally {
    await handle.close().catch(() => {});
  }
}

/** Writes `dir/name` so that readers see the old entry or the whole new file, never a part
 * (creates `dir` as needed). Returns what went wrong, or undefined. */
export async function writeCacheEntry(dir: string, name: string, bytes: Uint8Array): Promise<string | undefined> {
  const fs = await nodeFs();
  try {
    await fs.mkdir(dir, { recursive: true });
  } catch (error) {
    return `its folder could not be made: ${reasonOf(error)}`;
  }
  // A unique temporary name in the same folder: concurrent writers never share a file, and the
  // rename cannot cross file systems.
  const temporary = `${dir}/.${name}.${crypto.randomUUID()}.tmp`;
  try {
    await fs.writeFile(temporary, bytes, { mode: 0o755, flag: "wx" });
    await fs.rename(temporary, `${dir}/${name}`);
    return undefined;
  } catch (error) {
    await fs.rm(temporary, { force: true }).catch(() => {});
    return reasonOf(error);
  }
}

const reasonOf = (error: unknown) => isPermissionRefusal(error) ? (error as Error).message : fsReason(error);

/** A private copy of verified bytes: the path to load it through, the file itself, and how to
 * remove it. */
export interface PrivateCopy {
  /** On Linux `/proc/self/fd/<n>` of the descriptor that created the file, so the load opens that
   * very inode whatever happens to the path meanwhile; elsewhere the file's path. */
  readonly loadPath: string;
  readonly file: string;
  /** Closes the descriptor and deletes the folder (a loaded library stays mapped). */
  remove(): Promise<void>;
}

/**
 * Writes `bytes` to a file created exclusively (O_EXCL) in a fresh folder that only this user can
 * enter, made inside the first of `places` that allows it (undefined: the system's temporary
 * folder). Loading it loads exactly the bytes in memory, unlike the shared cache entry they were
 * read from, which anyone who can write there may replace after the check. Returns the copy, or
 * every place that failed and why.
 */
export async function writePrivateCopy(
  rt: Runtime,
  places: readonly (string | undefined)[],
  name: string,
  bytes: Uint8Array,
): Promise<PrivateCopy | { readonly failed: readonly string[] }> {
  const fs = await nodeFs();
  const failed: string[] = [];
  for (const place of places) {
    const where = place ?? "the temporary folder";
    let dir: string;
    try {
      dir = await rt.makePrivateDir(place);
    } catch (error) {
      failed.push(`${where} (${reasonOf(error)})`);
      continue;
    }
    let handle: Awaited<ReturnType<Fs["open"]>> | undefined;
    const remove = async () => {
      await handle?.close().catch(() => {});
      await fs.rm(dir, { recursive: true, force: true }).catch(() => {});
    };
    try {
      const made = await fs.lstat(dir);
      // mkdtemp creates 0700; a folder others may enter could have its file swapped before the load.
      if (!made.isDirectory() || (rt.os !== "windows" && (made.mode & 0o077) !== 0)) {
        throw new Error(`the new folder ${dir} has mode ${(made.mode & 0o777).toString(8)}, not 700`);
      }
      const file = `${dir}/${name}`;
      handle = await fs.open(file, "wx", 0o700);
      await handle.writeFile(bytes);
      // The descriptor names the inode written here even if the folder itself is renamed away
      // (possible where others may write to a folder above it).
      const loadPath = rt.os === "linux" ? `/proc/self/fd/${handle.fd}` : file;
      return { loadPath, file, remove };
    } catch (error) {
      await remove();
      failed.push(`${where} (${reasonOf(error)})`);
    }
  }
  return { failed };
}

/** Removes private copies older than a day from `dir`: on Windows a loaded DLL cannot be deleted,
 * so each run's copy stays behind until a later run finds it unused. Best effort. */
export async function sweepPrivateCopies(dir: string): Promise<void> {
  const fs = await nodeFs();
  const dayAgo = Date.now() - 86_400_000;
  try {
    for (const entry of await fs.readdir(dir)) {
      if (!entry.startsWith(".dlpack-load-")) continue;
      const stat = await fs.lstat(`${dir}/${entry}`).catch(() => undefined);
      if (stat?.isDirectory() && stat.mtimeMs < dayAgo) {
        await fs.rm(`${dir}/${entry}`, { recursive: true, force: true }).catch(() => {});
      }
    }
  } catch {
    // an unreadable folder keeps its leftovers
  }
}
