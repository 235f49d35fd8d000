/**
 * Loading tensors from disk: safetensors files (all at once, or lazily) and .npy files as views
 * over one mapping of the file (or over library memory the file was read into, with `copy`). The
 * whole header is read and checked before the first view exists; a file that fails a check is
 * unmapped again and refused with a `DLPackError` ("file") naming it and what is wrong.
 * @module
 */
import { runtime } from "../../ffi/mod.ts";
import { DLPackError, optionalBoolean, optionsObject, shown } from "../facts/errors.ts";
import { type DType, dtypeInfo } from "../facts/dtypes.ts";
import { detach, freeze, objectSlots, setElements, slots, typedArrayLength } from "../facts/intrinsics.ts";
import { cStrides } from "../facts/layout.ts";
import type { Owner } from "../native/shares.ts";
import type { BufferView } from "../view/view.ts";
import { disposeView } from "../view/view.ts";
import { type CheckedPath, checkMaxBytes, checkPath, type FileMemory, mapFile, releaseFile } from "./files.ts";
import { headerLength, parseHeader, PREFIX_BYTES, type SafetensorsHeader, type TensorEntry } from "./safetensors.ts";
import { npyDataStart, type NpyHeader, parseNpyHeader } from "./npy.ts";
import { viewOverBytes, viewOverMapping } from "./views.ts";
import { DEFLATED, readZip, type ZipMember } from "./zip.ts";
import { crc32 as zlibCrc32, inflateRawSync } from "node:zlib";
import { quoted } from "./json.ts";
import { compareBytes, utf8 } from "./utf8.ts";

/** Options of the loaders. */
export interface LoadOptions {
  /** Views that may be written: the file is mapped privately (copy on write), so writes change this
   * process's copy of the pages and never the file. Default false: views are read-only. */
  readonly writable?: boolean | undefined;
  /** Read the file into library memory instead of mapping it: costs the read and the memory, and
   * keeps the views readable whatever happens to the file later (a mapped file that another
   * process truncates raises SIGBUS on access). Default false. */
  readonly copy?: boolean | undefined;
  /** Refuse files of more bytes than this (default: no limit below 2^53). */
  readonly maxBytes?: number | undefined;
}

// Captured at load: a caller who replaces them later changes nothing here.
const ReflectApply = Reflect.apply;
const stringSlice = String.prototype.slice;
const charCodeAt = String.prototype.charCodeAt;
const inflate = (bytes: Uint8Array, size: number): Uint8Array => inflateRawSync(bytes, { maxOutputLength: size });

interface Read {
  readonly path: CheckedPath;
  readonly writable: boolean;
  readonly file: FileMemory;
}

/** Reads the options once, checks the path, maps the file. */
function open(path: unknown, opts: LoadOptions | undefined, what: string): Read {
  const o = optionsObject(opts, `${what} options`);
  const writable = optionalBoolean(o.writable, "writable") ?? false;
  const copy = optionalBoolean(o.copy, "copy") ?? false;
  const maxBytes = checkMaxBytes(o.maxBytes);
  const checked = checkPath(path);
  return { path: checked, writable, file: mapFile(checked, { writable, copy, maxBytes }) };
}

/** `bytes` bytes of the file from `from`, as a Uint8Array over its memory (detach it after use). */
function fileBytes(file: FileMemory, bytes: number, from = 0): Uint8Array<ArrayBuffer> {
  return bytes === 0 ? new Uint8Array(0) : new Uint8Array(runtime().arrayBuffer(file.address + from, bytes));
}

/** A header read from the file's memory in two steps: `length(prefix)` says from the first
 * `prefixBytes` bytes how many the header needs, `parse(bytes)` reads and checks them. The arrays
 * over the file's memory are detached afterwards (none may outlive the call). */
function readHeader<T>(
  file: FileMemory,
  prefixBytes: number,
  length: (prefix: Uint8Array) => number,
  parse: (bytes: Uint8Array) => T,
  from = 0,
  available = file.bytes,
): T {
  const prefix = fileBytes(file, available < prefixBytes ? available : prefixBytes, from);
  try {
    const header = fileBytes(file, length(prefix), from);
    try {
      return parse(header);
    } finally {
      detach(header.buffer);
    }
  } finally {
    detach(prefix.buffer);
  }
}

/** The header of a safetensors file in memory, checked. */
function safetensorsHeader(file: FileMemory, where: string): SafetensorsHeader {
  return readHeader(
    file,
    PREFIX_BYTES,
    (prefix) => PREFIX_BYTES + headerLength(prefix, file.bytes, where),
    (bytes) => parseHeader(bytes, file.bytes, where),
  );
}

/** A view of one tensor of a checked header (C order, as the format defines). */
function tensorView(file: FileMemory, header: SafetensorsHeader, t: TensorEntry, writable: boolean): BufferView {
  const shape = slots(t.shape.length);
  for (let d = 0; d < shape.length; d++) shape[d] = t.shape[d]!;
  const address = file.address + header.dataStart + t.begin;
  return viewOverMapping(file.owner, address, t.dtype, shape, cStrides(shape), t.size, !writable, "safetensors");
}

/** What {@link loadSafetensors} returns: every tensor of the file as a view over one mapping. */
export interface SafetensorsContents {
  /** name -> view, in the order of the file's data (a prototype-less record: any name works). */
  readonly tensors: Readonly<Record<string, BufferView>>;
  /** The header's `__metadata__` (strings), or null when the file has none. */
  readonly metadata: Readonly<Record<string, string>> | null;
  /** Disposes every view in `tensors` (views derived from them and exports live on). */
  dispose(): void;
  /** Same as `dispose()`, for `using`. */
  [Symbol.dispose](): void;
}

/**
 * Maps a safetensors file and returns a view of each of its tensors, every one holding a share of
 * the mapping: the file is unmapped when the last view, derived view and export of them is
 * released (`stats().mappings` counts it). Views are read-only unless `opts.writable`; C-order,
 * little-endian, of every dtype the format has (F64 .. F8_E5M2, BF16, BOOL, the integers, F4 and
 * F6 packed). A file that is not the format (see docs/io.md for each check) is refused before any
 * view exists.
 */
export function loadSafetensors(path: string, opts?: LoadOptions): SafetensorsContents {
  const { path: checked, writable, file } = open(path, opts, "loadSafetensors");
  const where = quoted(checked.text);
  try {
    const header = safetensorsHeader(file, where);
    const tensors = { __proto__: null } as unknown as Record<string, BufferView>;
    const views = objectSlots<BufferView>(header.tensors.length) as BufferView[];
    let made = 0;
    try {
      for (; made < header.tensors.length; made++) {
        const t = header.tensors[made]!;
        views[made] = tensorView(file, header, t, writable);
        tensors[t.name] = views[made]!;
      }
    } catch (error) {
      for (let i = 0; i < made; i++) disposeView(views[i]!);
      throw error;
    }
    const dispose = () => {
      for (let i = 0; i < views.length; i++) disposeView(views[i]!);
    };
    return freeze({ tensors: freeze(tensors), metadata: header.metadata, dispose, [Symbol.dispose]: dispose });
  } finally {
    releaseFile(file);
  }
}

/** Only {@link openSafetensors} makes a {@link SafetensorsFile}: its memory must be a mapping. */
const CONSTRUCTING = Symbol("openSafetensors");

/** What {@link SafetensorsFile.info} says about a tensor without making a view of it. */
export interface TensorInfo {
  /** The library's name of its dtype. */
  readonly dtype: DType;
  /** Its extents (C order, as the format defines). */
  readonly shape: readonly number[];
  /** Its byte range in the file's data section (the format's `data_offsets`). */
  readonly dataOffsets: readonly [number, number];
}

/**
 * A safetensors file mapped once, whose tensors become views on demand (the lazy form, like the
 * reference's `safe_open`, for files of thousands of tensors): the header is read and checked
 * when it is opened, `get(name)` makes a view. Holds a share of the mapping until `dispose()`;
 * views it made hold their own.
 */
export class SafetensorsFile {
  /** The path it was opened by. */
  readonly path: string;
  /** The header's `__metadata__` (strings), or null when the file has none. */
  readonly metadata: Readonly<Record<string, string>> | null;
  #share: Owner;
  #file: FileMemory;
  #header: SafetensorsHeader;
  #byName: Record<string, TensorEntry | undefined>;
  #writable: boolean;

  /** @ignore Use {@link openSafetensors}: anything else is refused. */
  constructor(token: symbol, path: string, file: FileMemory, header: SafetensorsHeader, writable: boolean) {
    if (token !== CONSTRUCTING) throw new DLPackError("argument", "use openSafetensors(path) to open a file");
    this.path = path;
    this.metadata = header.metadata;
    this.#file = file;
    this.#header = header;
    this.#writable = writable;
    const byName = { __proto__: null } as unknown as Record<string, TensorEntry | undefined>;
    for (let i = 0; i < header.tensors.length; i++) byName[header.tensors[i]!.name] = header.tensors[i];
    this.#byName = byName;
    // The file's share (released by `dispose`, or by the GC backstop), handed over by the caller.
    this.#share = file.share;
  }

  /** The tensors' names, sorted bytewise (as `safe_open(...).keys()`). */
  keys(): string[] {
    const tensors = this.#header.tensors;
    const names = objectSlots<string>(tensors.length) as string[];
    const bytes = objectSlots<Uint8Array>(tensors.length) as Uint8Array[];
    for (let i = 0; i < tensors.length; i++) {
      names[i] = tensors[i]!.name;
      bytes[i] = utf8(names[i]!)!;
    }
    // Insertion sort by UTF-8 bytes, carrying the names along.
    for (let i = 1; i < names.length; i++) {
      const name = names[i]!;
      const key = bytes[i]!;
      let j = i;
      for (; j > 0 && compareBytes(bytes[j - 1]!, key) > 0; j--) {
        names[j] = names[j - 1]!;
        bytes[j] = bytes[j - 1]!;
      }
      names[j] = name;
      bytes[j] = key;
    }
    return names;
  }

  /** How many tensors the file holds. */
  get size(): number {
    return this.#header.tensors.length;
  }

  /** Whether the file holds a tensor of that name. */
  has(name: string): boolean {
    return typeof name === "string" && this.#byName[name] !== undefined;
  }

  /** A tensor's dtype, shape and byte range (no view made), or undefined. */
  info(name: string): TensorInfo | undefined {
    const t = typeof name === "string" ? this.#byName[name] : undefined;
    if (t === undefined) return undefined;
    const shape = slots(t.shape.length);
    for (let d = 0; d < shape.length; d++) shape[d] = t.shape[d]!;
    return freeze({ dtype: t.dtype, shape: freeze(shape), dataOffsets: freeze([t.begin, t.end] as const) });
  }

  /** A new view of the tensor `name` (dispose it when done); throws "argument" when there is none. */
  get(name: string): BufferView {
    if (this.#share.released) throw new DLPackError("disposed", `${quoted(this.path)} was disposed`);
    const t = typeof name === "string" ? this.#byName[name] : undefined;
    if (t === undefined) {
      const shownName = typeof name === "string" ? quoted(name) : shown(name);
      throw new DLPackError("argument", `${quoted(this.path)} holds no tensor ${shownName}`);
    }
    return tensorView(this.#file, this.#header, t, this.#writable);
  }

  /** Releases this object's share of the mapping (views it made stay valid). Idempotent. */
  dispose(): void {
    this.#share.release();
  }

  /** Same as {@link SafetensorsFile.dispose}, for `using`. */
  [Symbol.dispose](): void {
    this.dispose();
  }
}

/** Maps a safetensors file and checks its header; its tensors become views on demand
 * ({@link SafetensorsFile.get}). Options as {@link loadSafetensors}'s. */
export function openSafetensors(path: string, opts?: LoadOptions): SafetensorsFile {
  const { path: checked, writable, file } = open(path, opts, "openSafetensors");
  let handedOver = false;
  try {
    const header = safetensorsHeader(file, quoted(checked.text));
    const opened = new SafetensorsFile(CONSTRUCTING, checked.text, file, header, writable);
    handedOver = true;
    return opened;
  } finally {
    if (!handedOver) releaseFile(file);
  }
}

/** The header of a .npy file in memory (or of one `available` bytes long from `from`), checked. */
function npyHeader(file: FileMemory, where: string, from = 0, available = file.bytes): NpyHeader {
  return readHeader(
    file,
    12,
    (prefix) => npyDataStart(prefix, available, where),
    (bytes) => parseNpyHeader(bytes, available, where),
    from,
    available,
  );
}

/** Fortran-order (column-major) strides of a shape, in elements. */
function fStrides(shape: readonly number[]): number[] {
  const strides = slots(shape.length);
  let step = 1;
  for (let d = 0; d < shape.length; d++) {
    strides[d] = step;
    step *= shape[d]!;
  }
  return strides;
}

/**
 * Maps a .npy file (format versions 1.0 to 3.0) and returns a view of its array: C order, or a
 * Fortran-order file as an F-strided view (no copy), of numpy's bool, integer, float and complex
 * types. Options and lifetime as {@link loadSafetensors}'s. A file that is not the format is
 * refused before the view exists.
 */
export function loadNpy(path: string, opts?: LoadOptions): BufferView {
  const { path: checked, writable, file } = open(path, opts, "loadNpy");
  try {
    const header = npyHeader(file, quoted(checked.text));
    const [shape, strides] = npyLayout(header);
    return viewOverMapping(
      file.owner,
      file.address + header.dataStart,
      header.dtype,
      shape,
      strides,
      header.size,
      !writable,
      "npy",
    );
  } finally {
    releaseFile(file);
  }
}

/** The shape and strides (in elements) of a checked .npy header, as fresh arrays. */
function npyLayout(header: NpyHeader): [number[], number[]] {
  const shape = slots(header.shape.length);
  for (let d = 0; d < shape.length; d++) shape[d] = header.shape[d]!;
  return [shape, header.fortran ? fStrides(shape) : cStrides(shape)];
}

/** What {@link loadNpz} returns: every array of the archive as a view. */
export interface NpzContents {
  /** name -> view, the member's name without `.npy` (as `np.load`'s keys), in the archive's order
   * (a prototype-less record: any name works). */
  readonly arrays: Readonly<Record<string, BufferView>>;
  /** Disposes every view in `arrays` (views derived from them and exports live on). */
  dispose(): void;
  /** Same as `dispose()`, for `using`. */
  [Symbol.dispose](): void;
}

/** The alignment C gives an element of `dtype` (complex: its parts'). */
function alignmentOf(dtype: DType, bits: number): number {
  const bytes = bits / 8;
  return dtype === "complex64" || dtype === "complex128" ? bytes / 2 : bytes;
}

/** A stored member as a view over the file, or over a copy when its data is not aligned. */
function storedView(file: FileMemory, m: ZipMember, writable: boolean, where: string): BufferView {
  const header = npyHeader(file, where, m.dataStart, m.size);
  const [shape, strides] = npyLayout(header);
  const address = file.address + m.dataStart + header.dataStart;
  const bits = dtypeInfo(header.dtype).bits;
  if (address % alignmentOf(header.dtype, bits) === 0) {
    return viewOverMapping(file.owner, address, header.dtype, shape, strides, header.size, !writable, "npz");
  }
  const data = fileBytes(file, header.dataBytes, m.dataStart + header.dataStart);
  try {
    return viewOverBytes(data, 0, header.dataBytes, header.dtype, shape, strides, header.size, !writable, "npz");
  } finally {
    if (header.dataBytes > 0) detach(data.buffer);
  }
}

/** A deflated member inflated into library memory, its size and CRC-32 checked. */
function deflatedView(file: FileMemory, m: ZipMember, writable: boolean, where: string): BufferView {
  const compressed = fileBytes(file, m.compressedSize, m.dataStart);
  let bytes: Uint8Array;
  try {
    bytes = m.size === 0 ? new Uint8Array(0) : inflate(compressed, m.size);
  } catch {
    throw new DLPackError("file", `${where}: its deflated bytes are corrupt or inflate to more than ${m.size} bytes`);
  } finally {
    if (m.compressedSize > 0) detach(compressed.buffer);
  }
  if (typedArrayLength(bytes) !== m.size) {
    throw new DLPackError("file", `${where}: inflates to ${typedArrayLength(bytes)} bytes, not its size ${m.size}`);
  }
  if (zlibCrc32(bytes) !== m.crc32) throw new DLPackError("file", `${where}: its CRC-32 does not match its bytes`);
  const header = parseNpyHeader(bytes, m.size, where);
  const [shape, strides] = npyLayout(header);
  return viewOverBytes(
    bytes,
    header.dataStart,
    header.dataBytes,
    header.dtype,
    shape,
    strides,
    header.size,
    !writable,
    "npz",
  );
}

/** Whether a member's name is `<something>.npy`. */
function isNpyName(name: string): boolean {
  const n = name.length;
  if (n <= 4) return false;
  const tail = [0x2e, 0x6e, 0x70, 0x79]; // ".npy"
  for (let i = 0; i < 4; i++) if ((ReflectApply(charCodeAt, name, [n - 4 + i]) as number) !== tail[i]) return false;
  return true;
}

/** The arrays' names: each member a `.npy` file, no two of one name. */
function npzNames(members: readonly ZipMember[], where: string): string[] {
  const names = objectSlots<string>(members.length) as string[];
  const seen = { __proto__: null } as unknown as Record<string, true | undefined>;
  for (let i = 0; i < members.length; i++) {
    const name = members[i]!.name;
    const key = isNpyName(name) ? ReflectApply(stringSlice, name, [0, name.length - 4]) as string : undefined;
    if (key === undefined) {
      throw new DLPackError(
        "file",
        `${where}: member ${quoted(name)} is not a .npy file (numpy's archives hold only those)`,
      );
    }
    if (seen[key] === true) throw new DLPackError("file", `${where}: two members are named ${quoted(name)}`);
    seen[key] = true;
    names[i] = key;
  }
  return names;
}

/**
 * Opens a .npz archive (`np.savez`, `np.savez_compressed`) and returns a view of each array.
 * Stored members whose data is aligned for its dtype (every one {@link saveNpz} writes) are views
 * over one mapping of the file, as {@link loadNpy}'s; the others (deflated, or not aligned, as
 * `np.savez` places them) are read into library memory, a deflated one's size and CRC-32
 * checked. Options and lifetime as {@link loadSafetensors}'s; the whole directory and every
 * member's header are checked before the first view exists.
 */
export function loadNpz(path: string, opts?: LoadOptions): NpzContents {
  const { path: checked, writable, file } = open(path, opts, "loadNpz");
  const where = quoted(checked.text);
  try {
    const members = readZip((offset, length) => copiedBytes(file, offset, length), file.bytes, where);
    const names = npzNames(members, where);
    const arrays = { __proto__: null } as unknown as Record<string, BufferView>;
    const views = objectSlots<BufferView>(members.length) as BufferView[];
    let made = 0;
    try {
      for (; made < members.length; made++) {
        const m = members[made]!;
        const at = `${where} member ${quoted(m.name)}`;
        views[made] = m.method === DEFLATED ? deflatedView(file, m, writable, at) : storedView(file, m, writable, at);
        arrays[names[made]!] = views[made]!;
      }
    } catch (error) {
      for (let i = 0; i < made; i++) disposeView(views[i]!);
      throw error;
    }
    const dispose = () => {
      for (let i = 0; i < views.length; i++) disposeView(views[i]!);
    };
    return freeze({ arrays: freeze(arrays), dispose, [Symbol.dispose]: dispose });
  } finally {
    releaseFile(file);
  }
}

/** `length` bytes of the file from `offset`, copied into JS memory. */
function copiedBytes(file: FileMemory, offset: number, length: number): Uint8Array {
  const window = fileBytes(file, length, offset);
  if (length === 0) return window;
  try {
    const out = new Uint8Array(length);
    setElements(out, window);
    return out;
  } finally {
    detach(window.buffer);
  }
}
