/**
 * Exports: TypedArrays, library allocations and imported views handed to other consumers as
 * DLPack structs, zero-copy. JS memory is pinned until the consumer's deleter has run; views keep
 * their owner (and so the first producer of a chain) alive the same way.
 * @module
 */
import { core } from "../ffi/mod.ts";
import { DLPackError, optionalBoolean, optionsObject, shown } from "./errors.ts";
import { type AnyTypedArray, type DType, type DTypeInfo, dtypeInfo, dtypeOfArray } from "./dtypes.ts";
import { deviceCode, type DeviceType } from "./devices.ts";
import { F64, I32, refusalError, scratch, U32 } from "./description.ts";
import { checkShape, checkStrides, cStrides, reach } from "./layout.ts";
import { newPinId, realmAddress, recordPin } from "./owner.ts";
import { Capsule } from "./capsule.ts";
import { type BufferView, isBufferView } from "./view.ts";
import { copyOf } from "./alloc.ts";
import { attachProducerStream, fenceForConsumer } from "./cuda.ts";

/** Options of the export functions. */
export interface ExportOptions {
  /** Extents of the exported tensor (default: the source's shape; 1-D for a TypedArray). */
  readonly shape?: readonly number[];
  /** Strides in elements (default: C order). */
  readonly strides?: readonly number[];
  /** Reinterpret the bytes as this dtype (checked against the source's byte length). */
  readonly dtype?: DType;
  /** Elements (of the exported dtype) from the start of the source to element 0; needed when
   * strides are negative. Default 0. */
  readonly offset?: number;
  /** Export read-only even if the source is writable. */
  readonly readonly?: boolean;
}

/** What can be exported. */
export type Exportable = BufferView | AnyTypedArray;

const READ_ONLY = 1;
const IS_COPIED = 2;
const SUBBYTE_PADDED = 4;
/** `dlpk_export` option bits (zig/src/root.zig). */
export const EXPORT_VERSIONED = 1;
/** The export takes over the caller's owner reference. */
export const EXPORT_ADOPT_OWNER = 2;

interface Layout {
  info: DTypeInfo;
  shape: number[];
  strides: number[];
  /** Byte offset of element 0 from the source's first byte. */
  byteOffset: number;
}

/** Resolves shape/strides/dtype/offset options against a source of `byteLength` bytes whose
 * natural layout is given, and checks every element stays inside those bytes. */
function resolveLayout(
  natural: { info: DTypeInfo; shape: readonly number[]; strides: readonly number[] | undefined; zeroAt: number },
  byteLength: number,
  padded: boolean,
  opts: ExportOptions | undefined,
): Layout {
  const info = opts?.dtype !== undefined ? dtypeInfo(opts.dtype) : natural.info;
  const bits = info.bits < 8 && padded ? 8 : info.bits;
  let shape: number[];
  if (opts?.shape !== undefined) shape = checkShape(opts.shape);
  else if (opts?.dtype === undefined || info === natural.info) shape = natural.shape.slice();
  else {
    // A new dtype without a shape: 1-D over all the bytes, which must divide evenly.
    if ((byteLength * 8) % bits !== 0) {
      throw new DLPackError("dtype", `${info.name} (${bits} bits) does not divide the source's ${byteLength} bytes`);
    }
    if (natural.strides !== undefined && natural.zeroAt !== 0) {
      throw new DLPackError("strides", `reinterpreting as ${info.name} needs a contiguous source`);
    }
    shape = [(byteLength * 8) / bits];
  }
  let strides: number[];
  if (opts?.strides !== undefined) strides = checkStrides(opts.strides, shape.length);
  else if (opts?.shape === undefined && opts?.dtype === undefined && natural.strides !== undefined) {
    strides = natural.strides.slice();
  } else strides = cStrides(shape);
  const offset = opts?.offset ?? (opts?.shape === undefined && opts?.dtype === undefined ? natural.zeroAt : 0);
  if (!Number.isSafeInteger(offset) || offset < 0) {
    throw new DLPackError(
      "byte_offset",
      `offset must be a non-negative integer number of elements, got ${String(offset)}`,
    );
  }
  const [lo, hi] = reach(shape, strides);
  if (hi >= lo) {
    const first = (offset + lo) * bits;
    const end = (offset + hi + 1) * bits;
    if (first < 0 || end > byteLength * 8) {
      throw new DLPackError(
        "shape",
        `shape [${shape.join(", ")}] with strides [${strides.join(", ")}] and offset ${offset} reaches ` +
          `${first < 0 ? `${-first / 8} bytes before` : `byte ${Math.ceil(end / 8)} of`} a ${byteLength}-byte source`,
      );
    }
  }
  if ((offset * bits) % 8 !== 0) throw new DLPackError("byte_offset", `element 0 must start on a byte boundary`);
  return { info, shape, strides, byteOffset: (offset * bits) / 8 };
}

function checkTypedArray(x: AnyTypedArray): ArrayBufferLike {
  const buffer = x.buffer as ArrayBufferLike & { detached?: boolean; resizable?: boolean; growable?: boolean };
  if (buffer.detached === true) throw new DLPackError("disposed", "the TypedArray's ArrayBuffer is detached");
  if (buffer.resizable === true || buffer.growable === true) {
    throw new DLPackError(
      "null_data",
      "resizable ArrayBuffers can shrink or move under a consumer; export a fixed-length buffer instead",
    );
  }
  return buffer;
}

/** Writes layout, device, dtype and flags of an export spec into the scratch. */
function writeLayout(s: typeof scratch, device: { type: DeviceType; id: number }, layout: Layout, flags: number): void {
  s.setLayout(layout.shape, layout.strides);
  s.i32[I32.deviceType] = deviceCode(device.type);
  s.i32[I32.deviceId] = device.id;
  s.u32[U32.code] = layout.info.dl.code;
  s.u32[U32.bits] = layout.info.dl.bits;
  s.u32[U32.flags] = flags;
}

/** Writes the export spec into the scratch and builds the struct; returns its capsule. */
function build(
  data: number,
  owner: number,
  adopt: boolean,
  device: { type: DeviceType; id: number },
  layout: Layout,
  flags: number,
  versioned: boolean,
): Capsule {
  const s = scratch;
  s.setAddress(data);
  s.setOwner(owner);
  writeLayout(s, device, layout, flags);
  const status = core().dlpk_export((versioned ? EXPORT_VERSIONED : 0) | (adopt ? EXPORT_ADOPT_OWNER : 0), s.at);
  if (status !== 0) throw refusalError(status, s, false);
  return new Capsule(s.address(), versioned);
}

function exportTypedArray(
  x: AnyTypedArray,
  opts: ExportOptions | undefined,
  versioned: boolean,
  flags: number,
): Capsule {
  // Touching .buffer first also matters in Bun: a small TypedArray's storage moves out of the GC heap
  // the first time its buffer is materialized, and the exported pointer must not go stale.
  checkTypedArray(x);
  const info = dtypeInfo(dtypeOfArray(x));
  if (opts === undefined && x.byteLength > 0) return exportWholeArray(x, info, versioned, flags);
  const layout = resolveLayout({ info, shape: [x.length], strides: undefined, zeroAt: 0 }, x.byteLength, false, opts);
  const readonly = opts?.readonly === true;
  if (readonly && !versioned) throw legacyReadOnly();
  const exportFlags = flags | (readonly ? READ_ONLY : 0);
  if (x.byteLength === 0) {
    // Nothing to point at (and nothing to pin): a NULL data pointer, as DLPack asks for size 0.
    return build(0, 0, false, { type: "cpu", id: 0 }, layout, exportFlags, versioned);
  }
  // One native call pins the TypedArray and builds the struct; the runtime passes its data pointer.
  const s = scratch;
  s.setAddress(layout.byteOffset);
  writeLayout(s, { type: "cpu", id: 0 }, layout, exportFlags);
  const id = newPinId();
  const status = core().dlpk_export_buffer(x, realmAddress(), id, x.byteLength, versioned ? EXPORT_VERSIONED : 0, s.at);
  if (status !== 0) throw refusalError(status, s, false);
  // The pin keeps the TypedArray (and its buffer) reachable until the consumer releases the export.
  recordPin(id, x);
  return new Capsule(s.address(), versioned);
}

/** The common export: a whole TypedArray, 1-D, no options. Writes the spec straight away. */
function exportWholeArray(x: AnyTypedArray, info: DTypeInfo, versioned: boolean, flags: number): Capsule {
  const s = scratch;
  s.setAddress(0);
  s.i32[I32.ndim] = 1;
  s.f64[F64.shape] = x.length;
  s.f64[F64.strides] = 1;
  s.i32[I32.deviceType] = 1;
  s.i32[I32.deviceId] = 0;
  s.u32[U32.code] = info.dl.code;
  s.u32[U32.bits] = info.dl.bits;
  s.u32[U32.flags] = flags;
  const id = newPinId();
  const status = core().dlpk_export_buffer(x, realmAddress(), id, x.byteLength, versioned ? EXPORT_VERSIONED : 0, s.at);
  if (status !== 0) throw refusalError(status, s, false);
  recordPin(id, x);
  return new Capsule(s.address(), versioned);
}

function exportView(view: BufferView, opts: ExportOptions | undefined, versioned: boolean, flags: number): Capsule {
  const owner = view.nativeOwner; // throws "disposed" for a disposed view
  const padded = (view.flagBits & SUBBYTE_PADDED) !== 0;
  if (!versioned && (opts?.readonly === true || view.access === "readonly")) throw legacyReadOnly();
  const readonly = opts?.readonly === true || view.access !== "readwrite";
  let data = view.addressNumber;
  let layout: Layout;
  if (
    opts?.shape === undefined && opts?.strides === undefined && opts?.dtype === undefined && opts?.offset === undefined
  ) {
    layout = {
      info: dtypeInfo(view.dtype),
      shape: view.rawShape.slice(),
      strides: view.rawStrides.slice(),
      byteOffset: 0,
    };
  } else {
    // Reinterpretation: the new layout must stay inside the bytes the view can reach.
    const bits = view.dl.bits;
    const slotBits = bits < 8 && padded ? 8 : bits;
    const [lo, hi] = reach(view.rawShape, view.rawStrides);
    const spanStart = hi < lo ? 0 : Math.floor((lo * slotBits) / 8);
    const spanBytes = hi < lo ? 0 : Math.ceil(((hi + 1) * slotBits) / 8) - spanStart;
    const zeroAt = (-spanStart * 8) / slotBits;
    const natural = { info: dtypeInfo(view.dtype), shape: view.rawShape, strides: view.rawStrides, zeroAt };
    layout = resolveLayout(natural, spanBytes, padded, opts);
    data = view.addressNumber + spanStart + layout.byteOffset;
  }
  const exportFlags = flags | (readonly ? READ_ONLY : 0) | (padded && layout.info.bits < 8 ? SUBBYTE_PADDED : 0);
  const capsule = build(data, owner, false, view.device, layout, exportFlags, versioned);
  // CUDA data with a recorded producer stream: the export carries it and an event recorded on it.
  attachProducerStream(capsule, view);
  return capsule;
}

function legacyReadOnly(): DLPackError {
  return new DLPackError(
    "readonly",
    "the legacy DLManagedTensor cannot mark data read-only; export it versioned (exportDLPack) or from a writable source",
  );
}

function exportAny(x: Exportable, options: ExportOptions | undefined, versioned: boolean, flags = 0): Capsule {
  // No options (the common case) stays undefined: the whole-array export takes a fast path then.
  const opts = options === undefined ? undefined : optionsObject(options, "export options");
  optionalBoolean(opts?.readonly, "readonly");
  if (isBufferView(x)) return exportView(x, opts, versioned, flags);
  if (ArrayBuffer.isView(x) && !(x instanceof DataView)) return exportTypedArray(x, opts, versioned, flags);
  throw new DLPackError("dtype", "export takes a BufferView or a TypedArray");
}

/**
 * Exports as a `DLManagedTensorVersioned` (DLPack 1.3), zero-copy: the struct's data aliases the
 * source. READ_ONLY is set unless the source is writable.
 */
export function exportDLPack(x: Exportable, opts?: ExportOptions): Capsule {
  return exportAny(x, opts, true);
}

/** Exports as a legacy `DLManagedTensor`. Read-only sources are refused: the struct cannot say so. */
export function exportDLPackLegacy(x: Exportable, opts?: ExportOptions): Capsule {
  return exportAny(x, opts, false);
}

/** Same as {@link exportDLPack}. */
export const toDLPack: (x: Exportable, opts?: ExportOptions) => Capsule = exportDLPack;

/** The one-call export of a TypedArray or view (DLPack.jl's `share`): a versioned capsule over
 * the same memory. */
export function share(x: Exportable, opts?: ExportOptions): Capsule {
  return exportAny(x, opts, true);
}

/** `__dlpack__` keyword arguments in camelCase (the Python array API's names). */
export interface DLPackProtocolOptions {
  /** The highest version the consumer reads; absent or below (1, 0) asks for the legacy struct. */
  readonly maxVersion?: readonly [number, number] | null;
  /** true: always copy (IS_COPIED set); false: never copy (refuse if one is needed). */
  readonly copy?: boolean | null;
  /** The device the consumer wants the data on, as [device type code, id]. */
  readonly dlDevice?: readonly [number, number] | null;
  /** The consumer's stream (protocol values: null/undefined = legacy default stream, -1 = no
   * synchronization, 0 refused, 1 legacy default, 2 per-thread default, larger = a handle). Only
   * null/undefined is allowed for host data. */
  readonly stream?: unknown;
}

/** `view.__dlpack__(opts)`: the producer side of the protocol with the Python keyword semantics. */
export function viewDLPack(view: BufferView, options?: DLPackProtocolOptions): Capsule {
  const opts = optionsObject(options, "__dlpack__ options");
  const max = opts.maxVersion;
  if (max !== undefined && max !== null && !isIntPair(max)) {
    throw new DLPackError("version", `maxVersion must be [major, minor] (non-negative integers), got ${shown(max)}`);
  }
  const versioned = max !== undefined && max !== null && max[0] >= 1;
  if (opts.copy !== null) optionalBoolean(opts.copy, "copy");
  if (opts.dlDevice !== undefined && opts.dlDevice !== null) {
    if (!isIntPair(opts.dlDevice)) {
      throw new DLPackError("device", `dlDevice must be [device type, id] (integers), got ${shown(opts.dlDevice)}`);
    }
    const [type, id] = opts.dlDevice;
    const mine = deviceCode(view.device.type);
    if (type !== mine || id !== view.device.id) {
      throw new DLPackError(
        "device",
        `cannot export ${view.device.type}:${view.device.id} data to device (${type}, ${id})${
          opts.copy === false ? " without a copy" : ""
        }`,
      );
    }
  }
  // CUDA data: the consumer's stream waits for the view's producer stream (host data: None only).
  fenceForConsumer(view, opts.stream);
  if (opts.copy === true) {
    using copy = copyOf(view);
    return exportAny(copy, undefined, versioned, IS_COPIED);
  }
  return exportAny(view, undefined, versioned);
}

function isIntPair(value: unknown): value is readonly [number, number] {
  return Array.isArray(value) && value.length === 2 &&
    value.every((v) => typeof v === "number" && Number.isSafeInteger(v) && v >= 0);
}
