/**
 * Exports: TypedArrays, library allocations and imported views handed to other consumers as
 * DLPack structs, zero-copy. JS memory is pinned until the consumer's deleter has run; views keep
 * their owner (and so the first producer of a chain) alive the same way.
 * @module
 */
import { core, runtime } from "../../ffi/mod.ts";
import { DLPackError, optionalBoolean, optionsObject, shown } from "../facts/errors.ts";
import { type AnyTypedArray, type DType, type DTypeInfo, dtypeInfo, infoOfTag } from "../facts/dtypes.ts";
import { deviceCode, type DeviceType } from "../facts/devices.ts";
import { F64, I32, refusalError, type Scratch, scratch, Status, U32 } from "../native/description.ts";
import { checkShape, checkStrides, cStrides, listText, reach } from "../facts/layout.ts";
import {
  deferredCount,
  deferredNumbers,
  deferredObjectCount,
  deferredObjects,
  newPinId,
  realmAddress,
  recordPin,
  releaseDeferred,
  retryQuietly,
} from "../native/owner.ts";
import { Capsule } from "../native/capsule.ts";
import { registerViewOps } from "../view/hooks.ts";
import {
  accessOf,
  addressOf,
  type BufferView,
  deviceOfView,
  disposeView,
  flagsOf,
  infoOf,
  isBufferView,
  ownerOf,
  shapeOf,
  stridesOf,
} from "../view/view.ts";
import { copyOf } from "./copy.ts";
import { attachProducerStream, fenceForConsumer } from "./streams.ts";
import { importCapsule } from "./import.ts";
import {
  bufferState,
  ceil,
  floor,
  isArray,
  isCount,
  isDetached,
  newWeakMap,
  RESIZABLE,
  SHARED,
  typedArrayBuffer,
  typedArrayByteLength,
  typedArrayTag,
} from "../facts/intrinsics.ts";
import { ArrayWord, ExportOption, Flag } from "../facts/abi.ts";

const onMainThread = runtime().mainThread;

/** Options of the export functions. */
export interface ExportOptions {
  /** Extents of the exported tensor (default: the source's shape; 1-D for a TypedArray). */
  readonly shape?: readonly number[] | undefined;
  /** Strides in elements (default: C order). */
  readonly strides?: readonly number[] | undefined;
  /** Reinterpret the bytes as this dtype (checked against the source's byte length). */
  readonly dtype?: DType | undefined;
  /** Elements (of the exported dtype) from the start of the source to element 0; needed when
   * strides are negative. Default 0. */
  readonly offset?: number | undefined;
  /** Export read-only even if the source is writable. */
  readonly readonly?: boolean | undefined;
}

/** What can be exported. */
export type Exportable = BufferView | AnyTypedArray;

const READ_ONLY = Flag.readOnly;
const IS_COPIED = Flag.isCopied;
const SUBBYTE_PADDED = Flag.isSubbyteTypePadded;
/** `dlpk_export` option bits (zig/src/root.zig). */
export const EXPORT_VERSIONED = ExportOption.versioned;
/** The export takes over the caller's owner reference. */
export const EXPORT_ADOPT_OWNER = ExportOption.adoptOwner;

/** @internal An export's layout. */
export interface Layout {
  info: DTypeInfo;
  shape: readonly number[];
  strides: readonly number[];
  /** Byte offset of element 0 from the source's first byte. */
  byteOffset: number;
}

/** Export options as read from the caller's object: each field exactly once, the shape already
 * copied and checked (a getter or Proxy sees one read and cannot change what was validated). */
interface Options {
  shape: number[] | undefined;
  /** Checked against the rank (and copied) when the layout is resolved. */
  strides: unknown;
  info: DTypeInfo | undefined;
  /** Checked when the layout is resolved; null means the default. */
  offset: unknown;
  readonly: boolean;
}

const NO_OPTIONS: Options = {
  shape: undefined,
  strides: undefined,
  info: undefined,
  offset: undefined,
  readonly: false,
};

function readOptions(options: ExportOptions | null | undefined): Options | undefined {
  if (options === undefined || options === null) return undefined;
  const o = optionsObject(options, "export options");
  const shape: unknown = o.shape;
  const strides: unknown = o.strides;
  const dtype: unknown = o.dtype;
  const offset: unknown = o.offset;
  const readonly = optionalBoolean(o.readonly, "readonly") === true;
  return {
    shape: shape === undefined ? undefined : checkShape(shape),
    strides,
    info: dtype === undefined ? undefined : dtypeInfo(dtype as DType),
    offset,
    readonly,
  };
}

/** Whether the options change the layout (else the source's own layout is exported). */
function reshapes(opts: Options | undefined): opts is Options {
  return opts !== undefined &&
    (opts.shape !== undefined || opts.strides !== undefined || opts.info !== undefined ||
      (opts.offset !== undefined && opts.offset !== null));
}

/** Resolves shape/strides/dtype/offset options against a source of `byteLength` bytes whose
 * natural layout is given, and checks every element stays inside those bytes. */
function resolveLayout(
  natural: { info: DTypeInfo; shape: readonly number[]; strides: readonly number[] | undefined; zeroAt: number },
  byteLength: number,
  padded: boolean,
  opts: Options,
): Layout {
  const info = opts.info ?? natural.info;
  const bits = info.bits < 8 && padded ? 8 : info.bits;
  let shape: readonly number[];
  if (opts.shape !== undefined) shape = opts.shape;
  else if (opts.info === undefined || info === natural.info) shape = natural.shape;
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
  let strides: readonly number[];
  if (opts.strides !== undefined) strides = checkStrides(opts.strides, shape.length);
  else if (opts.shape === undefined && opts.info === undefined && natural.strides !== undefined) {
    strides = natural.strides;
  } else strides = cStrides(shape);
  const given = opts.offset;
  const offset: unknown = given === undefined || given === null
    ? (opts.shape === undefined && opts.info === undefined ? natural.zeroAt : 0)
    : given;
  if (!isCount(offset)) {
    throw new DLPackError(
      "byte_offset",
      `offset must be a non-negative integer number of elements, got ${shown(offset)}`,
    );
  }
  const r = reach(shape, strides);
  if (r.hi >= r.lo) {
    const first = (offset + r.lo) * bits;
    const end = (offset + r.hi + 1) * bits;
    if (first < 0 || end > byteLength * 8) {
      throw new DLPackError(
        "shape",
        `shape ${listText(shape)} with strides ${listText(strides)} and offset ${offset} reaches ` +
          `${first < 0 ? `${-first / 8} bytes before` : `byte ${ceil(end / 8)} of`} a ${byteLength}-byte source`,
      );
    }
  }
  if ((offset * bits) % 8 !== 0) throw new DLPackError("byte_offset", `element 0 must start on a byte boundary`);
  return { info, shape, strides, byteOffset: (offset * bits) / 8 };
}

/** Writes layout, device, dtype and flags of an export spec into the scratch. */
export function writeLayout(s: Scratch, device: { type: DeviceType; id: number }, layout: Layout, flags: number): void {
  s.setLayout(layout.shape, layout.strides);
  s.i32[I32.deviceType] = deviceCode(device.type);
  s.i32[I32.deviceId] = device.id;
  s.u32[U32.code] = layout.info.dl.code;
  s.u32[U32.bits] = layout.info.dl.bits;
  s.u32[U32.flags] = flags;
}

/** The error of a failed native export (nothing was built, nothing is owed). */
function exportError(status: number, s: Scratch, what: string): DLPackError {
  if (status === Status.outOfMemory) {
    return new DLPackError("library", `out of memory while building the export of ${what}`);
  }
  return refusalError(status, s, null);
}

/**
 * Builds the struct the scratch describes (pinning `pinned` when given: a TypedArray whose memory
 * it points into) and returns its capsule. The native call and the capsule happen in this one
 * frame: once the struct exists it is owned here, and any exception before the capsule holds it
 * (an exhausted stack included) deletes it (deferred when even that cannot run now), which also
 * releases what it pinned or retained.
 */
function buildCapsule(
  options: number,
  pinned: AnyTypedArray | undefined,
  byteLength: number,
  versioned: boolean,
): Capsule {
  const lib = core();
  const at = scratch.at;
  const id = pinned === undefined ? 0 : newPinId();
  const realm = pinned === undefined ? 0 : realmAddress();
  let address = 0;
  try {
    const status = pinned === undefined
      ? lib.dlpk_export(options, at)
      : lib.dlpk_export_buffer(pinned, realm, id, byteLength, options, at);
    if (status !== 0) throw exportError(status, scratch, pinned === undefined ? "a view" : `${byteLength} bytes`);
    address = scratch.u32[U32.addressHi] * 0x1_0000_0000 + scratch.u32[U32.addressLo];
    // The pin keeps the TypedArray (and its buffer) reachable until the consumer releases the export.
    if (pinned !== undefined) recordPin(id, pinned);
    return new Capsule(address, versioned);
  } catch (error) {
    if (address !== 0) {
      deferredNumbers[deferredCount[0]++] = -(address * 2 + (versioned ? 1 : 0));
      retryQuietly();
    }
    throw error;
  }
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
  return buildCapsule((versioned ? EXPORT_VERSIONED : 0) | (adopt ? EXPORT_ADOPT_OWNER : 0), undefined, 0, versioned);
}

/**
 * TypedArrays already exported whole, by identity, with their dtype: only arrays over a
 * fixed-length, non-shared ArrayBuffer. Everything such an export checks (the brand, the element
 * type, the buffer and whether it can resize or is shared) is fixed for the life of the array,
 * except detachment, which the byte length shows (0) and which sends the export the full way. An
 * identity can be neither forged nor proxied, and a WeakMap keeps no array alive: exporting the
 * same array again reads one getter instead of five.
 */
const wholeArrays = newWeakMap<object, DTypeInfo>();

/** The TypedArray facts every export needs, read through the intrinsics. */
function typedArraySource(x: AnyTypedArray, tag: string): { info: DTypeInfo; byteLength: number } {
  // The buffer first: in Bun that also moves a small array's storage out of the GC heap, so the
  // pointer the runtime passes stays valid.
  const buffer = typedArrayBuffer(x);
  const state = bufferState(buffer);
  if ((state & RESIZABLE) !== 0) {
    throw new DLPackError(
      "null_data",
      "resizable ArrayBuffers can shrink or move under a consumer; export a fixed-length buffer instead",
    );
  }
  const info = infoOfTag(tag);
  if (info === undefined) throw new DLPackError("dtype", `a ${tag} has no dtype this library exports`);
  const byteLength = typedArrayByteLength(x);
  if (byteLength === 0 && (state & SHARED) === 0 && isDetached(buffer as ArrayBuffer)) {
    throw new DLPackError("disposed", "the TypedArray's ArrayBuffer is detached");
  }
  if (state === 0 && byteLength > 0) wholeArrays.set(x, info);
  return { info, byteLength };
}

function exportTypedArray(
  x: AnyTypedArray,
  tag: string,
  opts: Options | undefined,
  versioned: boolean,
  flags: number,
): Capsule {
  const { info, byteLength } = typedArraySource(x, tag);
  if (opts === undefined && byteLength > 0) return exportWholeArray(x, info, byteLength, versioned, flags);
  const natural = { info, shape: [byteLength / info.slotBytes], strides: undefined, zeroAt: 0 };
  const layout = resolveLayout(natural, byteLength, false, opts ?? NO_OPTIONS);
  const readonly = opts !== undefined && opts.readonly;
  if (readonly && !versioned) throw legacyReadOnly();
  const exportFlags = flags | (readonly ? READ_ONLY : 0);
  if (byteLength === 0) {
    // Nothing to point at (and nothing to pin): a NULL data pointer, as DLPack asks for size 0.
    return build(0, 0, false, { type: "cpu", id: 0 }, layout, exportFlags, versioned);
  }
  // One native call pins the TypedArray and builds the struct; the runtime passes its data pointer.
  const s = scratch;
  s.setAddress(layout.byteOffset);
  writeLayout(s, { type: "cpu", id: 0 }, layout, exportFlags);
  return exportBuffer(x, byteLength, versioned);
}

/** The common export: a whole TypedArray, 1-D, no options. One native call takes its facts as
 * arguments (nothing goes through the scratch; the element count follows from the bytes) and
 * returns the struct's address; as in {@link buildCapsule}, once the struct exists it is owned
 * here until the capsule holds it. */
function exportWholeArray(
  x: AnyTypedArray,
  info: DTypeInfo,
  byteLength: number,
  versioned: boolean,
  flags: number,
): Capsule {
  // A Worker's pin may be offered to the main thread (shared memory), which needs the pin's native
  // address: recordPin reads it from the scratch, which the described export writes.
  if (!onMainThread) return exportDescribedArray(x, info, byteLength, versioned, flags);
  const id = newPinId();
  const realm = realmAddress();
  // The elements are the bytes' (whole arrays only); everything else in one word.
  const word = (info.dl.code | (info.dl.bits << ArrayWord.bitsShift) | (flags << ArrayWord.flagsShift) |
    ((versioned ? EXPORT_VERSIONED : 0) << ArrayWord.optionsShift)) >>> 0;
  let address = 0;
  try {
    const made = core().dlpk_export_array(x, realm, id, byteLength, word);
    // This entry writes no refusal details into the scratch: only out-of-memory is a caller's
    // situation; anything else means the facts read here disagreed with each other.
    if (made <= 0) {
      if (-made === Status.outOfMemory) throw exportError(-made, scratch, `${byteLength} bytes`);
      throw new DLPackError("library", `the native export refused the facts of ${byteLength} bytes (status ${-made})`);
    }
    address = made;
    // The pin keeps the TypedArray (and its buffer) reachable until the consumer releases the export.
    recordPin(id, x);
    return new Capsule(address, versioned);
  } catch (error) {
    if (address !== 0) {
      deferredNumbers[deferredCount[0]++] = -(address * 2 + (versioned ? 1 : 0));
      retryQuietly();
    }
    throw error;
  }
}

/** {@link exportWholeArray} through the scratch (the pin's address is left there). */
function exportDescribedArray(
  x: AnyTypedArray,
  info: DTypeInfo,
  byteLength: number,
  versioned: boolean,
  flags: number,
): Capsule {
  const s = scratch;
  s.setAddress(0);
  s.i32[I32.ndim] = 1;
  s.f64[F64.shape] = byteLength / info.slotBytes;
  s.f64[F64.strides] = 1;
  s.i32[I32.deviceType] = 1;
  s.i32[I32.deviceId] = 0;
  s.u32[U32.code] = info.dl.code;
  s.u32[U32.bits] = info.dl.bits;
  s.u32[U32.flags] = flags;
  return exportBuffer(x, byteLength, versioned);
}

/** Pins `x` and builds its struct from the spec in the scratch (`byteLength` read through the
 * intrinsics: the native side trusts it as the extent of the memory). */
function exportBuffer(x: AnyTypedArray, byteLength: number, versioned: boolean): Capsule {
  return buildCapsule(versioned ? EXPORT_VERSIONED : 0, x, byteLength, versioned);
}

function exportView(view: BufferView, opts: Options | undefined, versioned: boolean, flags: number): Capsule {
  const owner = ownerOf(view); // throws "disposed" for a disposed view
  const flagBits = flagsOf(view);
  const access = accessOf(view);
  const info = infoOf(view);
  const shape = shapeOf(view);
  const strides = stridesOf(view);
  const device = deviceOfView(view);
  const padded = (flagBits & SUBBYTE_PADDED) !== 0;
  const optReadonly = opts !== undefined && opts.readonly;
  if (!versioned && (optReadonly || access === "readonly")) throw legacyReadOnly();
  const readonly = optReadonly || access !== "readwrite";
  let data = addressOf(view);
  let layout: Layout;
  if (!reshapes(opts)) layout = { info, shape, strides, byteOffset: 0 };
  else {
    // Reinterpretation: the new layout must stay inside the bytes the view can reach.
    const slotBits = info.bits < 8 && padded ? 8 : info.bits;
    const r = reach(shape, strides);
    const spanStart = r.hi < r.lo ? 0 : floor((r.lo * slotBits) / 8);
    const spanBytes = r.hi < r.lo ? 0 : ceil(((r.hi + 1) * slotBits) / 8) - spanStart;
    const zeroAt = (-spanStart * 8) / slotBits;
    layout = resolveLayout({ info, shape, strides, zeroAt }, spanBytes, padded, opts);
    data = data + spanStart + layout.byteOffset;
  }
  const exportFlags = flags | (readonly ? READ_ONLY : 0) | (padded && layout.info.bits < 8 ? SUBBYTE_PADDED : 0);
  // Read again: the options' getters (run by resolveLayout) may have disposed the view since.
  ownerOf(view);
  const capsule = build(data, owner, false, device, layout, exportFlags, versioned);
  // CUDA data with a recorded producer stream: the export carries it and an event recorded on it.
  try {
    attachProducerStream(capsule, view);
  } catch (error) {
    deferredObjects[deferredObjectCount[0]++] = capsule; // parked before any call: the stack may be exhausted
    retryQuietly();
    throw error;
  }
  return capsule;
}

function legacyReadOnly(): DLPackError {
  return new DLPackError(
    "readonly",
    "the legacy DLManagedTensor cannot mark data read-only; export it versioned (exportDLPack) or from a writable source",
  );
}

function exportAny(x: Exportable, options: ExportOptions | undefined, versioned: boolean, flags = 0): Capsule {
  releaseDeferred();
  // No options (the common case) stays undefined: the whole-array export takes a fast path then.
  const opts = readOptions(options);
  if (opts === undefined) {
    // An array exported before: still a TypedArray of that dtype over the same fixed-length buffer.
    const known = wholeArrays.get(x);
    if (known !== undefined) {
      const byteLength = typedArrayByteLength(x as AnyTypedArray);
      if (byteLength > 0) return exportWholeArray(x as AnyTypedArray, known, byteLength, versioned, flags);
    }
  }
  // The engine's brand, not instanceof or .constructor: own properties and prototypes can lie.
  const tag = typedArrayTag(x);
  if (tag !== undefined) return exportTypedArray(x as AnyTypedArray, tag, opts, versioned, flags);
  if (isBufferView(x)) return exportView(x, opts, versioned, flags);
  throw new DLPackError("argument", `export takes a BufferView or a TypedArray, got ${shown(x)}`);
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

/** @internal A view over a TypedArray's own memory (pinned while the view lives), as `info` with
 * `shape` in C order; the caller checked the TypedArray's type and length. */
export function typedArrayView(x: AnyTypedArray, info: DTypeInfo, shape: readonly number[]): BufferView {
  const tag = typedArrayTag(x);
  if (tag === undefined) throw new DLPackError("argument", `expected a TypedArray, got ${shown(x)}`);
  const opts: Options = { shape: shape as number[], strides: undefined, info, offset: undefined, readonly: false };
  return adoptCapsule(exportTypedArray(x, tag, opts, true, 0));
}

/** @internal A view of this library's own fresh export; the capsule is disposed if the import fails. */
export function adoptCapsule(capsule: Capsule): BufferView {
  try {
    return importCapsule(capsule, "dlpack-ts");
  } catch (error) {
    // Disposed unless the import took it (the disposer checks).
    deferredObjects[deferredObjectCount[0]++] = capsule;
    retryQuietly();
    throw error;
  }
}

/** `__dlpack__` keyword arguments in camelCase (the Python array API's names). */
export interface DLPackProtocolOptions {
  /** The highest version the consumer reads; absent or below (1, 0) asks for the legacy struct. */
  readonly maxVersion?: readonly [number, number] | null | undefined;
  /** true: always copy (IS_COPIED set); false: never copy (refuse if one is needed). */
  readonly copy?: boolean | null | undefined;
  /** The device the consumer wants the data on, as [device type code, id]. */
  readonly dlDevice?: readonly [number, number] | null | undefined;
  /** The consumer's stream (protocol values: null/undefined = legacy default stream, -1 = no
   * synchronization, 0 refused, 1 legacy default, 2 per-thread default, larger = a handle). Only
   * null/undefined is allowed for host data. */
  readonly stream?: unknown;
}

/** `view.__dlpack__(opts)`: the producer side of the protocol with the Python keyword semantics. */
export function viewDLPack(view: BufferView, options?: DLPackProtocolOptions): Capsule {
  const opts = optionsObject(options, "__dlpack__ options");
  // Each option read exactly once.
  const maxVersion: unknown = opts.maxVersion;
  const copyOption: unknown = opts.copy;
  const dlDevice: unknown = opts.dlDevice;
  const stream: unknown = opts.stream;
  let versioned = false;
  if (maxVersion !== undefined && maxVersion !== null) {
    const max = intPair(maxVersion);
    if (max === undefined) {
      throw new DLPackError(
        "version",
        `maxVersion must be [major, minor] (non-negative integers), got ${shown(maxVersion)}`,
      );
    }
    versioned = max[0] >= 1;
  }
  const copy = copyOption === null ? undefined : optionalBoolean(copyOption, "copy");
  const device = deviceOfView(view);
  if (dlDevice !== undefined && dlDevice !== null) {
    const wanted = intPair(dlDevice);
    if (wanted === undefined) {
      throw new DLPackError("device", `dlDevice must be [device type, id] (integers), got ${shown(dlDevice)}`);
    }
    const mine = deviceCode(device.type);
    if (wanted[0] !== mine || wanted[1] !== device.id) {
      throw new DLPackError(
        "device",
        `cannot export ${device.type}:${device.id} data to device (${wanted[0]}, ${wanted[1]})${
          copy === false ? " without a copy" : ""
        }`,
      );
    }
  }
  // CUDA data: the consumer's stream waits for the view's producer stream (host data: None only).
  fenceForConsumer(view, stream);
  if (copy === true) {
    const copied = copyOf(view);
    try {
      return exportAny(copied, undefined, versioned, IS_COPIED);
    } finally {
      try {
        disposeView(copied);
      } catch {
        deferredObjects[deferredObjectCount[0]++] = copied;
      }
    }
  }
  return exportAny(view, undefined, versioned);
}

/** A caller's `[a, b]` of non-negative integers, read once into a fresh pair; else undefined. */
function intPair(value: unknown): [number, number] | undefined {
  if (!isArray(value)) return undefined;
  const length: unknown = value.length;
  if (length !== 2) return undefined;
  const a: unknown = value[0];
  const b: unknown = value[1];
  return isCount(a) && isCount(b) ? [a, b] : undefined;
}

registerViewOps({ dlpack: viewDLPack, typedArrayView });
