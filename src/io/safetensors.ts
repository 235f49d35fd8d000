/**
 * The safetensors format, as pure functions over bytes (no I/O): reading a header and checking it
 * against the file's size, and writing one as the reference implementation does.
 *
 * A file is an 8-byte little-endian header length `n`, `n` bytes of JSON (UTF-8, padded with
 * spaces), then the data: every tensor's bytes in C order, little-endian, at the byte range
 * `data_offsets` of its entry, relative to the start of the data. The entries are an object of
 * name -> `{ dtype, shape, data_offsets }` plus an optional `__metadata__` object of strings. As
 * the reference reader requires, the ranges sorted by offset cover the data exactly: no gap, no
 * overlap, nothing after the last one, and each as long as its shape and dtype say.
 * @module
 */
import { DLPackError } from "../facts/errors.ts";
import type { DType } from "../facts/dtypes.ts";
import { dtypeInfo } from "../facts/dtypes.ts";
import { ceil, floor, freeze, min, objectSlots, slots, typedArrayLength } from "../facts/intrinsics.ts";
import { listText, MAX_EXACT } from "../facts/layout.ts";
import { MAX_RANK } from "../facts/abi.ts";
import { JsonReader, type Label, quoted } from "./json.ts";
import { compareBytes, utf8 } from "./utf8.ts";

/** The largest header the reference implementation reads (its `MAX_HEADER_SIZE`). */
const HEADER_BYTES_MAX = 100_000_000;

/** Bytes before the header: its length as a little-endian u64. */
export const PREFIX_BYTES = 8;

/** The format's dtype names and the library's, in the reference's order (its `Dtype` enum, which
 * orders tensors in files it writes: largest rank first). */
const FORMAT_DTYPES: readonly (readonly [string, DType])[] = [
  ["BOOL", "bool"],
  ["F4", "float4_e2m1fn"],
  ["F6_E2M3", "float6_e2m3fn"],
  ["F6_E3M2", "float6_e3m2fn"],
  ["U8", "uint8"],
  ["I8", "int8"],
  ["F8_E5M2", "float8_e5m2"],
  ["F8_E4M3", "float8_e4m3fn"],
  ["F8_E8M0", "float8_e8m0fnu"],
  ["F8_E4M3FNUZ", "float8_e4m3fnuz"],
  ["F8_E5M2FNUZ", "float8_e5m2fnuz"],
  ["I16", "int16"],
  ["U16", "uint16"],
  ["F16", "float16"],
  ["BF16", "bfloat16"],
  ["I32", "int32"],
  ["U32", "uint32"],
  ["F32", "float32"],
  ["C64", "complex64"],
  ["F64", "float64"],
  ["I64", "int64"],
  ["U64", "uint64"],
];

interface FormatDType {
  readonly format: string;
  readonly dtype: DType;
  /** Index in {@link FORMAT_DTYPES}. */
  readonly rank: number;
}

// Prototype-less: a name such as "constructor" finds nothing.
const BY_FORMAT: Record<string, FormatDType | undefined> = { __proto__: null } as unknown as Record<
  string,
  FormatDType
>;
const BY_DTYPE: Record<string, FormatDType | undefined> = { __proto__: null } as unknown as Record<string, FormatDType>;
for (let i = 0; i < FORMAT_DTYPES.length; i++) {
  const [format, dtype] = FORMAT_DTYPES[i]!;
  const entry = freeze({ format, dtype, rank: i });
  BY_FORMAT[format] = entry;
  BY_DTYPE[dtype] = entry;
}

/** The format's dtype names, for messages. */
const FORMAT_DTYPE_NAMES: string = FORMAT_DTYPES.map(([f]) => f).join(", ");

/** The library dtypes a safetensors file can hold. */
export const SAFETENSORS_DTYPES: readonly DType[] = freeze(FORMAT_DTYPES.map(([, d]) => d));
const SAFETENSORS_DTYPE_NAMES = SAFETENSORS_DTYPES.join(", ");

/** The format's name of a library dtype, or undefined when the format has none. */
export function formatDType(dtype: DType): string | undefined {
  return BY_DTYPE[dtype]?.format;
}

/** One tensor of a header. */
export interface TensorEntry {
  readonly name: string;
  readonly dtype: DType;
  /** A fresh array of own elements. */
  readonly shape: readonly number[];
  /** Element count. */
  readonly size: number;
  /** Its byte range in the data section. */
  readonly begin: number;
  readonly end: number;
}

/** A header, checked against the file it came from. */
export interface SafetensorsHeader {
  /** Where the data section starts in the file (8 + the header's length). */
  readonly dataStart: number;
  /** The tensors in the order of their data. */
  readonly tensors: readonly TensorEntry[];
  /** `__metadata__` (a frozen prototype-less record of strings), or null when there is none. */
  readonly metadata: Readonly<Record<string, string>> | null;
}

/** The header's length from the file's first 8 bytes (`bytes` holds at least them), checked
 * against the file's size and the format's limit. */
export function headerLength(bytes: Uint8Array, fileBytes: number, where: string): number {
  if (fileBytes < PREFIX_BYTES) {
    throw new DLPackError("file", `${where}: ${fileBytes} bytes is too short for a safetensors file (8 at least)`);
  }
  const lo = bytes[0]! + bytes[1]! * 0x100 + bytes[2]! * 0x1_0000 + bytes[3]! * 0x100_0000;
  const hi = bytes[4]! + bytes[5]! * 0x100 + bytes[6]! * 0x1_0000 + bytes[7]! * 0x100_0000;
  const n = hi * 0x1_0000_0000 + lo;
  const shown = hi >= 0x20_0000 ? "2^53 or more" : `${n}`;
  if (hi >= 0x20_0000 || n > HEADER_BYTES_MAX) {
    throw new DLPackError(
      "file",
      `${where}: the header length ${shown} is absurd (the format allows at most ${HEADER_BYTES_MAX} bytes)`,
    );
  }
  if (PREFIX_BYTES + n > fileBytes) {
    throw new DLPackError("file", `${where}: the header length ${n} is beyond the file (${fileBytes} bytes)`);
  }
  if (n < 2) throw new DLPackError("file", `${where}: the header length ${n} cannot hold a JSON object`);
  return n;
}

/** Reads and checks the header in `bytes` (the file's first 8 + `headerLength` bytes at least).
 * Throws `DLPackError` ("file") naming `where` and what is wrong; returns nothing unchecked. */
export function parseHeader(bytes: Uint8Array, fileBytes: number, where: string): SafetensorsHeader {
  const n = headerLength(bytes, fileBytes, where);
  const reader = new JsonReader(bytes, PREFIX_BYTES, PREFIX_BYTES + n, where);
  // Chained as they are read, then moved into one array of own elements of the exact length (an
  // index write past an array's end could reach a setter a caller put on Array.prototype, and
  // growing one by copies costs more than the chain).
  let first: Chained | undefined;
  let last: Chained | undefined;
  let count = 0;
  let metadata: Record<string, string> | null = null;
  reader.object("the header", (key, at) => {
    if (key === "__metadata__") {
      metadata = readMetadata(reader);
      return;
    }
    const link: Chained = { entry: readEntry(reader, key, at), next: undefined };
    if (last === undefined) first = link;
    else last.next = link;
    last = link;
    count++;
  });
  if (reader.peek() !== -1) throw reader.fail(`expected the end of the header, found ${reader.found()}`);
  const found = objectSlots<TensorEntry>(count) as TensorEntry[];
  let inOrder = true;
  let link = first;
  for (let i = 0; link !== undefined; i++, link = link.next) {
    found[i] = link.entry;
    if (i > 0 && !before(found[i - 1]!, link.entry)) inOrder = false;
  }
  // Entries that come in the order of their data (as this library writes them) need no sort.
  const tensors = inOrder ? found : sortByOffsets(found, count);
  checkCover(tensors, fileBytes - PREFIX_BYTES - n, where);
  return freeze({ dataStart: PREFIX_BYTES + n, tensors: freeze(tensors), metadata });
}

/** An entry read, and the one read after it. */
interface Chained {
  readonly entry: TensorEntry;
  next: Chained | undefined;
}

/** Whether `a` comes first in the order of the data (begin, then end). */
function before(a: TensorEntry, b: TensorEntry): boolean {
  return a.begin < b.begin || (a.begin === b.begin && a.end <= b.end);
}

function readMetadata(reader: JsonReader): Record<string, string> {
  const out = { __proto__: null } as unknown as Record<string, string>;
  reader.object("__metadata__", (key) => {
    if (reader.peek() !== 0x22) {
      throw reader.fail(`__metadata__ ${quoted(key)} must be a string, found ${reader.found()}`);
    }
    out[key] = reader.string();
  });
  return freeze(out);
}

function readEntry(reader: JsonReader, name: string, at: number): TensorEntry {
  // Named only when an error is made (most headers make none).
  const tensor = () => `tensor ${quoted(name)}`;
  let format: string | undefined;
  let shape: number[] | undefined;
  let offsets: number[] | undefined;
  reader.object(tensor, (key) => {
    if (key === "dtype") format = reader.string();
    else if (key === "shape") shape = readCounts(reader, () => `${tensor()}'s shape`, MAX_RANK);
    else if (key === "data_offsets") offsets = readCounts(reader, () => `${tensor()}'s data_offsets`, 2);
    else reader.skip(); // fields the format does not define are ignored, as by the reference reader
  });
  if (format === undefined || shape === undefined || offsets === undefined) {
    const what = tensor();
    const missing = format === undefined ? "dtype" : shape === undefined ? "shape" : "data_offsets";
    throw reader.fail(`${what} has no ${missing}`, at);
  }
  return checkedEntry(reader, name, at, format, shape, offsets);
}

/** The entry of a tensor whose fields were read, checked against each other. */
function checkedEntry(
  reader: JsonReader,
  name: string,
  at: number,
  format: string,
  shape: number[],
  offsets: number[],
): TensorEntry {
  const what = () => `tensor ${quoted(name)}`;
  if (offsets.length !== 2) throw reader.fail(`${what()}'s data_offsets must be [begin, end]`, at);
  const dtype = BY_FORMAT[format]?.dtype;
  if (dtype === undefined) {
    throw reader.fail(`${what()} has the unknown dtype ${quoted(format)} (the format's: ${FORMAT_DTYPE_NAMES})`, at);
  }
  const begin = offsets[0]!;
  const end = offsets[1]!;
  if (end < begin) throw reader.fail(`${what()}'s data_offsets [${begin}, ${end}] end before they begin`, at);
  const size = elementCount(shape, reader, what, at);
  const bits = dtypeInfo(dtype).bits;
  // size * bits / 8 exactly, as whole bytes, without a product beyond 2^53.
  const bytes = bits % 8 === 0 ? size * (bits / 8) : (size * bits) / 8;
  if (bytes !== floor(bytes)) {
    throw reader.fail(`${what()}: ${size} elements of ${format} do not fill whole bytes`, at);
  }
  if (bytes > MAX_EXACT || end - begin !== bytes) {
    throw reader.fail(
      `${what()}: its shape ${
        listText(shape)
      } of ${format} needs ${bytes} bytes, but data_offsets [${begin}, ${end}] ` +
        `hold ${end - begin}`,
      at,
    );
  }
  return { name, dtype, shape, size, begin, end };
}

/** Where {@link readCounts} collects a list (not re-entered: lists of counts hold no lists). */
const counts = new Float64Array(MAX_RANK);

function readCounts(reader: JsonReader, what: Label, max: number): number[] {
  const values = counts;
  const n = reader.array(what, max, (i) => {
    values[i] = reader.count(what, i);
  });
  const out = slots(n);
  for (let i = 0; i < n; i++) out[i] = values[i]!;
  return out;
}

function elementCount(shape: readonly number[], reader: JsonReader, what: () => string, at: number): number {
  let size = 1;
  for (let d = 0; d < shape.length; d++) {
    const extent = shape[d]!;
    if (extent !== 0 && size > MAX_EXACT / extent) {
      throw reader.fail(`${what()}: its shape has more than 2^53 elements`, at);
    }
    size *= extent;
  }
  return size;
}

/** The entries in the order of their data (begin, then end; a stable merge sort of our own:
 * `Array.prototype.sort` is the caller's to replace). */
function sortByOffsets(entries: TensorEntry[], n: number): TensorEntry[] {
  let from = objectSlots<TensorEntry>(n) as TensorEntry[];
  for (let i = 0; i < n; i++) from[i] = entries[i]!;
  let to = objectSlots<TensorEntry>(n) as TensorEntry[];
  for (let width = 1; width < n; width *= 2) {
    for (let lo = 0; lo < n; lo += 2 * width) {
      const mid = min(lo + width, n);
      const hi = min(lo + 2 * width, n);
      let i = lo;
      let j = mid;
      for (let k = lo; k < hi; k++) {
        to[k] = i < mid && (j >= hi || before(from[i]!, from[j]!)) ? from[i++]! : from[j++]!;
      }
    }
    const t = from;
    from = to;
    to = t;
  }
  return from;
}

/** The sorted ranges cover `[0, dataBytes)` exactly. */
function checkCover(tensors: readonly TensorEntry[], dataBytes: number, where: string): void {
  let next = 0;
  for (let i = 0; i < tensors.length; i++) {
    const t = tensors[i]!;
    if (t.begin !== next) {
      const problem = t.begin < next
        ? `overlaps the tensor before it (which ends at ${next})`
        : `leaves a gap after the tensor before it (which ends at ${next})`;
      throw new DLPackError(
        "file",
        `${where}: tensor ${quoted(t.name)} at data_offsets [${t.begin}, ${t.end}] ${problem}`,
      );
    }
    next = t.end;
  }
  if (next !== dataBytes) {
    const problem = next > dataBytes
      ? `reach byte ${next} of the data, beyond its end: the file is truncated or the offsets are wrong`
      : `end at byte ${next}, and ${dataBytes - next} bytes follow them`;
    throw new DLPackError("file", `${where}: the data section has ${dataBytes} bytes, but the tensors ${problem}`);
  }
}

// ---------------------------------------------------------------------------------------------
// Writing

/** A tensor to write: its name, dtype, shape and byte count. */
export interface EntryToWrite {
  readonly name: string;
  readonly dtype: DType;
  readonly shape: readonly number[];
  readonly bytes: number;
}

/** What {@link buildHeader} made: the file's first bytes (length, JSON, padding) and the order
 * the tensors' data follow in (indices into the entries given). */
interface BuiltHeader {
  readonly prefix: Uint8Array<ArrayBuffer>;
  readonly order: readonly number[];
}

/**
 * The header the reference writer makes for these tensors: data ordered by dtype (its enum's
 * order, largest first), then by name (bytewise); compact JSON with `__metadata__` first (keys in
 * bytewise order here: the reference's order is a hash map's), then each tensor's `dtype`,
 * `shape`, `data_offsets`; padded with spaces to a multiple of 8 bytes. Throws "dtype" for a dtype
 * the format lacks and "argument" for a name or value with no UTF-8 form.
 */
export function buildHeader(
  entries: readonly EntryToWrite[],
  metadata: readonly (readonly [string, string])[],
): BuiltHeader {
  const n = entries.length;
  const names = objectSlots<Uint8Array>(n) as Uint8Array[];
  for (let i = 0; i < n; i++) {
    const e = entries[i]!;
    if (BY_DTYPE[e.dtype] === undefined) {
      throw new DLPackError(
        "dtype",
        `tensor ${quoted(e.name)}: safetensors has no ${e.dtype} (it holds ${SAFETENSORS_DTYPE_NAMES})`,
      );
    }
    names[i] = encoded(e.name, `tensor name ${quoted(e.name)}`);
  }
  const order = slots(n);
  for (let i = 0; i < n; i++) order[i] = i;
  insertionSort(order, (a, b) => {
    const byRank = BY_DTYPE[entries[b]!.dtype]!.rank - BY_DTYPE[entries[a]!.dtype]!.rank;
    return byRank !== 0 ? byRank : compareBytes(names[a]!, names[b]!);
  });
  let json = "{";
  if (metadata.length > 0) json += `"__metadata__":${metadataJson(metadata)}`;
  let offset = 0;
  for (let k = 0; k < n; k++) {
    const e = entries[order[k]!]!;
    let shape = "[";
    for (let d = 0; d < e.shape.length; d++) shape += `${d === 0 ? "" : ","}${e.shape[d]}`;
    shape += "]";
    json +=
      `${json.length > 1 ? "," : ""}${quoteJson(e.name)}:{"dtype":"${BY_DTYPE[e.dtype]!.format}","shape":${shape},` +
      `"data_offsets":[${offset},${offset + e.bytes}]}`;
    offset += e.bytes;
  }
  json += "}";
  return { prefix: prefixOf(encoded(json, "the header")), order };
}

function metadataJson(metadata: readonly (readonly [string, string])[]): string {
  const keys = objectSlots<Uint8Array>(metadata.length) as Uint8Array[];
  const order = slots(metadata.length);
  for (let i = 0; i < metadata.length; i++) {
    keys[i] = encoded(metadata[i]![0], `metadata key ${quoted(metadata[i]![0])}`);
    encoded(metadata[i]![1], `metadata value of ${quoted(metadata[i]![0])}`);
    order[i] = i;
  }
  insertionSort(order, (a, b) => compareBytes(keys[a]!, keys[b]!));
  let json = "{";
  for (let k = 0; k < order.length; k++) {
    const [key, value] = metadata[order[k]!]!;
    json += `${k === 0 ? "" : ","}${quoteJson(key)}:${quoteJson(value)}`;
  }
  return json + "}";
}

const quoteJson: (text: string) => string = JSON.stringify;

function encoded(text: string, what: string): Uint8Array<ArrayBuffer> {
  const bytes = utf8(text);
  if (bytes === undefined) throw new DLPackError("argument", `${what} holds a lone surrogate: it has no UTF-8 form`);
  return bytes;
}

/** The length, the JSON and its padding to a multiple of 8. */
function prefixOf(json: Uint8Array): Uint8Array<ArrayBuffer> {
  const length = typedArrayLength(json);
  const n = ceil(length / 8) * 8;
  if (n > HEADER_BYTES_MAX) {
    throw new DLPackError("argument", `the header would have ${n} bytes, more than the format's ${HEADER_BYTES_MAX}`);
  }
  const out = new Uint8Array(new ArrayBuffer(PREFIX_BYTES + n));
  out[0] = n & 0xff;
  out[1] = (n >>> 8) & 0xff;
  out[2] = (n >>> 16) & 0xff;
  out[3] = (n >>> 24) & 0xff;
  for (let i = 0; i < length; i++) out[PREFIX_BYTES + i] = json[i]!;
  for (let i = PREFIX_BYTES + length; i < PREFIX_BYTES + n; i++) out[i] = 0x20;
  return out;
}

/** A stable sort of `items` by `compare` (few enough items: a header holds thousands at most). */
function insertionSort(items: number[], compare: (a: number, b: number) => number): void {
  // Binary insertion: O(n log n) comparisons, O(n^2) moves of small integers.
  for (let i = 1; i < items.length; i++) {
    const item = items[i]!;
    let lo = 0;
    let hi = i;
    while (lo < hi) {
      const mid = (lo + hi) >>> 1;
      if (compare(items[mid]!, item) <= 0) lo = mid + 1;
      else hi = mid;
    }
    for (let j = i; j > lo; j--) items[j] = items[j - 1]!;
    items[lo] = item;
  }
}
