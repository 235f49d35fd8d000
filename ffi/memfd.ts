/**
 * Verified bytes loaded without writing a file (Linux): a memfd holding them, sealed against every
 * change, is loaded through its descriptor. Nobody, this user included, can alter what was checked,
 * and a cached run needs no write permission. Elsewhere, or where the C library has no
 * `memfd_create` (glibc before 2.27), the caller writes a private copy instead.
 * @module
 */
import type { LoadableFile } from "./files.ts";
import type { Runtime } from "./types.ts";

const LIBC = {
  memfd_create: { args: ["buffer", "u32"], returns: "i32", optional: true },
  write: { args: ["i32", "buffer", "usize"], returns: "usize" },
  fcntl: { args: ["i32", "i32", "i32"], returns: "i32" },
  close: { args: ["i32"], returns: "i32" },
} as const;

const MFD_CLOEXEC = 1;
const MFD_ALLOW_SEALING = 2;
const F_ADD_SEALS = 1033;
/** F_SEAL_SEAL | F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_WRITE: the contents are fixed for good. */
const ALL_SEALS = 1 | 2 | 4 | 8;

/** A sealed memory file holding `bytes` (named `name` in /proc/self/maps), or why there is none. */
export function sealedMemoryFile(rt: Runtime, name: string, bytes: Uint8Array): LoadableFile | string {
  if (rt.os !== "linux") return "memory files are Linux's";
  let libc;
  try {
    libc = rt.open("libc.so.6", LIBC);
  } catch (error) {
    return `the C library could not be opened (${(error as Error)?.message ?? String(error)})`;
  }
  const { memfd_create, write, fcntl, close } = libc.symbols;
  const fd = memfd_create === undefined
    ? -1
    : memfd_create(new TextEncoder().encode(`${name}\0`), MFD_CLOEXEC | MFD_ALLOW_SEALING);
  if (fd < 0) {
    libc.close();
    return memfd_create === undefined ? "the C library has no memfd_create" : "memfd_create failed";
  }
  // Kept open until the file is let go: the handle's functions close the descriptor.
  const remove = () => {
    close(fd);
    libc.close();
  };
  let at = 0;
  while (at < bytes.length) {
    const written = write(fd, bytes.subarray(at), bytes.length - at);
    // A failed write returns -1, which the unsigned result shows as a huge count.
    if (written <= 0 || written > bytes.length - at) break;
    at += written;
  }
  if (at !== bytes.length || fcntl(fd, F_ADD_SEALS, ALL_SEALS) !== 0) {
    remove();
    return "the memory file could not be written and sealed";
  }
  const loadPath = `/proc/self/fd/${fd}`;
  return { loadPath, file: loadPath, remove };
}
