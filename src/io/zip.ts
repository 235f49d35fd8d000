/**
 * The zip container of numpy's .npz files, as pure functions over bytes (no I/O): reading the
 * central directory of a file and checking every member against it, and writing the records of
 * an archive `np.load` reads.
 *
 * A zip file ends with the end-of-central-directory record (and before it, for archives beyond
 * 65,535 members or 4 GiB, the zip64 record and its locator); the central directory lists each
 * member's name, method, CRC-32, sizes and the offset of its local header, which repeats the name
 * and precedes the member's bytes. The central directory is what is trusted here; each local
 * header must agree with it, and no member may overlap another or the directory (two names over
 * the same bytes would be two views aliasing one another).
 * @module
 */
import { DLPackError } from "../facts/errors.ts";
import { floor, freeze, objectSlots } from "../facts/intrinsics.ts";
import { MAX_EXACT } from "../facts/layout.ts";
import { quoted } from "./json.ts";

const EOCD_SIGNATURE = 0x06054b50;
const EOCD_BYTES = 22;
const ZIP64_LOCATOR_SIGNATURE = 0x07064b50;
const ZIP64_LOCATOR_BYTES = 20;
const ZIP64_EOCD_SIGNATURE = 0x06064b50;
const ZIP64_EOCD_BYTES = 56;
const CENTRAL_SIGNATURE = 0x02014b50;
const CENTRAL_BYTES = 46;
const LOCAL_SIGNATURE = 0x04034b50;
const LOCAL_BYTES = 30;
const ZIP64_EXTRA = 0x0001;
/** The extra field that pads a local header so the member's bytes start aligned (zipalign's id). */
const PADDING_EXTRA = 0xd935;
const COMMENT_MAX = 0xffff;
const U16_MAX = 0xffff;
const U32_MAX = 0xffff_ffff;
/** Members read here at most: a directory entry is at least 46 bytes, so this bounds it to 1 GiB. */
const ZIP_MEMBERS_MAX = 1 << 24;
const FLAG_ENCRYPTED = 0x0001;
const FLAG_STRONG_ENCRYPTION = 0x0040;
const FLAG_UTF8 = 0x0800;
const FLAG_MASKED_HEADER = 0x2000;

/** How a member's bytes are stored. */
export const STORED = 0;
export const DEFLATED = 8;

/** One member, checked against the directory and its local header. */
export interface ZipMember {
  readonly name: string;
  readonly method: typeof STORED | typeof DEFLATED;
  readonly crc32: number;
  /** Bytes in the file, and bytes once inflated (equal for a stored member). */
  readonly compressedSize: number;
  readonly size: number;
  /** Where its bytes start in the file. */
  readonly dataStart: number;
}

/** Reads `length` bytes of the file from `offset` into a fresh array (the caller has checked the range). */
type ReadBytes = (offset: number, length: number) => Uint8Array;

const u16 = (b: Uint8Array, at: number): number => b[at]! | (b[at + 1]! << 8);
const u32 = (b: Uint8Array, at: number): number =>
  (b[at]! | (b[at + 1]! << 8) | (b[at + 2]! << 16)) + b[at + 3]! * 0x100_0000;

/** A little-endian u64 as a number, refused beyond 2^53 - 1 (no file here is that large). */
function u64(b: Uint8Array, at: number, where: string, what: string): number {
  const high = u32(b, at + 4);
  if (high > 0x1f_ffff) throw new DLPackError("file", `${where}: the ${what} ${high} * 2^32 is absurd`);
  return high * 0x1_0000_0000 + u32(b, at);
}

function bad(where: string, what: string): DLPackError {
  return new DLPackError("file", `${where}: ${what}`);
}

interface Directory {
  readonly offset: number;
  readonly bytes: number;
  readonly count: number;
  /** Where the records after the directory start: no member may reach past it. */
  readonly end: number;
}

/** Finds the end-of-central-directory record: the last 22 bytes whose comment length reaches exactly the file's end. */
function findEnd(read: ReadBytes, fileBytes: number, where: string): number {
  if (fileBytes < EOCD_BYTES) throw bad(where, `${fileBytes} bytes is too short for a zip file`);
  const window = fileBytes < EOCD_BYTES + COMMENT_MAX ? fileBytes : EOCD_BYTES + COMMENT_MAX;
  const tail = read(fileBytes - window, window);
  for (let at = window - EOCD_BYTES; at >= 0; at--) {
    if (u32(tail, at) === EOCD_SIGNATURE && at + EOCD_BYTES + u16(tail, at + 20) === window) {
      return fileBytes - window + at;
    }
  }
  throw bad(where, "not a zip file (no end-of-central-directory record)");
}

/** The directory's place and size from the zip64 records before the end record at `end`. */
function zip64Directory(read: ReadBytes, end: number, where: string): Directory {
  if (end < ZIP64_LOCATOR_BYTES + ZIP64_EOCD_BYTES) throw bad(where, "the zip64 records are missing");
  const locator = read(end - ZIP64_LOCATOR_BYTES, ZIP64_LOCATOR_BYTES);
  if (u32(locator, 0) !== ZIP64_LOCATOR_SIGNATURE) throw bad(where, "the zip64 locator is missing");
  if (u32(locator, 4) !== 0 || u32(locator, 16) !== 1) throw bad(where, "archives of several disks are not read");
  const at = u64(locator, 8, where, "zip64 record offset");
  if (at + ZIP64_EOCD_BYTES > end - ZIP64_LOCATOR_BYTES) throw bad(where, "the zip64 record is beyond its locator");
  const record = read(at, ZIP64_EOCD_BYTES);
  if (u32(record, 0) !== ZIP64_EOCD_SIGNATURE) throw bad(where, "the zip64 end record is missing");
  if (u32(record, 16) !== 0 || u32(record, 20) !== 0) throw bad(where, "archives of several disks are not read");
  const onDisk = u64(record, 24, where, "member count");
  const count = u64(record, 32, where, "member count");
  if (onDisk !== count) throw bad(where, "archives of several disks are not read");
  return {
    count,
    bytes: u64(record, 40, where, "directory size"),
    offset: u64(record, 48, where, "directory offset"),
    end: at,
  };
}

/** Where the central directory is, how large, and how many members it lists. */
function directoryOf(read: ReadBytes, fileBytes: number, where: string): Directory {
  const end = findEnd(read, fileBytes, where);
  const record = read(end, EOCD_BYTES);
  if (u16(record, 4) !== 0 || u16(record, 6) !== 0 || u16(record, 8) !== u16(record, 10)) {
    throw bad(where, "archives of several disks are not read");
  }
  const count = u16(record, 10);
  const bytes = u32(record, 12);
  const offset = u32(record, 16);
  const dir = count === U16_MAX || bytes === U32_MAX || offset === U32_MAX
    ? zip64Directory(read, end, where)
    : { count, bytes, offset, end };
  if (dir.count > ZIP_MEMBERS_MAX) {
    throw bad(where, `${dir.count} members are more than the ${ZIP_MEMBERS_MAX} read here`);
  }
  if (dir.offset + dir.bytes > dir.end) {
    throw bad(where, `the central directory (${dir.bytes} bytes at ${dir.offset}) is beyond its end record`);
  }
  if (dir.count * CENTRAL_BYTES > dir.bytes) {
    throw bad(where, `${dir.count} members do not fit in a central directory of ${dir.bytes} bytes`);
  }
  return dir;
}

/** Sizes and offset of a directory entry, the saturated ones read from its zip64 extra field. */
function zip64Fields(
  extra: Uint8Array,
  fields: [size: number, compressed: number, offset: number],
  name: string,
  where: string,
): void {
  for (let at = 0; at + 4 <= extra.length;) {
    const id = u16(extra, at);
    const length = u16(extra, at + 2);
    if (at + 4 + length > extra.length) throw bad(where, `member ${name}: an extra field runs past its record`);
    if (id === ZIP64_EXTRA) {
      let next = at + 4;
      for (let i = 0; i < 3; i++) {
        if (fields[i] !== U32_MAX) continue;
        if (next + 8 > at + 4 + length) throw bad(where, `member ${name}: its zip64 field is too short`);
        fields[i] = u64(extra, next, where, "member size");
        next += 8;
      }
      return;
    }
    at += 4 + length;
  }
  for (let i = 0; i < 3; i++) if (fields[i] === U32_MAX) throw bad(where, `member ${name}: its zip64 field is missing`);
}

// Captured at load: a caller who replaces them later changes nothing here.
const ReflectApply = Reflect.apply;
const arraySort = Array.prototype.sort;
const utf8Decoder = new TextDecoder("utf-8", { fatal: true });
const decode = TextDecoder.prototype.decode;

/** `n` bytes of `b` from `at`, copied into a fresh array (no species lookup). */
function copyBytes(b: Uint8Array, at: number, n: number): Uint8Array {
  const out = new Uint8Array(n);
  for (let i = 0; i < n; i++) out[i] = b[at + i]!;
  return out;
}

/** A member's name: UTF-8 where the entry says so, else ASCII (other legacy encodings are refused). */
function nameOf(bytes: Uint8Array, flags: number, index: number, where: string): string {
  if ((flags & FLAG_UTF8) === 0) {
    for (let i = 0; i < bytes.length; i++) {
      if (bytes[i]! > 0x7f) throw bad(where, `member ${index}'s name is neither ASCII nor marked UTF-8`);
    }
  }
  try {
    return ReflectApply(decode, utf8Decoder, [bytes]) as string;
  } catch {
    throw bad(where, `member ${index}'s name is not UTF-8`);
  }
}

interface Entry {
  name: string;
  nameBytes: Uint8Array;
  method: number;
  crc32: number;
  size: number;
  compressedSize: number;
  localOffset: number;
}

/** The directory entry at `at` of `dir` (bytes of the whole directory); returns its length. */
function readEntry(dir: Uint8Array, at: number, index: number, out: Entry[], where: string): number {
  if (at + CENTRAL_BYTES > dir.length || u32(dir, at) !== CENTRAL_SIGNATURE) {
    throw bad(where, `the central directory's entry ${index} is not one`);
  }
  const flags = u16(dir, at + 8);
  const nameLength = u16(dir, at + 28);
  const extraLength = u16(dir, at + 30);
  const length = CENTRAL_BYTES + nameLength + extraLength + u16(dir, at + 32);
  if (at + length > dir.length) throw bad(where, `the central directory's entry ${index} runs past it`);
  const nameBytes = copyBytes(dir, at + CENTRAL_BYTES, nameLength);
  const name = nameOf(nameBytes, flags, index, where);
  if ((flags & (FLAG_ENCRYPTED | FLAG_STRONG_ENCRYPTION | FLAG_MASKED_HEADER)) !== 0) {
    throw bad(where, `member ${quoted(name)} is encrypted`);
  }
  const method = u16(dir, at + 10);
  if (method !== STORED && method !== DEFLATED) {
    throw bad(where, `member ${quoted(name)} is compressed by method ${method} (stored and deflated are read)`);
  }
  const fields: [number, number, number] = [u32(dir, at + 24), u32(dir, at + 20), u32(dir, at + 42)];
  const extraAt = at + CENTRAL_BYTES + nameLength;
  zip64Fields(copyBytes(dir, extraAt, extraLength), fields, quoted(name), where);
  if (u16(dir, at + 34) !== 0) throw bad(where, "archives of several disks are not read");
  out[index] = {
    name,
    nameBytes,
    method,
    crc32: u32(dir, at + 16),
    size: fields[0],
    compressedSize: fields[1],
    localOffset: fields[2],
  };
  return length;
}

/** Where a member's bytes start, from its local header, which must agree with the directory. */
function dataStartOf(read: ReadBytes, e: Entry, dir: Directory, where: string): number {
  const name = quoted(e.name);
  if (e.localOffset + LOCAL_BYTES > dir.offset) throw bad(where, `member ${name}'s local header is beyond the members`);
  const local = read(e.localOffset, LOCAL_BYTES);
  if (u32(local, 0) !== LOCAL_SIGNATURE) throw bad(where, `member ${name} has no local header at ${e.localOffset}`);
  if ((u16(local, 6) & FLAG_ENCRYPTED) !== 0) throw bad(where, `member ${name} is encrypted`);
  if (u16(local, 8) !== e.method) throw bad(where, `member ${name}'s local header names another method`);
  const nameLength = u16(local, 26);
  const start = e.localOffset + LOCAL_BYTES + nameLength + u16(local, 28);
  if (nameLength !== e.nameBytes.length || start + e.compressedSize > dir.offset) {
    throw bad(where, `member ${name}'s bytes run past the members into the central directory`);
  }
  const localName = read(e.localOffset + LOCAL_BYTES, nameLength);
  for (let i = 0; i < nameLength; i++) {
    if (localName[i] !== e.nameBytes[i]) throw bad(where, `member ${name}'s local header names another member`);
  }
  return start;
}

/** Refuses members whose records or bytes overlap (in order of their local headers). */
function checkDisjoint(entries: Entry[], starts: number[], where: string): void {
  const order = objectSlots<number>(entries.length) as number[];
  for (let i = 0; i < order.length; i++) order[i] = i;
  ReflectApply(arraySort, order, [(a: number, b: number) => entries[a]!.localOffset - entries[b]!.localOffset]);
  for (let k = 1; k < order.length; k++) {
    const before = order[k - 1]!;
    const after = entries[order[k]!]!;
    if (starts[before]! + entries[before]!.compressedSize > after.localOffset) {
      throw bad(where, `members ${quoted(entries[before]!.name)} and ${quoted(after.name)} overlap`);
    }
  }
}

/**
 * Reads and checks the central directory of a zip file of `fileBytes` bytes and each member's
 * local header. Throws `DLPackError` ("file") naming `where` and what is wrong. Member sizes are
 * the directory's; a member's CRC-32 is for the reader of its bytes to check.
 */
export function readZip(read: ReadBytes, fileBytes: number, where: string): readonly ZipMember[] {
  const dir = directoryOf(read, fileBytes, where);
  const bytes = read(dir.offset, dir.bytes);
  const entries = objectSlots<Entry>(dir.count) as Entry[];
  let at = 0;
  for (let i = 0; i < dir.count; i++) at += readEntry(bytes, at, i, entries, where);
  const starts = objectSlots<number>(dir.count) as number[];
  for (let i = 0; i < dir.count; i++) {
    const e = entries[i]!;
    if (e.method === STORED && e.size !== e.compressedSize) {
      throw bad(where, `stored member ${quoted(e.name)} has ${e.compressedSize} bytes, not its size ${e.size}`);
    }
    starts[i] = dataStartOf(read, e, dir, where);
  }
  checkDisjoint(entries, starts, where);
  const members = objectSlots<ZipMember>(dir.count) as ZipMember[];
  for (let i = 0; i < dir.count; i++) {
    const e = entries[i]!;
    members[i] = freeze({
      name: e.name,
      method: e.method as typeof STORED | typeof DEFLATED,
      crc32: e.crc32,
      compressedSize: e.compressedSize,
      size: e.size,
      dataStart: starts[i]!,
    });
  }
  return freeze(members);
}

// --- writing --------------------------------------------------------------------------------

/** A member to write: its name's UTF-8 bytes, method, CRC-32 and sizes, known before its bytes. */
export interface MemberToWrite {
  readonly name: Uint8Array;
  readonly method: typeof STORED | typeof DEFLATED;
  readonly crc32: number;
  readonly compressedSize: number;
  readonly size: number;
}

/** Where each member's local header was written, kept for the central directory. */
export interface Written {
  readonly member: MemberToWrite;
  readonly offset: number;
}

class Bytes {
  readonly out: Uint8Array<ArrayBuffer>;
  at = 0;
  constructor(length: number) {
    this.out = new Uint8Array(new ArrayBuffer(length));
  }
  u16(v: number): void {
    this.out[this.at++] = v & 0xff;
    this.out[this.at++] = (v >>> 8) & 0xff;
  }
  u32(v: number): void {
    this.u16(v & 0xffff);
    this.u16(floor(v / 0x1_0000) & 0xffff);
  }
  u64(v: number): void {
    this.u32(v % 0x1_0000_0000);
    this.u32(floor(v / 0x1_0000_0000));
  }
  bytes(b: Uint8Array): void {
    this.out.set(b, this.at);
    this.at += b.length;
  }
}

const needsZip64 = (m: MemberToWrite, offset: number): boolean =>
  m.size >= U32_MAX || m.compressedSize >= U32_MAX || offset >= U32_MAX;

/**
 * The local header of a member whose header starts at `offset`, padded so that the member's
 * bytes start at a multiple of `align` in the file (a stored .npy member's data is then aligned
 * as numpy's own files align it).
 */
export function localHeader(m: MemberToWrite, offset: number, align: number): Uint8Array<ArrayBuffer> {
  if (offset > MAX_EXACT) throw new DLPackError("argument", "an archive beyond 2^53 bytes is not written");
  const zip64 = needsZip64(m, offset);
  const fixed = LOCAL_BYTES + m.name.length + (zip64 ? 20 : 0);
  const pad = align <= 1 ? 0 : (align - ((offset + fixed + 4) % align)) % align;
  const b = new Bytes(fixed + (align <= 1 ? 0 : 4 + pad));
  b.u32(LOCAL_SIGNATURE);
  b.u16(zip64 ? 45 : 20);
  b.u16(FLAG_UTF8);
  b.u16(m.method);
  b.u32(0x0021_0000); // 1980-01-01 00:00: the same bytes for the same arrays
  b.u32(m.crc32);
  b.u32(zip64 ? U32_MAX : m.compressedSize);
  b.u32(zip64 ? U32_MAX : m.size);
  b.u16(m.name.length);
  b.u16(b.out.length - fixed + (zip64 ? 20 : 0));
  b.bytes(m.name);
  if (zip64) {
    b.u16(ZIP64_EXTRA);
    b.u16(16);
    b.u64(m.size);
    b.u64(m.compressedSize);
  }
  if (align > 1) {
    b.u16(PADDING_EXTRA);
    b.u16(pad);
  }
  return b.out;
}

/** The central directory and end records after members written from offset 0 to `end`. */
export function centralDirectory(written: readonly Written[], end: number): Uint8Array<ArrayBuffer> {
  let bytes = 0;
  for (let i = 0; i < written.length; i++) {
    bytes += CENTRAL_BYTES + written[i]!.member.name.length +
      (needsZip64(written[i]!.member, written[i]!.offset) ? 28 : 0);
  }
  const zip64 = written.length >= U16_MAX || end >= U32_MAX || bytes >= U32_MAX || end + bytes >= U32_MAX;
  const b = new Bytes(bytes + (zip64 ? ZIP64_EOCD_BYTES + ZIP64_LOCATOR_BYTES : 0) + EOCD_BYTES);
  for (let i = 0; i < written.length; i++) {
    const { member: m, offset } = written[i]!;
    const wide = needsZip64(m, offset);
    b.u32(CENTRAL_SIGNATURE);
    b.u16(wide ? 45 : 20); // made by: MS-DOS attributes, the version needed
    b.u16(wide ? 45 : 20);
    b.u16(FLAG_UTF8);
    b.u16(m.method);
    b.u32(0x0021_0000);
    b.u32(m.crc32);
    b.u32(wide ? U32_MAX : m.compressedSize);
    b.u32(wide ? U32_MAX : m.size);
    b.u16(m.name.length);
    b.u16(wide ? 28 : 0);
    b.u32(0); // comment length, disk
    b.u16(0); // internal attributes
    b.u32(0); // external attributes
    b.u32(wide ? U32_MAX : offset);
    b.bytes(m.name);
    if (wide) {
      b.u16(ZIP64_EXTRA);
      b.u16(24);
      b.u64(m.size);
      b.u64(m.compressedSize);
      b.u64(offset);
    }
  }
  if (zip64) {
    b.u32(ZIP64_EOCD_SIGNATURE);
    b.u64(ZIP64_EOCD_BYTES - 12);
    b.u16(45);
    b.u16(45);
    b.u32(0);
    b.u32(0);
    b.u64(written.length);
    b.u64(written.length);
    b.u64(bytes);
    b.u64(end);
    b.u32(ZIP64_LOCATOR_SIGNATURE);
    b.u32(0);
    b.u64(end + bytes);
    b.u32(1);
  }
  b.u32(EOCD_SIGNATURE);
  b.u32(0);
  b.u16(zip64 ? U16_MAX : written.length);
  b.u16(zip64 ? U16_MAX : written.length);
  b.u32(zip64 ? U32_MAX : bytes);
  b.u32(zip64 ? U32_MAX : end);
  b.u16(0);
  return b.out;
}
