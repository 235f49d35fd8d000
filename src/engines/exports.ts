/**
 * Export struct building: the DLPack struct of a TypedArray (pinned until the consumer's deleter
 * has run) or of a view's state (which retains the view's owner record, and so the first producer
 * of a chain), held by a capsule; and the producer side of the `__dlpack__` protocol.
 * @module
 */
import { core, runtime } from "../../ffi/mod.ts";
import { DLPackError, optionalBoolean, optionsObject, shown } from "../facts/errors.ts";
import type { AnyTypedArray, DTypeInfo } from "../facts/dtypes.ts";
import { deviceCode, type DeviceType } from "../facts/devices.ts";
import { F64, I32, type Scratch, scratch, Status, U32 } from "../native/scratch.ts";
import { refusalError } from "../native/refusals.ts";
import { reach } from "../facts/layout.ts";
import { releaseTop } from "../native/journal.ts";
import { newPinId, pinsRecorded, realmAddress, recordPin } from "../native/pins.ts";
import { type Capsule, capsuleOf } from "../native/capsule.ts";
import { offerBeyondRealm } from "../native/keepers.ts";
import { copyOf } from "./copy.ts";
import {
  type ExportOptions,
  type Layout,
  NO_OPTIONS,
  type Options,
  reshapes,
  resolveLayout,
  typedArraySource,
} from "./arrays.ts";
import { attachProducerStream, fenceForConsumer } from "./streams.ts";
import type { ViewState } from "./state.ts";
import { ceil, floor, isArray, isCount } from "../facts/intrinsics.ts";
import { ArrayWord, ExportOption, Flag } from "../facts/abi.ts";

export type { ExportOptions };

const onMainThread = runtime().mainThread;

const READ_ONLY = Flag.readOnly;
const IS_COPIED = Flag.isCopied;
const SUBBYTE_PADDED = Flag.isSubbyteTypePadded;
/** `dlpk_export` option bits (zig/src/abi.zig). */
export const EXPORT_VERSIONED = ExportOption.versioned;
/** The export takes over the caller's owner reference. */
export const EXPORT_ADOPT_OWNER = ExportOption.adoptOwner;

/** Writes layout, device, dtype and flags of an export spec into the scratch. */
function writeLayout(s: Scratch, device: { type: DeviceType; id: number }, layout: Layout, flags: number): void {
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
 * it points into; attaching `view`'s producer stream when it has one) and returns its capsule.
 * The native call journals the struct until the capsule holds it: an exception in between (an
 * exhausted stack included) leaves it to be deleted, which also releases what it pinned or
 * retained.
 */
function buildCapsule(
  options: number,
  pinned: AnyTypedArray | undefined,
  byteLength: number,
  versioned: boolean,
  view: ViewState | undefined,
): Capsule {
  const lib = core();
  const at = scratch.at;
  const id = pinned === undefined ? 0 : newPinId();
  const realm = pinned === undefined ? 0 : realmAddress();
  const status = pinned === undefined
    ? lib.dlpk_export(options, at)
    : lib.dlpk_export_buffer(pinned, realm, id, byteLength, options, at);
  if (status !== 0) throw exportError(status, scratch, pinned === undefined ? "a view" : `${byteLength} bytes`);
  const address = scratch.u32[U32.addressHi] * 0x1_0000_0000 + scratch.u32[U32.addressLo];
  if (pinned !== undefined) {
    // The export left the pin record it made in the scratch's owner field.
    const pinOwner = scratch.owner();
    // The pin keeps the TypedArray (and its buffer) reachable until the consumer releases the export.
    recordPin(id, pinned);
    const capsule = capsuleOf(address, versioned);
    // Caller code may run from here on (a release callback a sweep runs, a replaced postMessage).
    offerBeyondRealm(pinned, pinOwner);
    pinsRecorded();
    return capsule;
  }
  // CUDA data with a recorded producer stream: the export carries it and an event recorded on it.
  if (view !== undefined) attachProducerStream(address, versioned, view);
  return capsuleOf(address, versioned);
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
  view?: ViewState,
): Capsule {
  const s = scratch;
  s.setAddress(data);
  s.setOwner(owner);
  writeLayout(s, device, layout, flags);
  const options = (versioned ? EXPORT_VERSIONED : 0) | (adopt ? EXPORT_ADOPT_OWNER : 0);
  return buildCapsule(options, undefined, 0, versioned, view);
}

/** The export of a TypedArray (`tag`: its checked type). */
export function exportTypedArray(
  x: AnyTypedArray,
  tag: string,
  opts: Options | undefined,
  versioned: boolean,
  flags: number,
): Capsule {
  const { info, byteLength, shared } = typedArraySource(x, tag);
  if (opts === undefined && byteLength > 0) return exportWholeArray(x, info, byteLength, versioned, flags, shared);
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

/** The common export: a whole TypedArray, 1-D, no options (`shared`: over a SharedArrayBuffer).
 * One native call takes its facts as arguments (nothing goes through the scratch; the element
 * count follows from the bytes) and returns the struct's address, journaled (as in
 * {@link buildCapsule}) until the capsule holds it. */
export function exportWholeArray(
  x: AnyTypedArray,
  info: DTypeInfo,
  byteLength: number,
  versioned: boolean,
  flags: number,
  shared: boolean,
): Capsule {
  // A Worker's pin of shared memory is offered to the main thread, which needs the pin's native
  // address: the described export leaves it in the scratch. Memory that is not shared is never
  // offered, so a Worker exports it the main thread's way. perf(export + dispose in a Worker)
  if (shared && !onMainThread) return exportDescribedArray(x, info, byteLength, versioned, flags);
  const id = newPinId();
  const realm = realmAddress();
  const made = core().dlpk_export_array(x, realm, id, byteLength, wholeArrayWord(info, flags, versioned));
  // This entry writes no refusal details into the scratch: only out-of-memory is a caller's
  // situation; anything else means the facts read here disagreed with each other.
  if (made <= 0) throw arrayRefusal(made, byteLength);
  // The pin keeps the TypedArray (and its buffer) reachable until the consumer releases the export.
  recordPin(id, x);
  const capsule = capsuleOf(made, versioned);
  pinsRecorded();
  return capsule;
}

/** The facts of a whole-array export other than its extent, in the one word `dlpk_export_array`
 * takes: the elements are the bytes' (whole arrays only), everything else is here. */
export function wholeArrayWord(info: DTypeInfo, flags: number, versioned: boolean): number {
  return (info.dl.code | (info.dl.bits << ArrayWord.bitsShift) | (flags << ArrayWord.flagsShift) |
    ((versioned ? EXPORT_VERSIONED : 0) << ArrayWord.optionsShift)) >>> 0;
}

/** The error of a whole-array export that made nothing (`made`: minus its status). */
export function arrayRefusal(made: number, byteLength: number): DLPackError {
  if (-made === Status.outOfMemory) return exportError(-made, scratch, `${byteLength} bytes`);
  return new DLPackError("library", `the native export refused the facts of ${byteLength} bytes (status ${-made})`);
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
  return buildCapsule(versioned ? EXPORT_VERSIONED : 0, x, byteLength, versioned, undefined);
}

/** The export of a view's memory (its state taken after its options were read). */
export function exportView(view: ViewState, opts: Options | undefined, versioned: boolean, flags: number): Capsule {
  const f = view.facts;
  const access = view.access;
  const info = f.info;
  const shape = f.shape;
  const strides = f.strides;
  const padded = (f.origin.flags & SUBBYTE_PADDED) !== 0;
  const optReadonly = opts !== undefined && opts.readonly;
  if (!versioned && (optReadonly || access === "readonly")) throw legacyReadOnly();
  const readonly = optReadonly || access !== "readwrite";
  let data = view.address;
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
  return build(data, view.owner, false, f.device, layout, exportFlags, versioned, view);
}

function legacyReadOnly(): DLPackError {
  return new DLPackError(
    "readonly",
    "the legacy DLManagedTensor cannot mark data read-only; export it versioned (exportDLPack) or from a writable source",
  );
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

/** `__dlpack__` options as read from the caller's object: each once, checked. */
interface ProtocolOptions {
  readonly versioned: boolean;
  readonly copy: boolean | undefined;
  /** The consumer's [device type, id], or undefined for none. */
  readonly dlDevice: readonly [number, number] | undefined;
  readonly stream: unknown;
}

/** Reads the caller's `__dlpack__` options once (before any view's state is taken). */
export function readProtocolOptions(options: DLPackProtocolOptions | undefined): ProtocolOptions {
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
  let wanted: [number, number] | undefined;
  if (dlDevice !== undefined && dlDevice !== null) {
    wanted = intPair(dlDevice);
    if (wanted === undefined) {
      throw new DLPackError("device", `dlDevice must be [device type, id] (integers), got ${shown(dlDevice)}`);
    }
  }
  return { versioned, copy, dlDevice: wanted, stream };
}

/** `view.__dlpack__(opts)`: the producer side of the protocol with the Python keyword semantics
 * (`o` read by {@link readProtocolOptions}). */
export function protocolExport(view: ViewState, o: ProtocolOptions): Capsule {
  const device = view.facts.device;
  if (o.dlDevice !== undefined) {
    const mine = deviceCode(device.type);
    if (o.dlDevice[0] !== mine || o.dlDevice[1] !== device.id) {
      throw new DLPackError(
        "device",
        `cannot export ${device.type}:${device.id} data to device (${o.dlDevice[0]}, ${o.dlDevice[1]})${
          o.copy === false ? " without a copy" : ""
        }`,
      );
    }
  }
  // CUDA data: the consumer's stream waits for the view's producer stream (host data: None only).
  fenceForConsumer(view, o.stream);
  if (o.copy !== true) return exportView(view, undefined, o.versioned, 0);
  // The copy is journaled until it is released, after the export (which holds its own reference
  // on it) has its capsule; an exception in between leaves both to be released.
  const copied = copyOf(view);
  const state = { owner: copied.owner, address: copied.address, facts: copied.facts, access: copied.access };
  const capsule = exportView({ ...state, key: copied }, undefined, o.versioned, IS_COPIED);
  releaseTop(copied.owner);
  return capsule;
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
