/**
 * `BufferView`: one class for every imported tensor and every library allocation. It reads
 * element by element honouring strides, hands out zero-copy TypedArrays for host memory, checks
 * requirements, and releases its share of the memory exactly once.
 * @module
 */
import { core, runtime } from "../../ffi/mod.ts";
import { copyStreamOption, DLPackError, shown } from "../facts/errors.ts";
import type {
  AnyTypedArray,
  ArrayOf,
  Complex,
  DLDataType,
  DType,
  DTypeInfo,
  MiniFloatDType,
  Scalar,
  ScalarOf,
} from "../facts/dtypes.ts";
import { type Device, deviceCode, deviceOf, formatDevice, isHostAccessible } from "../facts/devices.ts";
import { bfloat16ToNumber, decodeMiniFloat, encodeMiniFloat } from "../facts/scalars.ts";
import {
  deferredCount,
  deferredNumbers,
  deferredObjectCount,
  deferredObjects,
  LazyBackstop,
  Owner,
  registerDisposer,
  type Releasable,
  releaseOwner,
  retryQuietly,
} from "../native/owner.ts";
import type { Requirements } from "../ops/requirements.ts";
import {
  DEVICE_VERIFIED,
  F64,
  I32,
  KEY_ADDRESS,
  KEY_GENERATION,
  LAYOUT_C,
  LAYOUT_F,
  type Scratch,
  type ScratchF64,
  type ScratchU32,
  U32,
} from "../native/description.ts";
import { infoOfTriple } from "../facts/dtypes.ts";
import type { DLPackProtocolOptions } from "../ops/export.ts";
import type { Capsule } from "../native/capsule.ts";
import type { CopyOptions } from "../ops/copy.ts";
import { viewOps } from "./hooks.ts";
import {
  applyTo,
  DENO_INSPECT,
  formatView,
  hexAddress,
  type InspectFacts,
  NODE_INSPECT,
  type ViewJSON,
  viewJSON,
} from "./inspect.ts";
import type { SliceItem } from "../facts/shape.ts";
import { encodeElement, expectNumber, readBits, writeBits } from "./codec.ts";
import {
  ArrayBufferCtor,
  ceil,
  detach,
  floor,
  freeze,
  isArray,
  isDetached,
  newSet,
  numbersFrom,
  ObjectCtor,
  pinInstanceof,
  slots,
  toBigInt,
  typedArrayLength,
  typedArrayTag,
} from "../facts/intrinsics.ts";
import { listText, nextOffset } from "../facts/layout.ts";
import { Flag, ImportOption } from "../facts/abi.ts";

/** Whether a view may be written: as the producer declared it, or unknown (legacy struct). */
export type Access = "readwrite" | "readonly" | "unknown";

/** The versioned struct's flags, decoded. */
export interface Flags {
  /** READ_ONLY: the consumer must not write. */
  readonly readOnly: boolean;
  /** IS_COPIED: the producer made a copy for this export. */
  readonly isCopied: boolean;
  /** IS_SUBBYTE_TYPE_PADDED: sub-byte elements take a whole byte each. */
  readonly subbytePadded: boolean;
}

/** A DLPack version. */
export interface DLPackVersion {
  /** Incompatible ABI changes; this library reads major 1. */
  readonly major: number;
  /** Compatible additions. */
  readonly minor: number;
}

/** A fixed-length tuple type (`Tuple<number, 2>` is `[number, number]`). */
export type Tuple<T, N extends number> = number extends N ? T[] : BuildTuple<T, N, []>;
/** Builds {@link Tuple} one element at a time. */
export type BuildTuple<T, N extends number, R extends T[]> = R["length"] extends N ? R : BuildTuple<T, N, [...R, T]>;

/**
 * @internal Rarely read facts of where a view came from, shared by every view that has the same
 * (most imports of one producer do): nothing per view is allocated for them.
 */
export interface ViewOrigin {
  /** The producer's name when known (`view.producer`). */
  readonly producer: string | null;
  /** "external" for imports, the library's name for its own memory (`view.owner`). */
  readonly ownerName: string;
  /** The producer's DLPack version; null for the legacy struct. */
  readonly version: DLPackVersion | null;
  /** The versioned struct's raw flag bits. */
  readonly flags: number;
  /** The device claim is confirmed (host memory, or the CUDA driver agreed). */
  readonly verified: boolean;
}

/**
 * @internal A view's immutable layout: built once, never changed, and shared by views of the same
 * layout. `shape` and `strides` are the view's own arrays, frozen when first handed out.
 */
export interface ViewFacts {
  readonly info: DTypeInfo;
  readonly shape: readonly number[];
  /** In elements. */
  readonly strides: readonly number[];
  readonly size: number;
  /** Bytes of the elements (`size` x item size; packed sub-byte types round up). */
  readonly nbytes: number;
  /** Lowest and highest element offsets from element 0 (min <= 0 <= max unless empty). */
  readonly minOffset: number;
  readonly maxOffset: number;
  /** Layout bits (LAYOUT_C, LAYOUT_F). */
  readonly layout: number;
  readonly device: Device;
  readonly origin: ViewOrigin;
}

const READ_ONLY = Flag.readOnly;
const IS_COPIED = Flag.isCopied;
const SUBBYTE_PADDED = Flag.isSubbyteTypePadded;

/** Ties a handed-out ArrayBuffer to its view: the view (and its memory) lives while the buffer does.
 * A private field stamped onto the buffer (the constructor returns the buffer itself): unlike a
 * property, no setter or Proxy a caller puts on ArrayBuffer.prototype's chain can intercept it. */
class Stamp {
  constructor(target: object) {
    return target;
  }
}
class BufferLink extends Stamp {
  #view: BufferView;
  constructor(buffer: ArrayBuffer, view: BufferView) {
    super(buffer);
    this.#view = view;
  }
  static viewOf(buffer: object): BufferView | undefined {
    return #view in buffer ? (buffer as BufferLink).#view : undefined;
  }
}

/** The view an `array()` buffer belongs to (tests use it to check the link). */
export function viewOfBuffer(buffer: object): BufferView | undefined {
  return BufferLink.viewOf(buffer);
}

/** The library's name, recorded as `owner` on memory it allocated. */
export const LIBRARY_NAME = "dlpack-ts";

/** Releases the share of views collected without `dispose()` (only a backstop). */
const views = new LazyBackstop<number>(
  (owner) => releaseOwner(owner),
  (holder) => liveView(holder),
);

let construct: (owner: number, address: number, facts: ViewFacts, access: Access, keepAlive: unknown) => BufferView;
let derive: (base: BufferView, layout: DerivedLayout) => BufferView;
let branded: (x: object) => boolean;
let liveView: (x: object) => boolean;
let internals: Internals;

/** What library modules read of a view: its own fields, through nothing a caller can replace
 * (the public getters live on a prototype anyone can redefine). */
interface Internals {
  /** The native owner record; throws "disposed" for a disposed view. */
  owner(view: BufferView): number;
  address(view: BufferView): number;
  facts(view: BufferView): ViewFacts;
  access(view: BufferView): Access;
  dispose(view: BufferView): void;
  array(view: BufferView): AnyTypedArray;
  toArray(view: BufferView): AnyTypedArray;
  keepAlive(view: BufferView): Owner;
}

/**
 * @internal The one way to make a view. It takes over one share of the native owner record `owner`
 * (for a view derived from another, `dlpk_owner_retain` it first); if this throws, the caller still
 * holds that share. `address` is element 0's; `facts` may be shared with other views (build it with
 * {@link viewFacts}); `keepAlive` is a JS value kept reachable while the view lives.
 */
export function newView(
  owner: number,
  address: number,
  facts: ViewFacts,
  access: Access,
  keepAlive?: unknown,
): BufferView {
  return construct(owner, address, facts, access, keepAlive);
}

/** @internal The facts of a view (shared, immutable: derive new ones with {@link viewFacts}). */
export function factsOf(view: BufferView): ViewFacts {
  return internals.facts(view);
}

let lastOrigin: ViewOrigin = freeze({ producer: null, ownerName: "", version: null, flags: 0, verified: true });

/** @internal The origin record for these values: the last one made when it matches, else a new one. */
export function viewOrigin(
  producer: string | null,
  ownerName: string,
  major: number,
  minor: number,
  flags: number,
  verified: boolean,
): ViewOrigin {
  const last = lastOrigin;
  const version = last.version;
  if (
    last.producer === producer && last.ownerName === ownerName && last.flags === flags &&
    last.verified === verified &&
    (version === null ? major < 0 : version.major === major && version.minor === minor)
  ) return last;
  return lastOrigin = freeze({
    producer,
    ownerName,
    version: major < 0 ? null : freeze({ major, minor }),
    flags,
    verified,
  });
}

/** @internal Where a layout's elements lie: fresh arrays the caller no longer changes (strides in
 * elements), the element count and bytes, the lowest and highest element offsets from element 0,
 * and the layout bits. */
export interface Extents {
  readonly shape: number[];
  readonly strides: number[];
  readonly size: number;
  readonly nbytes: number;
  readonly minOffset: number;
  readonly maxOffset: number;
  readonly layout: number;
}

/** @internal What {@link viewFacts} takes: a view's layout (arrays the caller made and no longer
 * changes) and where it came from. */
export interface FactsInit extends Extents {
  readonly info: DTypeInfo;
  readonly device: Device;
  readonly origin: ViewOrigin;
}

/** @internal The facts record of a layout (a fresh object: the caller's is never kept). */
export function viewFacts(init: FactsInit): ViewFacts {
  return {
    info: init.info,
    shape: init.shape,
    strides: init.strides,
    size: init.size,
    nbytes: init.nbytes,
    minOffset: init.minOffset,
    maxOffset: init.maxOffset,
    layout: init.layout,
    device: init.device,
    origin: init.origin,
  };
}

/** @internal The native owner record of a live view (throws "disposed"). */
export function ownerOf(view: BufferView): number {
  return internals.owner(view);
}
/** @internal Element 0's address. */
export function addressOf(view: BufferView): number {
  return internals.address(view);
}
/** @internal The dtype table entry. */
export function infoOf(view: BufferView): DTypeInfo {
  return internals.facts(view).info;
}
/** @internal The view's own shape array (never written). */
export function shapeOf(view: BufferView): readonly number[] {
  return internals.facts(view).shape;
}
/** @internal The view's own strides array (never written). */
export function stridesOf(view: BufferView): readonly number[] {
  return internals.facts(view).strides;
}
/** @internal Element count. */
export function sizeOf(view: BufferView): number {
  return internals.facts(view).size;
}
/** @internal Bytes of the elements. */
export function nbytesOf(view: BufferView): number {
  return internals.facts(view).nbytes;
}
/** @internal Layout bits (LAYOUT_C, LAYOUT_F). */
export function layoutBitsOf(view: BufferView): number {
  return internals.facts(view).layout;
}
/** @internal The device. */
export function deviceOfView(view: BufferView): Device {
  return internals.facts(view).device;
}
/** @internal The access. */
export function accessOf(view: BufferView): Access {
  return internals.access(view);
}
/** @internal The raw flag bits. */
export function flagsOf(view: BufferView): number {
  return internals.facts(view).origin.flags;
}
/** @internal Disposes a view (idempotent). */
export function disposeView(view: BufferView): void {
  internals.dispose(view);
}
/** @internal `view.array()`. */
export function arrayOf(view: BufferView): AnyTypedArray {
  return internals.array(view);
}
/** @internal `view.toArray()`. */
export function toArrayOf(view: BufferView): AnyTypedArray {
  return internals.toArray(view);
}

/** @internal `view.keepAlive`. */
export function keepAliveOf(view: BufferView): Owner {
  return internals.keepAlive(view);
}

/** @internal The layout of a view derived from another (`slice`, `reshape`, ...), over the same
 * memory; the view operations compute it from the base's own shape and strides. */
export interface DerivedLayout extends Extents {
  /** Bytes from the base's element 0 to the new element 0. */
  readonly byteOffset: number;
  /** The result may not be written even if the base may (a broadcast repeats elements). */
  readonly readonly: boolean;
}

/** @internal A new view over part of `base`'s memory, holding its own share of the same owner:
 * disposing either leaves the other intact. Refused ("disposed") for a disposed base. */
export function deriveView(base: BufferView, layout: DerivedLayout): BufferView {
  return derive(base, layout);
}

/**
 * @internal Makes a view from the description a native call just wrote (the import hot path: no
 * intermediate objects). Its owner share passes to the view; if building fails, it is released.
 */
export function viewFromScratch(
  s: Scratch,
  access: Access,
  producer: string | null,
  ownerName: string,
  keepAlive?: unknown,
  verified?: boolean,
): BufferView {
  // Read without a call, so nothing can throw between the native call and the try.
  const owner = s.u32[U32.ownerHi] * 0x1_0000_0000 + s.u32[U32.ownerLo];
  try {
    return buildFromScratch(s, owner, access, producer, ownerName, keepAlive, verified);
  } catch (error) {
    // Deferred without a call first: the stack may be exhausted right here.
    deferredNumbers[deferredCount[0]++] = owner;
    retryQuietly();
    throw error;
  }
}

/**
 * @internal The view of the description a native call just wrote, holding `owner`. Throws only
 * before the view holds the owner (the caller then still owns it): the view's maker enters it into
 * the GC backstop as its very last step, and that step cannot throw once it has stored the view.
 */
export function buildFromScratch(
  s: Scratch,
  owner: number,
  access: Access,
  producer: string | null,
  ownerName: string,
  keepAlive?: unknown,
  verified?: boolean,
): BufferView {
  const u32 = s.u32;
  // Element 0's address; an empty tensor may put it anywhere, beyond 2^53 too (no JS number holds
  // that exactly), so that is refused here.
  const hi = u32[U32.addressHi];
  if (hi >= 0x200000) throw s.beyondExact();
  const address = hi * 0x1_0000_0000 + u32[U32.addressLo];
  // The same description as the last import (a program importing tensors of one layout over and
  // over): its facts are shared as they are, compared word for word without building anything.
  const facts = producer === lastProducer && ownerName === lastOwnerName && verified === undefined &&
      sameDescription(u32, s.f64)
    ? lastFacts
    : factsOfScratch(s, producer, ownerName, verified);
  return construct(owner, address, facts, access, keepAlive);
}

/**
 * @internal {@link buildFromScratch} for an import `dlpk_import_keyed` (or its pointer form) just
 * described: the native side moved the scratch's generation on unless every fact equals the last
 * keyed import's, so the facts (and the access, which the flags and the generation of the struct
 * decide) built for a generation are reused after one word compare.
 */
export let buildKeyed: (
  s: Scratch,
  owner: number,
  /** The native import's option bits (only `ImportOption.versioned` is read). */
  options: number,
  producer: string | null,
) => BufferView;

/** @internal {@link buildKeyed} for a view that keeps `keepAlive` reachable (rare: out of line, so
 * that the common one stays within the JIT's inlining budget). */
export function buildKeyedKeeping(
  s: Scratch,
  owner: number,
  options: number,
  producer: string | null,
  keepAlive: unknown,
): BufferView {
  const address = s.f64[KEY_ADDRESS];
  if (address < 0) throw s.beyondExact();
  keyedFactsOf(s, producer, options);
  return construct(owner, address, keyedFacts, keyedAccess, keepAlive);
}

/** @internal The access of an import: read-only when its flags say so (the producer's READ_ONLY, or
 * the native check found memory this process cannot write), else what the struct's generation
 * can say ("unknown" for the legacy struct, which has no flag). */
export function importAccess(versioned: boolean, flags: number): Access {
  return (flags & READ_ONLY) !== 0 ? "readonly" : versioned ? "readwrite" : "unknown";
}

/** The facts and access of a keyed import, remembered for its generation (nothing is remembered
 * if building them throws). */
function keyedFactsOf(s: Scratch, producer: string | null, options: number): void {
  const versioned = (options & ImportOption.versioned) !== 0;
  const generation = s.f64[KEY_GENERATION];
  const facts = factsOfScratch(s, producer, "external", undefined);
  keyedAccess = importAccess(versioned, s.u32[U32.flags]);
  keyedFacts = facts;
  keyedProducer = producer;
  keyedGeneration = generation;
}

/** The facts of the description in `s`, remembered (with its words) for the next import. */
function factsOfScratch(
  s: Scratch,
  producer: string | null,
  ownerName: string,
  verified: boolean | undefined,
): ViewFacts {
  const f64 = s.f64;
  const i32 = s.i32;
  const u32 = s.u32;
  const info = infoOfTriple(u32[U32.code], u32[U32.bits]);
  if (info === undefined) throw new DLPackError("dtype", "native and TS dtype tables disagree");
  const layout = u32[U32.layout];
  const origin = viewOrigin(
    producer,
    ownerName,
    i32[I32.major],
    i32[I32.minor],
    u32[U32.flags],
    // Unless the caller knows, the native check says (CPU memory, or a claim the CUDA driver confirmed).
    verified ?? (layout & DEVICE_VERIFIED) !== 0,
  );
  const device = deviceOf(i32[I32.deviceType], i32[I32.deviceId]);
  const ndim = i32[I32.ndim];
  const facts = factsFromScratch(f64, ndim, info, layout, device, origin);
  // Remembered only where the caller left `verified` to the native check (the words then say all).
  lastProducer = producer;
  lastOwnerName = ownerName;
  lastKeyed = verified === undefined && ndim >= 1 && ndim <= 2;
  lastFacts = facts;
  for (let i = KEY_FIRST; i <= KEY_LAST; i++) lastWords[i - KEY_FIRST] = u32[i]!;
  // size, nbytes, minOffset and maxOffset are consecutive fields.
  for (let i = 0; i < 4; i++) lastNumbers[i] = f64[F64.size + i]!;
  for (let i = 0; i < ndim && i < 2; i++) {
    lastNumbers[4 + i] = f64[F64.shape + i]!;
    lastNumbers[6 + i] = f64[F64.strides + i]!;
  }
  return facts;
}

/** The description words the facts derive from: ndim, device, version, flags, dtype, layout. */
const KEY_FIRST = I32.ndim;
const KEY_LAST = U32.layout;
const lastWords = new Uint32Array(KEY_LAST - KEY_FIRST + 1);
/** size, nbytes, minOffset, maxOffset, shape[0..2], strides[0..2] of the last description. */
const lastNumbers = new Float64Array(8);
let lastProducer: string | null = null;
let lastOwnerName = "";
/** Whether the words above stand for `lastFacts` (ranks 1 and 2, `verified` left to native). */
let lastKeyed = false;

/** Whether the description in the scratch is the one `lastFacts` was made from. */
function sameDescription(u32: ScratchU32, f64: ScratchF64): boolean {
  const w = lastWords;
  const n = lastNumbers;
  const ndim = u32[KEY_FIRST];
  if (!lastKeyed || ndim !== w[0]) return false;
  if (
    u32[KEY_FIRST + 1] !== w[1] || u32[KEY_FIRST + 2] !== w[2] || u32[KEY_FIRST + 3] !== w[3] ||
    u32[KEY_FIRST + 4] !== w[4] || u32[KEY_FIRST + 5] !== w[5] || u32[KEY_FIRST + 6] !== w[6] ||
    u32[KEY_FIRST + 7] !== w[7] || u32[KEY_FIRST + 8] !== w[8] || u32[KEY_FIRST + 9] !== w[9]
  ) return false;
  if (
    f64[F64.size] !== n[0] || f64[F64.nbytes] !== n[1] || f64[F64.minOffset] !== n[2] ||
    f64[F64.maxOffset] !== n[3] || f64[F64.shape] !== n[4] || f64[F64.strides] !== n[6]
  ) return false;
  return ndim === 1 || (f64[F64.shape + 1] === n[5] && f64[F64.strides + 1] === n[7]);
}

/** The facts of the last import, shared by the next one when its layout is the same: a program
 * importing tensors of one shape over and over (batches) allocates no layout per view. */
let lastFacts: ViewFacts = {
  info: infoOfTriple(2, 32)!,
  shape: [],
  strides: [],
  size: 1,
  nbytes: 4,
  minOffset: 0,
  maxOffset: 0,
  layout: 0,
  device: deviceOf(1, 0),
  origin: lastOrigin,
};

/** The generation of the keyed scratch {@link keyedFacts} was built for (-1: none yet; the
 * native generation starts at 0 and only grows). */
let keyedGeneration = -1;
let keyedProducer: string | null = null;
let keyedFacts: ViewFacts = lastFacts;
let keyedAccess: Access = "unknown";

function factsFromScratch(
  f64: ScratchF64,
  ndim: number,
  info: DTypeInfo,
  layout: number,
  device: Device,
  origin: ViewOrigin,
): ViewFacts {
  // Own elements from literals: a setter on Array.prototype never sees these values. Ranks 1 and
  // 2 are spelled out here, where the JIT sees them on the import path.
  const shape = ndim === 1
    ? [f64[F64.shape]]
    : ndim === 2
    ? [f64[F64.shape], f64[F64.shape + 1]!]
    : numbersFrom(f64, F64.shape, ndim);
  const strides = ndim === 1
    ? [f64[F64.strides]]
    : ndim === 2
    ? [f64[F64.strides], f64[F64.strides + 1]!]
    : numbersFrom(f64, F64.strides, ndim);
  return {
    info,
    shape,
    strides,
    size: f64[F64.size],
    nbytes: f64[F64.nbytes],
    minOffset: f64[F64.minOffset],
    maxOffset: f64[F64.maxOffset],
    layout,
    device,
    origin,
  };
}

/** Whether `x` really is a view this library made. `instanceof` is not enough: an object made with
 * `Object.create(BufferView.prototype)` passes it and then fails on the first private field. */
export function isBufferView(x: unknown): x is BufferView {
  return typeof x === "object" && x !== null && branded(x);
}

/** @internal A new ArrayBuffer of `bytes` for a copy in JS memory (`what` makes it), refused with
 * a DLPackError where the engine cannot make one that large (copy() gives library memory instead). */
export function jsBuffer(bytes: number, what: string): ArrayBuffer {
  try {
    return new ArrayBufferCtor(bytes);
  } catch {
    throw new DLPackError(
      "library",
      `${what} needs a JS ArrayBuffer of ${bytes} bytes, which this runtime could not allocate; ` +
        `copy() makes the copy in library memory, or take part of the view with slice()`,
    );
  }
}

/** The error of a BufferView method or getter called with a `this` that is no view (a method
 * taken off the prototype, an `Object.create(BufferView.prototype)` impostor): each checks its
 * receiver's private brand first, one check the engine folds into the field read that follows. */
function notAView(receiver: unknown, member: string): DLPackError {
  return new DLPackError("argument", `BufferView ${member} needs a BufferView as this, got ${shown(receiver)}`);
}

/** {@link ObjectCtor} in a constant of this module, which the JIT folds (an imported binding it
 * reads anew each time). */
const asObject: ObjectConstructor = ObjectCtor;

/** What printing something that only pretends to be a view shows (printing never throws). */
const NOT_A_VIEW_TEXT = "[an object that only pretends to be a BufferView]";

/** A zero-copy view of a tensor: an import, a library allocation, or a view over JS memory. */
export class BufferView {
  static {
    // The backstop entry is made here, after the constructor, not inside it: JavaScriptCore inlines
    // only 5 calls deep, and the import's chain down to the entry fits that only this way. Last:
    // once the backstop holds the view, nothing here throws.
    construct = (owner, address, facts, access, keepAlive) => {
      const view = new BufferView(owner, address, facts, access);
      if (keepAlive !== undefined) view.#extras = new Extras(keepAlive);
      view.#epoch = views.add(view, owner);
      return view;
    };
    // `construct` inlined by hand, for the same depth.
    buildKeyed = (s, owner, options, producer) => {
      const f64 = s.f64;
      const address = f64[KEY_ADDRESS];
      if (address < 0) throw s.beyondExact();
      if (f64[KEY_GENERATION] !== keyedGeneration || producer !== keyedProducer) keyedFactsOf(s, producer, options);
      const view = new BufferView(owner, address, keyedFacts, keyedAccess);
      view.#epoch = views.add(view, owner);
      return view;
    };
    pinInstanceof(this);
    derive = (v, d) => {
      const owner = internals.owner(v);
      const base = v.#facts;
      core().dlpk_owner_retain(owner);
      // The new reference is the new view's: if building it fails, give it back.
      try {
        const facts = viewFacts({
          info: base.info,
          shape: d.shape,
          strides: d.strides,
          size: d.size,
          nbytes: d.nbytes,
          minOffset: d.minOffset,
          maxOffset: d.maxOffset,
          layout: d.layout,
          device: base.device,
          origin: base.origin,
        });
        // A broadcast repeats elements, so it is never writable, whatever the base's access.
        const access = d.readonly ? "readonly" : v.#access;
        const extras = v.#extras;
        return construct(owner, v.#address + d.byteOffset, facts, access, extras?.keepAlive);
      } catch (error) {
        deferredNumbers[deferredCount[0]++] = owner;
        retryQuietly();
        throw error;
      }
    };
    branded = (x) => #owner in x;
    liveView = (x) => #owner in x && (x as BufferView).#owner !== 0;
    internals = {
      owner: (v) => {
        v.#live();
        return v.#owner;
      },
      address: (v) => v.#address,
      facts: (v) => v.#facts,
      access: (v) => v.#access,
      dispose: (v) => v.#dispose(),
      array: (v) => v.#makeArray(),
      toArray: (v) => v.#toArray(),
      keepAlive: (v) => v.#keepAlive(),
    };
    registerDisposer((x) => {
      if (!(#owner in x)) return false;
      (x as BufferView).#dispose();
      return true;
    });
  }

  /** The native owner record this view holds one share of; 0 once disposed. */
  #owner: number;
  #address: number;
  #facts: ViewFacts;
  #access: Access;
  /** What few views have (undefined until then; `array()` included): six fields in all, as each
   * field more is measurably slower to make and dispose in both runtimes. */
  #extras: Extras | undefined;
  /** Set by the maker, which enters the view into the backstop once it is built. */
  #epoch = 0;

  /** @ignore (library-internal) Views are made by the library's functions, never with `new`. */
  private constructor(owner: number, address: number, facts: ViewFacts, access: Access) {
    this.#owner = owner;
    this.#address = address;
    this.#facts = facts;
    this.#access = access;
  }

  /** Address of element 0 (the producer's `byte_offset` already folded in). */
  get address(): bigint {
    if (!(#owner in asObject(this))) throw notAView(this, "address");
    return toBigInt(this.#address);
  }

  /** The dtype name ("float32", "bfloat16", "float8_e4m3fn", "complex64", "bool", ...). */
  get dtype(): DType {
    if (!(#owner in asObject(this))) throw notAView(this, "dtype");
    return this.#facts.info.name;
  }

  /** The DLPack triple of the dtype. */
  get dl(): DLDataType {
    if (!(#owner in asObject(this))) throw notAView(this, "dl");
    return this.#facts.info.dl;
  }

  /** Extents per dimension. */
  get shape(): readonly number[] {
    if (!(#owner in asObject(this))) throw notAView(this, "shape");
    // The view's own array, frozen once: nothing can change it, so nothing needs a copy.
    return freeze(this.#facts.shape);
  }

  /** Strides in elements (computed in C order when the producer sent NULL). */
  get strides(): readonly number[] {
    if (!(#owner in asObject(this))) throw notAView(this, "strides");
    return freeze(this.#facts.strides);
  }

  /** Number of dimensions. */
  get ndim(): number {
    if (!(#owner in asObject(this))) throw notAView(this, "ndim");
    return this.#facts.shape.length;
  }

  /** Number of elements. */
  get size(): number {
    if (!(#owner in asObject(this))) throw notAView(this, "size");
    return this.#facts.size;
  }

  /** Bytes of the elements themselves (`size` x item size; packed sub-byte types round up). */
  get nbytes(): number {
    if (!(#owner in asObject(this))) throw notAView(this, "nbytes");
    return this.#facts.nbytes;
  }

  /** Where the memory lives. */
  get device(): Device {
    if (!(#owner in asObject(this))) throw notAView(this, "device");
    return this.#facts.device;
  }

  /** Whether the CUDA driver confirmed the device claim (always true for host memory). */
  get verified(): boolean {
    if (!(#owner in asObject(this))) throw notAView(this, "verified");
    return this.#facts.origin.verified;
  }

  /** "readwrite" or "readonly" as the producer declared; "unknown" for the legacy struct; "readonly"
   * whatever the producer said when the data lies in memory this process cannot write. */
  get access(): Access {
    if (!(#owner in asObject(this))) throw notAView(this, "access");
    return this.#access;
  }

  /** "external" for imports, the library's name for memory it allocated. */
  get owner(): string {
    if (!(#owner in asObject(this))) throw notAView(this, "owner");
    return this.#facts.origin.ownerName;
  }

  /** The producer's name when known (e.g. "numpy.ndarray"), else null. */
  get producer(): string | null {
    if (!(#owner in asObject(this))) throw notAView(this, "producer");
    return this.#facts.origin.producer;
  }

  /** The producer's DLPack version, or null for the legacy struct. */
  get version(): DLPackVersion | null {
    if (!(#owner in asObject(this))) throw notAView(this, "version");
    const version = this.#facts.origin.version;
    return version === null ? null : { major: version.major, minor: version.minor };
  }

  /** The versioned struct's flags (all false for legacy imports); `readOnly` is also set when the data
   * lies in memory this process cannot write. */
  get flags(): Flags {
    if (!(#owner in asObject(this))) throw notAView(this, "flags");
    const f = this.#facts.origin.flags;
    return {
      readOnly: (f & READ_ONLY) !== 0,
      isCopied: (f & IS_COPIED) !== 0,
      subbytePadded: (f & SUBBYTE_PADDED) !== 0,
    };
  }

  /** Whether the elements are laid out in C (row-major) order with no gaps. */
  get cContiguous(): boolean {
    if (!(#owner in asObject(this))) throw notAView(this, "cContiguous");
    return (this.#facts.layout & LAYOUT_C) !== 0;
  }

  /** Whether the elements are laid out in Fortran (column-major) order with no gaps. */
  get fContiguous(): boolean {
    if (!(#owner in asObject(this))) throw notAView(this, "fContiguous");
    return (this.#facts.layout & LAYOUT_F) !== 0;
  }

  /** Elements from the start of `array()` to element 0 (non-zero only with negative strides). */
  get spanOffset(): number {
    if (!(#owner in asObject(this))) throw notAView(this, "spanOffset");
    return -this.#facts.minOffset * this.#facts.info.slots;
  }

  /** This view's own share of the memory. `keepAlive.retain()` gives an independent share that
   * keeps the memory alive after the view is disposed; releasing this one disposes the view. */
  get keepAlive(): Owner {
    if (!(#owner in asObject(this))) throw notAView(this, "keepAlive");
    return this.#keepAlive();
  }

  #keepAlive(): Owner {
    const extras = this.#extras ??= new Extras(undefined);
    return extras.share ??= new Owner(this.#owner, this.#releasable());
  }

  /** This view as its Owner share sees it: the private methods, not the replaceable public ones. */
  #releasable(): Releasable {
    const dispose = () => this.#dispose();
    const isDisposed = () => this.#owner === 0;
    return freeze({
      __proto__: null,
      dispose,
      get disposed(): boolean {
        return isDisposed();
      },
    }) as unknown as Releasable;
  }

  /** The JS value this view keeps reachable (e.g. a Python object behind an array interface). */
  get keepAliveValue(): unknown {
    if (!(#owner in asObject(this))) throw notAView(this, "keepAliveValue");
    const extras = this.#extras;
    return extras === undefined ? undefined : extras.keepAlive;
  }

  /** Whether `dispose()` ran. */
  get disposed(): boolean {
    if (!(#owner in asObject(this))) throw notAView(this, "disposed");
    return this.#owner === 0;
  }

  /** @ignore (library-internal) The native owner record (for exports that retain it). */
  get nativeOwner(): number {
    if (!(#owner in asObject(this))) throw notAView(this, "nativeOwner");
    this.#live();
    return this.#owner;
  }

  /** @ignore (library-internal) Element 0's address as a number. */
  get addressNumber(): number {
    if (!(#owner in asObject(this))) throw notAView(this, "addressNumber");
    return this.#address;
  }

  /** @ignore (library-internal) Strides without the defensive copy. */
  get rawStrides(): readonly number[] {
    if (!(#owner in asObject(this))) throw notAView(this, "rawStrides");
    return this.#facts.strides;
  }

  /** @ignore (library-internal) Shape without the defensive copy. */
  get rawShape(): readonly number[] {
    if (!(#owner in asObject(this))) throw notAView(this, "rawShape");
    return this.#facts.shape;
  }

  /** @ignore (library-internal) The raw flag bits. */
  get flagBits(): number {
    if (!(#owner in asObject(this))) throw notAView(this, "flagBits");
    return this.#facts.origin.flags;
  }

  /** Whether `set` may write: "readwrite" access, or "unknown" after `assumeWritable()`. */
  get writable(): boolean {
    if (!(#owner in asObject(this))) throw notAView(this, "writable");
    return this.#access === "readwrite";
  }

  /**
   * A zero-copy TypedArray over the view's whole span (from its lowest to its highest element),
   * for host-accessible memory. Element 0 sits at `spanOffset`. Complex dtypes interleave real
   * and imaginary parts; bfloat16 comes as Uint16Array bits; bool, FP8, FP6 and FP4 as Uint8Array.
   * The array is detached (length 0) when the view is disposed, so it can never read freed memory.
   * JS has no read-only TypedArray: for a view whose `access` is "readonly" (or "unknown") the
   * array is still writable, and a write lands in the producer's memory. Use `toArray()` for a
   * copy of your own.
   */
  array(): AnyTypedArray {
    if (!(#owner in asObject(this))) throw notAView(this, "array()");
    return this.#makeArray();
  }

  #makeArray(): AnyTypedArray {
    this.#live();
    const made = this.#extras?.array;
    if (made !== undefined) return made;
    if (this.#facts.device.type !== "cpu" && !isHostAccessible(this.#facts.device.type)) {
      throw new DLPackError(
        "device",
        `array() needs host-accessible memory; this view is on ${
          formatDevice(this.#facts.device)
        } (copy it to the host first)`,
      );
    }
    const Ctor = this.#facts.info.array;
    if (this.#facts.size === 0) {
      return (this.#extras ??= new Extras(undefined)).array = new Ctor(new ArrayBufferCtor(0));
    }
    let start: number;
    let byteLength: number;
    const bits = this.#facts.info.bits;
    if (bits >= 8) {
      const bytes = bits >> 3;
      start = this.#address + this.#facts.minOffset * bytes;
      byteLength = (this.#facts.maxOffset - this.#facts.minOffset + 1) * bytes;
    } else {
      const slot = this.#slotBits();
      const lo = floor((this.#facts.minOffset * slot) / 8);
      start = this.#address + lo;
      byteLength = ceil(((this.#facts.maxOffset + 1) * slot) / 8) - lo;
    }
    // Made first: once the buffer exists, nothing may fail before the view holds it.
    const extras = this.#extras ??= new Extras(undefined);
    const buffer = runtime().arrayBuffer(start, byteLength);
    new BufferLink(buffer, this);
    const array = new Ctor(buffer, 0, floor(byteLength / this.#facts.info.slotBytes));
    extras.buffer = buffer;
    return extras.array = array;
  }

  /** Bits each element occupies in memory (padded sub-byte types take a whole byte). */
  #slotBits(): number {
    const bits = this.#facts.info.bits;
    return bits < 8 && (this.#facts.origin.flags & SUBBYTE_PADDED) !== 0 ? 8 : bits;
  }

  /** Reads one element. Indices must be integers within the shape. */
  get(...index: number[]): Scalar {
    if (!(#owner in asObject(this))) throw notAView(this, "get()");
    const at = this.#position(index, "get");
    const a = this.#extras?.array ?? this.#makeArray();
    // An array detached under the view (its buffer transferred by other code) has length 0 and
    // reads undefined without touching memory: that is checked after the read, not before.
    const first = a[at];
    if (first === undefined) this.#live();
    switch (this.#facts.info.kind) {
      case "int":
      case "float":
      case "bigint":
        // Read from a live array, so an element.
        return first!;
      case "bool":
        return first !== 0;
      case "bfloat16":
        return bfloat16ToNumber(first as number);
      case "complex":
        return [a[at * 2] as number, a[at * 2 + 1] as number] as Complex;
      case "minifloat":
        return decodeMiniFloat(
          this.#facts.info.name as MiniFloatDType,
          readBits(a as Uint8Array, at, this.#slotBits(), this.#facts.minOffset),
        );
    }
  }

  /** Writes one element; refused for read-only views and for "unknown" access until
   * `assumeWritable()`. */
  set(value: Scalar, ...index: number[]): void {
    if (!(#owner in asObject(this))) throw notAView(this, "set()");
    if (this.#access !== "readwrite") {
      throw new DLPackError(
        "readonly",
        this.#access === "readonly"
          ? "this view is read-only (the producer set READ_ONLY, its memory cannot be written in this process, or it " +
            "is a broadcast, whose elements repeat)"
          : "this view's access is unknown (legacy DLPack carries no read-only flag); call assumeWritable() if you know it may be written",
      );
    }
    const at = this.#position(index, "set");
    const a = this.#extras?.array ?? this.#makeArray();
    // Writes into an array detached under the view are dropped without touching memory; refuse
    // them as get() does (a read of a live array never gives undefined).
    if (a[at] === undefined) this.#live();
    const info = this.#facts.info;
    if (info.kind === "minifloat") {
      // Packed: the code goes into its bits, not a whole array slot.
      const code = encodeMiniFloat(info.name as MiniFloatDType, expectNumber(value, info.name));
      writeBits(a as Uint8Array, at, this.#slotBits(), this.#facts.minOffset, code);
      return;
    }
    encodeElement(info, value, a, at);
  }

  /** The element position in `array()` units for an index, after every check but detachment
   * (which get and set check on the array itself). */
  #position(index: readonly number[], what: string): number {
    if (this.#owner === 0) throw new DLPackError("disposed", "this view was disposed");
    const shape = this.#facts.shape;
    if (index.length !== shape.length) {
      throw new DLPackError(
        "shape",
        `${what}() needs ${shape.length} indices for a ${shape.length}-d view, got ${index.length}`,
      );
    }
    const strides = this.#facts.strides;
    let at = -this.#facts.minOffset;
    for (let d = 0; d < shape.length; d++) {
      const i: unknown = index[d];
      if (typeof i !== "number") {
        throw new DLPackError("argument", `${what}(): index ${d} must be a number, got ${shown(i)}`);
      }
      if (i % 1 !== 0) {
        throw new DLPackError("shape", `index ${i} of dimension ${d} is not an integer`);
      }
      // The strides are as long as the shape.
      const extent = shape[d]!;
      if (i < 0 || i >= extent) {
        throw new DLPackError("shape", `index ${i} is out of range for dimension ${d} of extent ${extent}`);
      }
      at += i * strides[d]!;
    }
    return at;
  }

  /**
   * A contiguous C-order copy in a new JS TypedArray (complex interleaved, packed sub-byte types
   * one code per byte): the way to get values you may write without touching the view's memory
   * (a read-only view's `array()` is writable; see {@link BufferView.array}).
   */
  toArray(): AnyTypedArray {
    if (!(#owner in asObject(this))) throw notAView(this, "toArray()");
    return this.#toArray();
  }

  #toArray(): AnyTypedArray {
    this.#live();
    const src = this.#makeArray();
    const info = this.#facts.info;
    const packed = info.kind === "minifloat" && this.#slotBits() < 8;
    const Ctor = info.array;
    const slotCount = info.slots;
    const out = new Ctor(jsBuffer(this.#facts.size * slotCount * info.slotBytes, "toArray()"));
    if (this.#facts.size === 0) return out;
    const shape = this.#facts.shape;
    const strides = this.#facts.strides;
    const ndim = shape.length;
    const index = slots(ndim);
    let at = -this.#facts.minOffset;
    for (let k = 0; k < this.#facts.size; k++) {
      if (packed) out[k] = readBits(src as Uint8Array, at, this.#slotBits(), this.#facts.minOffset);
      // Offsets the layout walk reaches lie within the array (its facts span them).
      else if (slotCount === 2) {
        out[2 * k] = src[2 * at]!;
        out[2 * k + 1] = src[2 * at + 1]!;
      } else out[k] = src[at]!;
      at = nextOffset(index, shape, strides, at);
    }
    return out;
  }

  /** A C-contiguous copy in library-owned native memory: host views through the native strided
   * copy, CUDA device views on the same device through the driver. */
  copy(): BufferView {
    if (!(#owner in asObject(this))) throw notAView(this, "copy()");
    this.#live();
    return viewOps.copy(this);
  }

  /**
   * A new C-contiguous view in library-owned host (CPU) memory with this view's values. CUDA
   * device memory is copied through the driver (ordered after the view's producer stream, or on
   * `opts.stream`, and complete on return); host-accessible memory is copied directly. Throws
   * `DLPackError` ("cuda") when device memory needs a driver that is missing.
   */
  toHost(opts?: CopyOptions): BufferView {
    if (!(#owner in asObject(this))) throw notAView(this, "toHost()");
    this.#live();
    return viewOps.toHost(this, opts);
  }

  /**
   * Copies `src`'s values into this view: host memory (cpu, cudaHost, cudaManaged) and CUDA device
   * memory in any direction, device to device included. Dtype and shape must match and this view
   * must be writable, and C-contiguous or laid out exactly like `src`. Complete on return.
   *
   * `src` may also be a TypedArray in the form `toArray()` returns: the TypedArray type of
   * `array()` for this dtype, holding every element in C order (complex interleaved, sub-byte
   * floats one code per element), `size` elements long (twice that for complex); or nested JS
   * arrays of element values shaped exactly like this view (the form `toNested()` returns).
   */
  copyFrom(src: BufferView | AnyTypedArray | readonly unknown[], opts?: CopyOptions): this {
    if (!(#owner in asObject(this))) throw notAView(this, "copyFrom()");
    this.#live();
    if (isBufferView(src)) {
      viewOps.copyInto(this, src, opts);
      return this;
    }
    if (isArray(src)) {
      this.#copyFromTypedArray(viewOps.flatten(this, src), this.#facts.info.tag, opts);
      return this;
    }
    const tag = typedArrayTag(src);
    if (tag === undefined) {
      throw new DLPackError(
        "argument",
        `copyFrom takes a BufferView, a TypedArray or nested arrays of values, got ${shown(src)}`,
      );
    }
    this.#copyFromTypedArray(src as AnyTypedArray, tag, opts);
    return this;
  }

  #copyFromTypedArray(src: AnyTypedArray, tag: string, opts: CopyOptions | undefined): void {
    const info = this.#facts.info;
    if (tag !== info.tag && !(tag === "Uint8ClampedArray" && info.tag === "Uint8Array")) {
      throw new DLPackError(
        "dtype",
        `copyFrom: a ${info.name} view takes a ${info.tag} (the form of toArray()), got a ${tag}`,
      );
    }
    const length = typedArrayLength(src);
    const needed = this.#facts.size * info.slots;
    if (length !== needed) {
      throw new DLPackError(
        "shape",
        `copyFrom: the ${tag} has ${length} elements; this view of shape ${
          listText(this.#facts.shape)
        } needs ${needed}`,
      );
    }
    if (this.#access !== "readwrite") {
      throw new DLPackError(
        "readonly",
        this.#access === "readonly"
          ? "copyFrom writes this view, which is read-only"
          : "copyFrom writes this view, whose access is unknown (legacy DLPack); call assumeWritable() if it may be written",
      );
    }
    if (this.#facts.size === 0) return;
    const host = this.#facts.device.type === "cpu" || isHostAccessible(this.#facts.device.type);
    if (host && (info.bits < 8 || (this.#facts.layout & LAYOUT_C) === 0)) {
      // Sub-byte codes, or a strided destination the native copy does not scatter into.
      this.#scatter(src);
      return;
    }
    // The option is read before the array is staged: a getter run after that could move the
    // array's memory (buffer.transfer()) out from under the staged view.
    const stream = copyStreamOption(opts);
    // A view over the TypedArray's own memory (pinned while it lives), then the view-to-view copy.
    const staged = info.bits < 8
      ? viewOps.packedCodes(src as Uint8Array, info, this.#facts.shape)
      : viewOps.typedArrayView(src, info, this.#facts.shape);
    try {
      viewOps.copyInto(this, staged, stream === undefined ? undefined : { stream } as CopyOptions);
    } finally {
      try {
        disposeView(staged);
      } catch {
        deferredObjects[deferredObjectCount[0]++] = staged;
      }
    }
  }

  /** Writes `src` (this view's elements in C order, in the form of toArray()) into host memory. */
  #scatter(src: AnyTypedArray): void {
    const a = this.#makeArray();
    const packed = this.#facts.info.kind === "minifloat" && this.#slotBits() < 8;
    const pairs = this.#facts.info.slots === 2;
    const shape = this.#facts.shape;
    const strides = this.#facts.strides;
    const ndim = shape.length;
    const index = slots(ndim);
    let at = -this.#facts.minOffset;
    for (let k = 0; k < this.#facts.size; k++) {
      // `src` holds the view's elements (its caller checked its length).
      if (packed) writeBits(a as Uint8Array, at, this.#slotBits(), this.#facts.minOffset, (src as Uint8Array)[k]!);
      else if (pairs) {
        a[2 * at] = src[2 * k]!;
        a[2 * at + 1] = src[2 * k + 1]!;
      } else a[at] = src[k]!;
      at = nextOffset(index, shape, strides, at);
    }
  }

  /**
   * The DLPack protocol's producer side, with the Python keywords in camelCase: a legacy capsule
   * when `maxVersion` is absent or below [1, 0] (read-only data refused then), a versioned one
   * otherwise; `copy: true` copies (IS_COPIED), `dlDevice` other than this device is refused. For
   * CUDA data `stream` fences the consumer's stream after the view's producer stream (see
   * `fenceForConsumer` in src/ops/streams.ts); on host data a stream is refused. `importDLPack(view)` uses it.
   */
  __dlpack__(opts?: DLPackProtocolOptions): Capsule {
    if (!(#owner in asObject(this))) throw notAView(this, "__dlpack__()");
    return viewOps.dlpack(this, opts);
  }

  /** `[device type code, device id]`, as the protocol's `__dlpack_device__()`. */
  __dlpack_device__(): [number, number] {
    if (!(#owner in asObject(this))) throw notAView(this, "__dlpack_device__()");
    return [deviceCode(this.#facts.device.type), this.#facts.device.id];
  }

  /**
   * A statically typed view of the same tensor: TypeScript then knows the TypedArray of
   * `array()`, the element type of `get`/`set` and the number of indices. Throws `DLPackError`
   * ("requirements") when the dtype or rank differ.
   */
  as<D extends DType, N extends number>(dtype: D, ndim: N): TypedView<D, N> {
    if (!(#owner in asObject(this))) throw notAView(this, "as()");
    this.#live();
    if (dtype === undefined || ndim === undefined) {
      throw new DLPackError("argument", `as() needs a dtype and a rank, got ${shown(dtype)} and ${shown(ndim)}`);
    }
    const refusals = viewOps.refusals(this, { dtype, ndim });
    if (refusals.length > 0) {
      throw new DLPackError(
        "requirements",
        `as(${typeof dtype === "string" ? dtype : shown(dtype)}, ${shown(ndim)}) refused: ${joined(refusals)}`,
        refusals,
      );
    }
    return this as unknown as TypedView<D, N>;
  }

  /**
   * Records the caller's assertion that memory of "unknown" access (a legacy import) may be
   * written. The library never makes that assumption by itself; read-only views stay read-only.
   */
  assumeWritable(): this {
    if (!(#owner in asObject(this))) throw notAView(this, "assumeWritable()");
    this.#live();
    if (this.#access === "readonly") {
      throw new DLPackError(
        "readonly",
        "this view is read-only (the producer marked the tensor READ_ONLY, its memory cannot be written in this " +
          "process, or it is a broadcast, whose elements repeat); assumeWritable() cannot override that",
      );
    }
    this.#access = "readwrite";
    return this;
  }

  /** Each requirement this view fails, as `"<field>: required <x>, got <y>"`. */
  refusals(req: Requirements): string[] {
    if (!(#owner in asObject(this))) throw notAView(this, "refusals()");
    this.#live();
    return viewOps.refusals(this, req);
  }

  /** Returns this view if it meets every requirement, else throws `DLPackError` listing them all. */
  require(req: Requirements): this {
    if (!(#owner in asObject(this))) throw notAView(this, "require()");
    this.#live();
    const refusals = viewOps.refusals(this, req);
    if (refusals.length > 0) {
      throw new DLPackError("requirements", `requirements not met: ${joined(refusals)}`, refusals);
    }
    return this;
  }

  /**
   * numpy's basic indexing, zero-copy: one item per leading axis, each an integer (picks that
   * index and drops the axis; negative counts from the end), `null` (the whole axis, numpy's `:`),
   * a `"start:stop:step"` string or a `{ start, stop, step }` range (negative steps walk
   * backwards; bounds are clamped like Python's), or `"..."` for as many whole axes as needed.
   * Axes without an item are kept whole. The result shares this view's memory and owner.
   */
  slice(...items: SliceItem[]): BufferView {
    if (!(#owner in asObject(this))) throw notAView(this, "slice()");
    return viewOps.shaped(this, "slice", items);
  }

  /** The sub-view at integer indices on the leading axes (negative from the end, like
   * `Array.prototype.at`); with `ndim` indices a 0-d view of one element. Zero-copy. */
  at(...indices: number[]): BufferView {
    if (!(#owner in asObject(this))) throw notAView(this, "at()");
    return viewOps.shaped(this, "at", indices);
  }

  /** The axes reversed (numpy's `.T`), zero-copy. */
  transpose(): BufferView {
    if (!(#owner in asObject(this))) throw notAView(this, "transpose()");
    return viewOps.shaped(this, "transpose", []);
  }

  /** The axes in the order `axes` lists them (the array API's `permute_dims`), zero-copy. */
  permute(axes: readonly number[]): BufferView {
    if (!(#owner in asObject(this))) throw notAView(this, "permute()");
    return viewOps.shaped(this, "permute", [axes]);
  }

  /** The same elements in C order under a new shape (one extent may be -1). Zero-copy; throws
   * `DLPackError` ("strides") when the strides do not allow it: reshape `copy()` then. */
  reshape(shape: readonly number[]): BufferView {
    if (!(#owner in asObject(this))) throw notAView(this, "reshape()");
    return viewOps.shaped(this, "reshape", [shape]);
  }

  /** numpy's broadcasting to `shape`: repeated axes get stride 0. Zero-copy and read-only. */
  broadcastTo(shape: readonly number[]): BufferView {
    if (!(#owner in asObject(this))) throw notAView(this, "broadcastTo()");
    return viewOps.shaped(this, "broadcastTo", [shape]);
  }

  /** Without extent-1 axes: all of them, or the axis (or axes) given, which must have extent 1. */
  squeeze(axis?: number | readonly number[]): BufferView {
    if (!(#owner in asObject(this))) throw notAView(this, "squeeze()");
    return viewOps.shaped(this, "squeeze", [axis]);
  }

  /** With a new extent-1 axis at `axis` of the result (default 0; negative from the end). */
  expandDims(axis?: number): BufferView {
    if (!(#owner in asObject(this))) throw notAView(this, "expandDims()");
    return viewOps.shaped(this, "expandDims", [axis]);
  }

  /** Iterates the first axis: element values for a 1-d view, sub-views (`at(i)`) otherwise. */
  [Symbol.iterator](): IterableIterator<Scalar | BufferView> {
    if (!(#owner in asObject(this))) throw notAView(this, "[Symbol.iterator]()");
    return viewOps.iterate(this, false) as IterableIterator<Scalar | BufferView>;
  }

  /** `[index, item]` pairs over the first axis, as `Array.prototype.entries`. */
  entries(): IterableIterator<[number, Scalar | BufferView]> {
    if (!(#owner in asObject(this))) throw notAView(this, "entries()");
    return viewOps.iterate(this, true) as IterableIterator<[number, Scalar | BufferView]>;
  }

  /** The values as nested JS arrays (numpy's `tolist()`); a 0-d view gives its one value. */
  toNested(): unknown {
    if (!(#owner in asObject(this))) throw notAView(this, "toNested()");
    return viewOps.toNested(this);
  }

  /** Writes `value` into every element (checked once, as `set` checks it). */
  fill(value: Scalar): this {
    if (!(#owner in asObject(this))) throw notAView(this, "fill()");
    viewOps.fill(this, value);
    return this;
  }

  /**
   * Releases this view's share of the memory: the producer's deleter runs once no other share,
   * view or export needs it. Arrays from `array()` are detached first. Idempotent.
   */
  dispose(): void {
    if (!(#owner in asObject(this))) throw notAView(this, "dispose()");
    this.#dispose();
  }

  // Every step that can throw runs before the view changes state, so an exception (an exhausted
  // stack) leaves it live and whole, to be disposed again; once it is marked disposed, the release
  // itself cannot be lost (releaseOwner journals it in the deferred buffer around the native call).
  #dispose(): void {
    const owner = this.#owner;
    if (owner === 0) return;
    if (this.#extras !== undefined) {
      this.#disposeWithExtras(owner);
      return;
    }
    views.remove(this, this.#epoch);
    this.#owner = 0;
    releaseOwner(owner);
  }

  /** {@link BufferView.#dispose} of a view with extras (an `array()`, a `keepAlive` share, a kept
   * value): out of line, so that the common dispose stays small enough for the JIT to inline. */
  #disposeWithExtras(owner: number): void {
    const buffer = this.#extras!.buffer;
    if (buffer !== undefined) {
      this.#disposeWithBuffer(owner, buffer);
      return;
    }
    views.remove(this, this.#epoch);
    this.#forget();
    releaseOwner(owner);
  }

  /** {@link BufferView.#dispose} of a view that handed out an `array()` over native memory. */
  #disposeWithBuffer(owner: number, buffer: ArrayBuffer): void {
    if (isDetached(buffer)) {
      // Someone transferred it (ArrayBuffer.prototype.transfer, postMessage): the runtimes move
      // native memory into the new buffer without copying, and nothing can revoke that one.
      // Keeping this share for the rest of the process is the only way it never reads freed
      // memory; stats() shows it.
      transferredShares.add(owner);
      views.remove(this, this.#epoch);
      this.#forget();
      return;
    }
    // Detaching leaves every TypedArray over it with length 0: no access after free.
    detach(buffer);
    this.#extras!.buffer = undefined;
    this.#extras!.array = undefined;
    views.remove(this, this.#epoch);
    this.#forget();
    releaseOwner(owner);
  }

  #forget(): void {
    this.#owner = 0;
    const extras = this.#extras;
    if (extras !== undefined) {
      extras.array = undefined;
      // The share stays: `keepAlive` is the same object before and after.
      extras.buffer = undefined;
      extras.keepAlive = undefined;
    }
  }

  /** Same as {@link BufferView.dispose}, for `using`. */
  [Symbol.dispose](): void {
    if (!(#owner in asObject(this))) throw notAView(this, "[Symbol.dispose]()");
    this.dispose();
  }

  #live(): void {
    if (this.#owner === 0) throw new DLPackError("disposed", "this view was disposed");
    const buffer = this.#extras === undefined ? undefined : this.#extras.buffer;
    if (buffer !== undefined && isDetached(buffer)) {
      throw new DLPackError(
        "disposed",
        "the ArrayBuffer array() returned was transferred or detached by other code; this view no longer " +
          "reads through it (the memory stays alive for the transferred buffer: see the README's threat model)",
      );
    }
  }

  // Inspection: what console.log and JSON.stringify show. The formatting is in inspect.ts; here
  // is only what decides whether values may be read (a live view over host memory) and how.
  /** `get` as the class defined it (a caller may replace the prototype's). */
  static readonly #get: (...index: number[]) => Scalar = BufferView.prototype.get;

  /** @ignore (library-internal) `console.log(view)` in Deno; see {@link BufferView.toJSON}. */
  [DENO_INSPECT](): string {
    if (!(#owner in asObject(this))) return NOT_A_VIEW_TEXT;
    return this.#inspect();
  }

  /** @ignore (library-internal) `console.log(view)` in Bun and Node (the same text as in Deno). */
  [NODE_INSPECT](): string {
    if (!(#owner in asObject(this))) return NOT_A_VIEW_TEXT;
    return this.#inspect();
  }

  /**
   * The view's metadata, without values, for `JSON.stringify(view)`. `console.log(view)` prints the
   * same facts and the values, numpy-style: nested brackets per axis, the first and last 3 items of
   * each axis above 1000 elements, no values for device memory or a disposed view.
   */
  toJSON(): ViewJSON {
    if (!(#owner in asObject(this))) throw notAView(this, "toJSON()");
    const facts = this.#facts;
    const origin = facts.origin;
    return viewJSON({
      dtype: facts.info.name,
      shape: facts.shape as number[],
      strides: facts.strides as number[],
      device: facts.device,
      access: this.#access,
      size: facts.size,
      nbytes: facts.nbytes,
      address: hexAddress(this.#address),
      owner: origin.ownerName,
      producer: origin.producer,
      version: origin.version === null ? null : { major: origin.version.major, minor: origin.version.minor },
      disposed: this.#owner === 0,
    });
  }

  #inspect(): string {
    const own = this.#facts;
    const facts: InspectFacts = {
      dtype: own.info.name,
      kind: own.info.kind,
      bits: own.info.bits,
      shape: own.shape as number[],
      strides: own.strides as number[],
      device: formatDevice(own.device),
      access: this.#access,
      disposed: this.#owner === 0,
    };
    if (this.#owner === 0) return formatView(facts, undefined, "disposed");
    if (own.device.type !== "cpu" && !isHostAccessible(own.device.type)) {
      return formatView(facts, undefined, "device");
    }
    try {
      // Throws instead of reading when the array() buffer was transferred away.
      this.#live();
      return formatView(facts, (index) => applyTo(BufferView.#get, this, index) as Scalar, undefined);
    } catch (error) {
      return formatView(facts, undefined, { error: error instanceof DLPackError ? error.message : shown(error) });
    }
  }

  /** @ignore (library-internal) A one-line description for logs. */
  toString(): string {
    if (!(#owner in asObject(this))) throw notAView(this, "toString()");
    return `BufferView(${this.#facts.info.name}, ${listText(this.#facts.shape)}, ${formatDevice(this.#facts.device)}${
      this.#owner === 0 ? ", disposed" : ""
    })`;
  }
}

/** The parts of a view few views have. Own fields (defined, not assigned), and the class is not
 * exported: no setter a caller puts anywhere sees the writes. */
class Extras {
  /** The ArrayBuffer `array()` made over native memory, detached at dispose. */
  buffer: ArrayBuffer | undefined = undefined;
  /** The array `array()` made (the same one each call). */
  array: AnyTypedArray | undefined = undefined;
  /** The view's own share (`keepAlive`), made on first use. */
  share: Owner | undefined = undefined;
  /** The JS value kept reachable while the view lives (`keepAliveValue`). */
  keepAlive: unknown;
  constructor(keepAlive: unknown) {
    this.keepAlive = keepAlive;
  }
}

/** Owner shares of views whose array() buffer was transferred away; never released. */
const transferredShares = newSet<number>();

/** `a; b; c` (no `join`: it is replaceable). */
function joined(parts: readonly string[]): string {
  let text = "";
  for (let i = 0; i < parts.length; i++) text += (i === 0 ? "" : "; ") + parts[i];
  return text;
}

/** A view whose dtype and rank TypeScript knows (from `BufferView.as`). */
export interface TypedView<D extends DType, N extends number> extends BufferView {
  /** The dtype, known statically. */
  readonly dtype: D;
  /** The rank, known statically. */
  readonly ndim: N;
  /** One extent per dimension. */
  readonly shape: Readonly<Tuple<number, N>> & readonly number[];
  /** One stride (in elements) per dimension. */
  readonly strides: Readonly<Tuple<number, N>> & readonly number[];
  /** The zero-copy TypedArray of this dtype. */
  array(): ArrayOf<D>;
  /** A contiguous C-order copy. */
  toArray(): ArrayOf<D>;
  /** Reads the element at exactly `ndim` indices. */
  get(...index: Tuple<number, N>): ScalarOf<D>;
  /** Writes the element at exactly `ndim` indices. */
  set(value: ScalarOf<D>, ...index: Tuple<number, N>): void;
  /** {@link BufferView.slice}, typed: the dtype is kept (integer items drop axes). */
  slice(...items: SliceItem[]): TypedView<D, number>;
  /** {@link BufferView.at}, typed: each index drops a leading axis. */
  at<const I extends number[]>(...indices: I): TypedView<D, Minus<N, I["length"]>>;
  /** {@link BufferView.transpose}, typed. */
  transpose(): TypedView<D, N>;
  /** {@link BufferView.permute}, typed. */
  permute(axes: readonly number[]): TypedView<D, N>;
  /** {@link BufferView.reshape}, typed: the rank is the new shape's length. */
  reshape<const S extends readonly number[]>(shape: S): TypedView<D, S["length"]>;
  /** {@link BufferView.broadcastTo}, typed. */
  broadcastTo<const S extends readonly number[]>(shape: S): TypedView<D, S["length"]>;
  /** {@link BufferView.squeeze}, typed. */
  squeeze(axis?: number | readonly number[]): TypedView<D, number>;
  /** {@link BufferView.expandDims}, typed: one axis more. */
  expandDims(axis?: number): TypedView<D, Plus1<N>>;
  /** Iterates the first axis: values for a 1-d view, sub-views otherwise. */
  [Symbol.iterator](): IterableIterator<ItemOf<D, N>>;
  /** `[index, item]` pairs over the first axis. */
  entries(): IterableIterator<[number, ItemOf<D, N>]>;
  /** Nested arrays of this dtype's values, `ndim` deep. */
  toNested(): Nested<ScalarOf<D>, N>;
  /** Writes `value` into every element. */
  fill(value: ScalarOf<D>): this;
}

/** `N - K` for small literal ranks (number when either is not a literal). */
export type Minus<N extends number, K extends number> = number extends N ? number
  : number extends K ? number
  : Tuple<unknown, N> extends [...Tuple<unknown, K>, ...infer R] ? R["length"] extends infer L extends number ? L
    : number
  : never;
/** `N + 1` for literal ranks. */
export type Plus1<N extends number> = number extends N ? number
  : [...Tuple<unknown, N>, unknown]["length"] extends infer L extends number ? L
  : number;
/** What iterating a `TypedView<D, N>` yields: values for N = 1, views of rank N - 1 otherwise. */
export type ItemOf<D extends DType, N extends number> = number extends N ? ScalarOf<D> | TypedView<D, number>
  : N extends 1 ? ScalarOf<D>
  : TypedView<D, Minus<N, 1>>;
/** `T` nested `N` arrays deep (what `toNested()` returns). */
export type Nested<T, N extends number> = number extends N ? unknown
  : N extends 0 ? T
  : Nested<T, Minus<N, 1>>[];
