/**
 * The test suites' foreign producer/consumer (tests/native/testprod.zig): builds managed tensors
 * from explicit fields, hostile ones included, and counts deleter calls.
 * @module
 */
import { findLibrary, openLibrary, runtime } from "../../ffi/mod.ts";
import { type DType, toDLDataType } from "../../mod.ts";

const lib = openLibrary(
  findLibrary("DLPACK_TESTPROD_LIB", "dlpack_testprod"),
  {
    tp_make: { args: ["buffer"], returns: "usize" },
    tp_spec_len: { args: [], returns: "u32" },
    tp_data: { args: ["usize", "u32"], returns: "usize" },
    tp_free_uncounted: { args: ["usize", "u32"], returns: "void" },
    tp_made: { args: [], returns: "u32" },
    tp_deleted: { args: [], returns: "u32" },
    tp_inspect: { args: ["usize", "u32", "buffer"], returns: "i32" },
    tp_consume: { args: ["usize", "u32"], returns: "void" },
    tp_consume_on_thread: { args: ["usize", "u32"], returns: "i32" },
    tp_consume_many: { args: ["buffer", "u32", "u32", "u32"], returns: "i32" },
    tp_read_values: { args: ["usize", "u32", "buffer", "u32"], returns: "f64" },
    tp_static_tensor: { args: ["f64", "u32"], returns: "usize" },
    tp_make_many: { args: ["buffer", "u32", "buffer"], returns: "u32" },
    tp_release_start: { args: ["buffer", "u32", "u32"], returns: "usize" },
    tp_release_done: { args: ["usize"], returns: "u32" },
    tp_release_wait: { args: ["usize"], returns: "void" },
    tp_listed_access: { args: ["u32", "u32", "u32", "u32"], returns: "i32" },
    tp_fresh_tensors: { args: ["u32", "buffer"], returns: "u32" },
    tp_fresh_unmap: { args: ["buffer", "u32"], returns: "void" },
    tp_add_mappings: { args: ["u32"], returns: "u32" },
    // For the benchmark (bench/): a per-thread counting producer, and empty functions of the
    // import's and export's FFI signatures.
    tp_static_tensor_local: { args: ["f64", "u32"], returns: "usize" },
    tp_deleted_here: { args: [], returns: "f64" },
    tp_nop_import: { args: ["f64"], returns: "i32" },
    tp_nop_release: { args: ["f64"], returns: "void" },
    tp_nop_export: { args: ["buffer", "f64", "f64", "f64", "u32"], returns: "f64" },
    tp_nop_dispose: { args: ["f64"], returns: "f64" },
  } as const,
);

/** The raw functions of the test library. */
export const tp = lib.symbols;

const RANK = 64;
const SPEC_LEN = 17 + 2 * RANK;
if (tp.tp_spec_len() !== SPEC_LEN) throw new Error("tests/native/testprod.zig and producer.ts disagree on the spec");

type Int = number | bigint;

/** Every field of a managed tensor the producer can set. Defaults: a valid, versioned, CPU,
 * C-contiguous tensor with a counting deleter and zeroed data. */
export interface TensorSpec {
  versioned?: boolean | undefined;
  version?: [number, number] | undefined;
  flags?: Int | undefined;
  dtype?: DType | { code: number; bits: number; lanes: number } | undefined;
  device?: [number, number] | undefined;
  shape?: Int[] | null | undefined;
  /** Overrides ndim (for hostile ranks); shape/strides arrays hold at most 64 entries. */
  ndim?: number | undefined;
  strides?: Int[] | null | undefined;
  byteOffset?: Int | undefined;
  /** "alloc" (default), "null", or an explicit address. */
  data?: "alloc" | "null" | Int | undefined;
  /** Bytes to allocate (default: enough for the span plus byteOffset). */
  dataBytes?: number | undefined;
  deleter?: "counted" | "null" | undefined;
}

/** A tensor the producer made. */
export interface Made {
  readonly address: number;
  readonly versioned: boolean;
  /** The data pointer the producer allocated (0 when NULL). */
  readonly data: number;
  /** The import source for `importDLPack`. */
  readonly source: { versioned: number } | { legacy: number };
  /** The allocated data bytes (zero-copy), for writing test values. */
  bytes(length: number): Uint8Array<ArrayBuffer>;
}

function dlOf(dtype: TensorSpec["dtype"]): { code: number; bits: number; lanes: number } {
  if (dtype === undefined) return { code: 2, bits: 32, lanes: 1 };
  return typeof dtype === "string" ? toDLDataType(dtype) : dtype;
}

function defaultBytes(spec: TensorSpec, dl: { bits: number }): number {
  const shape = (spec.shape ?? []).map(Number);
  const strides = spec.strides === null || spec.strides === undefined ? undefined : spec.strides.map(Number);
  let span = 1;
  if (strides === undefined) span = shape.reduce((a, b) => a * b, 1);
  else if (shape.every((e) => e > 0)) span = 1 + shape.reduce((a, e, d) => a + (e - 1) * Math.abs(strides[d] ?? 0), 0);
  const bytes = Math.ceil((span * Math.max(dl.bits, 8)) / 8) + Number(spec.byteOffset ?? 0);
  return Math.min(Math.max(bytes, 1), 1 << 24);
}

/** Makes a managed tensor. */
export function make(spec: TensorSpec = {}): Made {
  const versioned = spec.versioned ?? true;
  const address = tp.tp_make(specWords(spec));
  if (address === 0) throw new Error("test producer out of memory");
  const dataAddress = tp.tp_data(address, versioned ? 1 : 0);
  return {
    address,
    versioned,
    data: dataAddress,
    source: versioned ? { versioned: address } : { legacy: address },
    bytes: (length: number) => new Uint8Array(runtime().arrayBuffer(dataAddress, length)),
  };
}

/** What every byte of [first, end) allows, from this process's /proc/self/maps (read natively by
 * the test producer, independently of the library): "none", "r" or "rw". */
export function listedAccess(first: bigint, end: bigint): "none" | "r" | "rw" {
  if (first < 0n || end > 2n ** 64n - 1n) return "none";
  const half = (v: bigint, shift: bigint) => Number((v >> shift) & 0xffff_ffffn);
  const access = tp.tp_listed_access(half(first, 0n), half(first, 32n), half(end, 0n), half(end, 32n));
  if (access < 0) throw new Error("the test producer could not read /proc/self/maps");
  return access === 3 ? "rw" : access === 1 ? "r" : "none";
}

/** Makes `count` tensors from one spec in one native call; returns their addresses. */
export function makeMany(spec: TensorSpec, count: number): Float64Array {
  const out = new Float64Array(count);
  if (tp.tp_make_many(specWords(spec), count, out) !== count) throw new Error("test producer out of memory");
  return out;
}

/** Starts calling the deleters of `tagged` (`address * 2 + (versioned ? 1 : 0)`) from `threads`
 * native threads at once and returns without waiting; see {@link releaseDone}, {@link releaseWait}. */
export function releaseOnThreads(tagged: Float64Array, threads: number): number {
  const handle = tp.tp_release_start(tagged, tagged.length, threads);
  if (handle === 0) throw new Error("test consumer out of memory");
  return handle;
}

/** Whether the releases started by {@link releaseOnThreads} have all run. */
export function releaseDone(handle: number): boolean {
  return tp.tp_release_done(handle) === 1;
}

/** Waits for the releases started by {@link releaseOnThreads}. */
export function releaseWait(handle: number): void {
  tp.tp_release_wait(handle);
}

function specWords(spec: TensorSpec): BigInt64Array {
  const dl = dlOf(spec.dtype);
  const versioned = spec.versioned ?? true;
  const w = new BigInt64Array(SPEC_LEN);
  const shape = spec.shape === undefined ? [4] : spec.shape;
  w[0] = versioned ? 1n : 0n;
  w[1] = BigInt(spec.version?.[0] ?? 1);
  w[2] = BigInt(spec.version?.[1] ?? 3);
  w[3] = BigInt.asIntN(64, BigInt(spec.flags ?? 0));
  w[4] = BigInt(dl.code);
  w[5] = BigInt(dl.bits);
  w[6] = BigInt(dl.lanes);
  w[7] = BigInt(spec.device?.[0] ?? 1);
  w[8] = BigInt(spec.device?.[1] ?? 0);
  w[9] = BigInt(spec.ndim ?? shape?.length ?? 0);
  w[10] = shape === null ? 1n : 0n;
  w[11] = spec.strides === undefined || spec.strides === null ? 1n : 0n;
  w[12] = BigInt.asIntN(64, BigInt(spec.byteOffset ?? 0));
  const data = spec.data ?? "alloc";
  w[13] = data === "alloc" ? 0n : data === "null" ? 1n : 2n;
  w[14] = BigInt(spec.dataBytes ?? defaultBytes({ ...spec, shape }, dl));
  w[15] = typeof data === "number" || typeof data === "bigint" ? BigInt.asIntN(64, BigInt(data)) : 0n;
  w[16] = spec.deleter === "null" ? 1n : 0n;
  shape?.slice(0, RANK).forEach((e, d) => (w[17 + d] = BigInt.asIntN(64, BigInt(e))));
  spec.strides?.slice(0, RANK).forEach((s, d) => (w[17 + RANK + d] = BigInt.asIntN(64, BigInt(s))));
  return w;
}

/** How many tensors the producer's deleters released so far. */
export function deleted(): number {
  return tp.tp_deleted();
}

/** What a foreign consumer sees of a struct: its fields, as `tp_inspect` reads them. */
export interface Inspected {
  data: bigint;
  device: [number, number];
  ndim: number;
  dtype: { code: number; bits: number; lanes: number };
  byteOffset: bigint;
  flags: bigint;
  version: [number, number] | null;
  shape: number[];
  strides: number[];
}

/** Reads a managed tensor the way a C consumer does. */
export function inspect(address: number | bigint, versioned: boolean): Inspected {
  const out = new BigInt64Array(11 + 2 * RANK);
  const ndim = tp.tp_inspect(address, versioned ? 1 : 0, out);
  if (ndim < 0) throw new Error("consumer found NULL strides");
  return {
    data: BigInt.asUintN(64, out[0]!),
    device: [Number(out[1]), Number(out[2])],
    ndim: Number(out[3]),
    dtype: { code: Number(out[4]), bits: Number(out[5]), lanes: Number(out[6]) },
    byteOffset: out[7]!,
    flags: out[8]!,
    version: out[9]! < 0n ? null : [Number(out[9]), Number(out[10])],
    shape: Array.from(out.slice(11, 11 + ndim), Number),
    strides: Array.from(out.slice(11 + RANK, 11 + RANK + ndim), Number),
  };
}

/** The element values a foreign consumer reads (C order, as f64). */
export function consumerValues(address: number | bigint, versioned: boolean, capacity = 4096): number[] {
  const out = new Float64Array(capacity);
  const n = tp.tp_read_values(address, versioned ? 1 : 0, out, capacity);
  if (n < 0) throw new Error("tensor too large for consumerValues");
  return Array.from(out.subarray(0, n));
}
