/**
 * The file calls of the tensors-on-disk entry. A path is checked here (a string, no NUL byte, a
 * UTF-8 form, and in Deno the permission to read or write it: native code does not go through
 * Deno's permission checks, so this module asks first) and handed to native code (zig/src/c_io.zig),
 * which maps the file or reads it into library memory, or writes one atomically. Whatever native
 * code reports becomes a `DLPackError` ("file") that names the path and says what is wrong.
 * @module
 */
import { core, runtime } from "../../ffi/mod.ts";
import { DLPackError, shown } from "../facts/errors.ts";
import { FileKind, IoCall, IoFailure, IoOption, IoStatus, PATH_MAX_BYTES } from "../facts/abi.ts";
import { isSafeInt, typedArrayLength } from "../facts/intrinsics.ts";
import { MAX_EXACT } from "../facts/layout.ts";
import { F64, I32, I64, scratch } from "../native/scratch.ts";
import { held } from "../native/journal.ts";
import { makeOwner, type Owner } from "../native/shares.ts";
import { hasNul, utf8 } from "./utf8.ts";
import { quoted } from "./json.ts";

/** A path that passed the checks: as given (for messages) and as the bytes native code takes. */
export interface CheckedPath {
  readonly text: string;
  readonly bytes: Uint8Array<ArrayBuffer>;
}

/** Checks a path argument: a non-empty string without NUL and with a UTF-8 form, shorter than the
 * OS allows. Throws "argument" otherwise. */
export function checkPath(path: unknown, what = "path"): CheckedPath {
  if (typeof path !== "string") throw new DLPackError("argument", `${what} must be a string, got ${shown(path)}`);
  if (path.length === 0) throw new DLPackError("argument", `${what} is empty`);
  const bytes = utf8(path);
  if (bytes === undefined) {
    throw new DLPackError("argument", `${what} ${quoted(path)} holds a lone surrogate (no UTF-8 form)`);
  }
  if (hasNul(bytes)) throw new DLPackError("argument", `${what} ${quoted(path)} holds a NUL byte`);
  if (typedArrayLength(bytes) >= PATH_MAX_BYTES) {
    throw new DLPackError(
      "argument",
      `${what} has ${typedArrayLength(bytes)} bytes; paths have fewer than ${PATH_MAX_BYTES}`,
    );
  }
  return { text: path, bytes };
}

/** Refuses what Deno's permissions do not grant (always granted in Bun, which has none). */
function checkPermission(kind: "read" | "write", path: CheckedPath): void {
  if (runtime().granted(kind, path.text)) return;
  throw new DLPackError(
    "file",
    `${quoted(path.text)}: Deno denies ${kind === "read" ? "reading" : "writing"} it. Run with ` +
      `--allow-${kind}=${path.text} (or --allow-${kind}).`,
  );
}

/** How to bring a file into memory. */
interface MapOptions {
  /** A private mapping, readable and writable (copy on write): the file never changes. */
  readonly writable: boolean;
  /** Read into library memory instead of mapping. */
  readonly copy: boolean;
  /** Files of more bytes are refused. */
  readonly maxBytes: number;
}

/** A file in memory: the owner record, the share of it the caller holds, its first byte, its size. */
export interface FileMemory {
  readonly owner: number;
  readonly share: Owner;
  readonly address: number;
  readonly bytes: number;
}

/** Maps the regular file at `path` (or reads it into library memory). The caller holds the
 * returned share: release it with {@link releaseFile}, or keep it. */
export function mapFile(path: CheckedPath, options: MapOptions): FileMemory {
  checkPermission("read", path);
  const flags = (options.writable ? IoOption.writable : 0) | (options.copy ? IoOption.copy : 0);
  const status = core().dlpk_io_map(path.bytes, typedArrayLength(path.bytes), flags, options.maxBytes, scratch.at);
  if (status !== 0) throw fileError(status, path.text, options.maxBytes);
  // The record is journaled until the share holds it (an exception before leaves it to the journal).
  const owner = scratch.owner();
  const file = {
    owner,
    share: makeOwner(owner, undefined),
    address: scratch.address(),
    bytes: scratch.f64[F64.nbytes],
  };
  held();
  return file;
}

/** Gives back the caller's share of {@link mapFile} (the mapping lives on in the views). */
export function releaseFile(file: FileMemory): void {
  file.share.release();
}

/** Checks a `maxBytes` option: a whole number of bytes (default 2^53). */
export function checkMaxBytes(value: unknown): number {
  if (value === undefined) return MAX_EXACT;
  if (!isSafeInt(value) || value < 0) {
    throw new DLPackError("argument", `maxBytes must be a whole number of bytes, got ${shown(value)}`);
  }
  return value;
}

/**
 * Writes the file at `path` atomically: `body` appends the bytes through `write(address, bytes)`
 * (native memory the caller keeps alive for the call) to a new temporary file in the same folder,
 * which is flushed and renamed over `path` when `body` returns. When `body` throws, or any call
 * fails, the temporary file is removed and `path` is left as it was.
 */
export function writeFileAtomically(
  path: CheckedPath,
  body: (write: (address: number, bytes: number) => void) => void,
): void {
  checkPermission("write", path);
  const lib = core();
  const status = lib.dlpk_io_create(path.bytes, typedArrayLength(path.bytes), scratch.at);
  if (status !== 0) throw fileError(status, path.text, 0, "write");
  const writer = scratch.address();
  let done = false;
  try {
    body((address, bytes) => {
      const written = lib.dlpk_io_write(writer, address, bytes, scratch.at);
      if (written !== 0) throw fileError(written, path.text, 0, "write");
    });
    done = true;
    const finished = lib.dlpk_io_finish(writer, 1, scratch.at);
    if (finished !== 0) throw fileError(finished, path.text, 0, "write");
  } finally {
    if (!done) lib.dlpk_io_finish(writer, 0, scratch.at);
  }
}

const KINDS = {
  __proto__: null,
  [FileKind.directory]: "a folder",
  [FileKind.fifo]: "a FIFO (named pipe)",
  [FileKind.socket]: "a socket",
  [FileKind.characterDevice]: "a character device",
  [FileKind.blockDevice]: "a block device",
  [FileKind.symbolicLink]: "a symbolic link",
} as unknown as Record<number, string | undefined>;

const FAILURES = {
  __proto__: null,
  [IoFailure.notFound]: "no such file or folder",
  [IoFailure.access]: "the file system refuses access",
  [IoFailure.isDirectory]: "it is a folder",
  [IoFailure.notDirectory]: "a folder on its path is a file",
  [IoFailure.loop]: "too many symbolic links on its path",
  [IoFailure.nameTooLong]: "the name is too long",
  [IoFailure.noSpace]: "no space left (disk full or quota)",
  [IoFailure.readOnly]: "the file system is read-only",
  [IoFailure.exists]: "the name is taken",
  [IoFailure.busy]: "the file is busy",
  [IoFailure.tooManyFiles]: "too many open files",
  [IoFailure.outOfMemory]: "out of memory",
  [IoFailure.io]: "an I/O error",
  [IoFailure.notSupported]: "the file system does not support it",
  [IoFailure.crossDevice]: "it crosses file systems",
  [IoFailure.tooLarge]: "the file is too large",
  [IoFailure.interrupted]: "interrupted",
} as unknown as Record<number, string | undefined>;

const CALLS = {
  __proto__: null,
  [IoCall.stat]: "looking it up",
  [IoCall.open]: "opening it",
  [IoCall.fstat]: "looking at it",
  [IoCall.mmap]: "mapping it",
  [IoCall.read]: "reading it",
  [IoCall.create]: "creating its temporary file",
  [IoCall.write]: "writing it",
  [IoCall.sync]: "flushing it to the disk",
  [IoCall.rename]: "renaming its temporary file over it",
  [IoCall.close]: "closing it",
} as unknown as Record<number, string | undefined>;

/** The error for a native file status the call just wrote into the scratch. */
function fileError(status: number, path: string, limit: number, action: "read" | "write" = "read"): DLPackError {
  const found = Number(scratch.i64[I64.found]);
  const detail = Number(scratch.i64[I64.limit]);
  const name = quoted(path);
  switch (status) {
    case IoStatus.os: {
      const call = CALLS[scratch.i32[I32.dim]] ?? "using it";
      const why = FAILURES[found] ?? "an error";
      return new DLPackError("file", `${name}: ${why} while ${call}${detail !== 0 ? ` (errno ${detail})` : ""}`);
    }
    case IoStatus.notRegular:
      return new DLPackError("file", `${name}: it is ${KINDS[found] ?? "no regular file"}, not a regular file`);
    case IoStatus.tooLarge:
      return new DLPackError("file", `${name}: it has ${found} bytes, more than maxBytes (${limit})`);
    case IoStatus.empty:
      return new DLPackError("file", `${name}: the file is empty (0 bytes)`);
    case IoStatus.changed:
      return new DLPackError(
        "file",
        `${name}: the file changed size while it was read (${detail} bytes when opened, ${found} read)`,
      );
    case IoStatus.replaced:
      return new DLPackError("file", `${name}: the file was replaced while it was being opened`);
    case IoStatus.outOfMemory:
      return new DLPackError(
        "file",
        `${name}: out of memory ${action === "read" ? `reading ${found} bytes` : "writing it"}`,
      );
    case IoStatus.unsupported:
      return new DLPackError("file", `${name}: files are not mapped or written on ${runtime().os} by this library`);
    case IoStatus.badPath:
      return new DLPackError("argument", `${name}: the path is empty, holds a NUL byte or is too long`);
  }
  return new DLPackError("file", `${name}: the native file call failed with status ${status}`);
}
