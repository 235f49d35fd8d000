/**
 * `BufferView`: one class for every imported tensor and every library allocation, a thin handle on
 * a share of native memory. Construction, dispose, `get`/`set` and `array()` are its own (the hot
 * paths); every other method is one engine call on the view's state (src/engines/), and a method
 * whose result is a view makes it here. This module is the only one that makes views: `newView`
 * for memory an engine made, the keyed-import factory (`buildKeyed`), and `derive` for a view
 * over part of another.
 * @module
 */
import { core, runtime } from "../../ffi/mod.ts";
import { copyStreamOption, DLPackError, optionalBoolean, optionsObject, shown } from "../facts/errors.ts";
import {
  type AnyTypedArray,
  type ArrayOf,
  type DLDataType,
  type DType,
  dtypeInfo,
  type Scalar,
  type ScalarOf,
} from "../facts/dtypes.ts";
import { type Device, deviceCode } from "../facts/devices.ts";
import type { SliceItem } from "../facts/shape.ts";
import {
  ArrayBufferCtor,
  callWith,
  detach,
  floor,
  freeze,
  isArray,
  isDetached,
  ObjectCtor,
  pinInstanceof,
  toBigInt,
  typedArrayTag,
} from "../facts/intrinsics.ts";
import { LazyBackstop, OWNER_RECORD_BYTES } from "../native/backstop.ts";
import { journalCount, registerDisposer, releaseOwner, releaseTop } from "../native/journal.ts";
import { Owner } from "../native/shares.ts";
import { KEY_ADDRESS, KEY_GENERATION, LAYOUT_C, LAYOUT_F, type Scratch } from "../native/scratch.ts";
import type { Capsule } from "../native/capsule.ts";
import {
  type Access,
  derivedFacts,
  type DerivedLayout,
  type DLPackVersion,
  type Flags,
  flagsOf,
  type Owned,
  type ViewFacts,
  type ViewState,
} from "../engines/state.ts";
import { keyed } from "../engines/facts.ts";
import { elementAt, gather, readAt, requireHost, spanBytes, spanStart, stageValue, storeAt } from "../engines/codec.ts";
import { atIndices, broadcast, expanded, permuted, reshaped, sliced, squeezed, transposed } from "../engines/derive.ts";
import { copyFromArray, copyInto, copyOf, type CopyOptions, refuseWrite, toHost } from "../engines/copy.ts";
import { type AstypeOptions, castArrayInto, castCopy, castInto, type CopyFromOptions } from "../engines/cast.ts";
import { flatCopy, flipped, identity, itemOf, raveled } from "../engines/layouts.ts";
import { type DLPackProtocolOptions, protocolExport, readProtocolOptions } from "../engines/exports.ts";
import {
  readRequirements,
  refusalsOf,
  type RequiredDType,
  type RequiredNdim,
  type Requirements,
} from "../engines/requirements.ts";
import { encodeOne, fill, flatten, toNested } from "../engines/values.ts";
import { inheritStream, type StreamHandle } from "../engines/streams.ts";
import { applyTo, DENO_INSPECT, displayed, headerOf, jsonOf, JUPYTER_DISPLAY } from "../engines/inspect.ts";
import { NODE_INSPECT, type Printable, printed, type ViewJSON } from "../engines/inspect.ts";
import type { Minus, Nested, Plus1, SliceRank, Tuple } from "./types.ts";
import {
  BufferLink,
  CLONE_GUARD,
  disposedError,
  Extras,
  NOT_A_VIEW_TEXT,
  notAView,
  readonlyError,
  readonlyForever,
  refusedError,
  releasable,
  transferredShares,
} from "./parts.ts";

export type { Access, DLPackVersion, Flags } from "../engines/state.ts";
export type { AstypeOptions, CopyFromOptions } from "../engines/cast.ts";

/** Releases the share of views collected without `dispose()` (only a backstop). */
const views = new LazyBackstop<number>(
  (owner) => releaseOwner(owner),
  (holder) => liveView(holder),
  OWNER_RECORD_BYTES,
);

let construct: (owner: number, address: number, facts: ViewFacts, access: Access, keepAlive: unknown) => BufferView;
let branded: (x: object) => boolean;
let liveView: (x: object) => boolean;
let friend: Friend;

/** What the layers above read of a view and do with it: its own fields and private methods,
 * through nothing a caller can replace (the public getters live on a prototype anyone can
 * redefine). */
interface Friend {
  state(view: BufferView): ViewState;
  dispose(view: BufferView): void;
  share(view: BufferView): Owner;
  derive(view: BufferView, layout: DerivedLayout): BufferView;
}

/**
 * The view of memory an engine made (an allocation, a copy): it takes over the one share of the
 * native owner record `owned` holds, which the native call journaled as the top entry and the view
 * ends (if making the view fails, the entry stays, to be released). `keepAlive` is a JS value kept
 * reachable while the view lives.
 */
export function newView(owned: Owned, keepAlive?: unknown): BufferView {
  const view = construct(owned.owner, owned.address, owned.facts, owned.access, keepAlive);
  journalCount[0]--;
  return view;
}

/** A view's state for one engine call (throws "disposed" for a disposed view, and for one whose
 * `array()` buffer was transferred away). */
export function stateOf(view: BufferView): ViewState {
  return friend.state(view);
}

/** Disposes a view (idempotent), through nothing a caller can replace. */
export function disposeView(view: BufferView): void {
  friend.dispose(view);
}

/** The view's own share (`view.keepAlive`), through nothing a caller can replace. */
export function shareOf(view: BufferView): Owner {
  return friend.share(view);
}

/** A new view over part of `base`'s memory (`layout` from src/engines/derive.ts), holding its own
 * share of the same owner record: disposing either leaves the other intact. Refused ("disposed")
 * for a disposed base. */
export function derive(base: BufferView, layout: DerivedLayout): BufferView {
  return friend.derive(base, layout);
}

/** The view argument of a public function: a real view of this library. */
export function viewArg(value: unknown, what: string): BufferView {
  if (!isBufferView(value)) throw new DLPackError("argument", `${what} takes a BufferView, got ${shown(value)}`);
  return value;
}

/**
 * The view of a tensor `dlpk_import`, `dlpk_import_versioned` or `dlpk_py_from` just described into the
 * scratch, holding `owner` (journaled by the import as the top entry, which the view ends): the
 * facts (and the access, which the flags and the generation of the struct decide) built for the
 * scratch's generation are reused after one word compare. Throws only before the view holds the
 * owner, whose entry then stays: the view enters the GC backstop as the last step that can fail,
 * and that step cannot throw once it has stored the view.
 */
export let buildKeyed: (
  s: Scratch,
  owner: number,
  /** The native import's option bits (only `ImportOption.versioned` is read). */
  options: number,
  producer: string | null,
) => BufferView;

/** {@link buildKeyed} for a view that keeps `keepAlive` reachable (rare: out of line, so that the
 * common one stays within the JIT's inlining budget). */
export function buildKeyedKeeping(
  s: Scratch,
  owner: number,
  options: number,
  producer: string | null,
  keepAlive: unknown,
): BufferView {
  const address = s.f64[KEY_ADDRESS];
  if (address < 0) throw beyondExact(s, owner);
  if (s.f64[KEY_GENERATION] !== keyed.generation || producer !== keyed.producer) keyed.refresh(s, producer, options);
  const view = construct(owner, address, keyed.facts, keyed.access, keepAlive);
  journalCount[0]--;
  return view;
}

/** The refusal of an empty tensor whose element 0 lies at or beyond 2^53 (no JS number holds it
 * exactly), which an import took: its owner, the top entry, is released first. */
function beyondExact(s: Scratch, owner: number): DLPackError {
  const error = s.beyondExact();
  releaseTop(owner);
  return error;
}

/** Whether `x` really is a view this library made. `instanceof` is not enough: an object made with
 * `Object.create(BufferView.prototype)` passes it and then fails on the first private field. */
export function isBufferView(x: unknown): x is BufferView {
  return typeof x === "object" && x !== null && branded(x);
}

/** {@link ObjectCtor} in a constant of this module, which the JIT folds (an imported binding it
 * reads anew each time). */
const asObject: ObjectConstructor = ObjectCtor;

/** A zero-copy view of a tensor: an import, a library allocation, or a view over JS memory. */
export class BufferView {
  static {
    // The backstop entry is made here, after the constructor, not inside it: JavaScriptCore inlines
    // only 5 calls deep, and the import's chain down to the entry fits that only this way. Last:
    // once the backstop holds the view, nothing here throws.
    construct = (owner, address, facts, access, keepAlive) => {
      const view = new BufferView(owner, address, facts, access);
      if (keepAlive !== undefined) view.#extras = new Extras(keepAlive);
      view.#slot = views.add(view, owner);
      return view;
    };
    // `construct` inlined by hand, for the same depth.
    buildKeyed = (s, owner, options, producer) => {
      const f64 = s.f64;
      const address = f64[KEY_ADDRESS];
      if (address < 0) throw beyondExact(s, owner);
      const cache = keyed;
      if (f64[KEY_GENERATION] !== cache.generation || producer !== cache.producer) cache.refresh(s, producer, options);
      const view = new BufferView(owner, address, cache.facts, cache.access);
      view.#slot = views.add(view, owner);
      // The view holds the owner record the import journaled: one store ends its entry.
      journalCount[0]--;
      return view;
    };
    pinInstanceof(this);
    branded = (x) => #owner in x;
    liveView = (x) => #owner in x && (x as BufferView).#owner !== 0;
    friend = {
      state: (v) => v.#state(),
      dispose: (v) => v.#dispose(),
      share: (v) => v.#keepAlive(),
      derive: (v, d) => v.#derive(d),
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
  #slot = 0;
  /** @ignore (library-internal) Makes `structuredClone(view)`, `postMessage(view)` throw (`CLONE_GUARD`). */
  declare readonly notCloneable: object;

  /** @ignore (library-internal) Views are made by the library's functions, never with `new`. */
  private constructor(owner: number, address: number, facts: ViewFacts, access: Access) {
    this.#owner = owner;
    this.#address = address;
    this.#facts = facts;
    this.#access = access;
    // A plain store, not a class field: V8 defines a field's initial value, which made each import
    // about a third slower. perf(import+dispose)
    (this as { notCloneable: object }).notCloneable = CLONE_GUARD;
  }

  /** This view's state for one engine call (throws "disposed"). */
  #state(): ViewState {
    this.#live();
    return { owner: this.#owner, address: this.#address, facts: this.#facts, access: this.#access, key: this };
  }

  /** {@link derive}: the new view holds its own reference on the same owner record (journaled by
   * the retain until the view holds it: if building the view fails, it is released). */
  #derive(d: DerivedLayout): BufferView {
    this.#live();
    const owner = this.#owner;
    // A broadcast repeats elements, so it is never writable, whatever the base's access.
    const access = d.readonly ? "readonly" : this.#access;
    const keepAlive = this.#extras?.keepAlive;
    core().dlpk_owner_retain(owner);
    const derived = construct(owner, this.#address + d.byteOffset, derivedFacts(this.#facts, d), access, keepAlive);
    journalCount[0]--;
    // CUDA data: later fences and copies of the derived view wait for the same producer work.
    inheritStream(this, derived);
    return derived;
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

  /** Bytes per element (numpy's `itemsize`): `dl.bits / 8`, a fraction for the packed sub-byte
   * dtypes (0.5 for `float4_e2m1fn`). */
  get itemsize(): number {
    if (!(#owner in asObject(this))) throw notAView(this, "itemsize");
    return this.#facts.info.bits / 8;
  }

  /** The extent of the first axis (`shape[0]`, numpy's `len()`); refused ("shape") for a 0-d view,
   * which has none. */
  get length(): number {
    if (!(#owner in asObject(this))) throw notAView(this, "length");
    const n = this.#facts.shape[0];
    if (n === undefined) throw new DLPackError("shape", "a 0-d view has no length (numpy's len() refuses it too)");
    return n;
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
    return flagsOf(this.#facts.origin.flags);
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
    return extras.share ??= new Owner(this.#owner, releasable(() => this.#dispose(), () => this.#owner === 0));
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
    requireHost(this.#facts, "array()");
    const Ctor = this.#facts.info.array;
    if (this.#facts.size === 0) {
      return (this.#extras ??= new Extras(undefined)).array = new Ctor(new ArrayBufferCtor(0));
    }
    const facts = this.#facts;
    const start = this.#address + spanStart(facts);
    const byteLength = spanBytes(facts);
    // Made first: once the buffer exists, nothing may fail before the view holds it.
    const extras = this.#extras ??= new Extras(undefined);
    const buffer = runtime().arrayBuffer(start, byteLength);
    new BufferLink(buffer, this);
    const array = new Ctor(buffer, 0, floor(byteLength / this.#facts.info.slotBytes));
    extras.buffer = buffer;
    return extras.array = array;
  }

  /** Reads one element. Indices must be integers within the shape. */
  get(...index: number[]): Scalar {
    if (!(#owner in asObject(this))) throw notAView(this, "get()");
    if (this.#owner === 0) throw disposedError();
    const at = elementAt(this.#facts, index, "get");
    // Read in place (no ArrayBuffer made), unless an array() handed out was detached under the view
    // (its buffer transferred by other code: it reads undefined without touching memory).
    const a = this.#extras?.array;
    if (a !== undefined && a[at] === undefined) this.#live();
    return readAt(this.#facts, this.#address, at);
  }

  /** Writes one element; refused for read-only views and for "unknown" access until
   * `assumeWritable()`. */
  set(value: Scalar, ...index: number[]): void {
    if (!(#owner in asObject(this))) throw notAView(this, "set()");
    if (this.#access !== "readwrite") throw readonlyError(this.#access, this.#facts);
    if (this.#owner === 0) throw disposedError();
    const at = elementAt(this.#facts, index, "set");
    // In place; the value's checks may run caller code (a complex pair's getters) that disposes the
    // view or detaches an array() it handed out: refused then, as get() refuses.
    const code = stageValue(this.#facts, value);
    this.#live();
    storeAt(this.#facts, this.#address, at, code);
  }

  /**
   * A contiguous C-order copy in a new JS TypedArray (complex interleaved, packed sub-byte types
   * one code per byte): the way to get values you may write without touching the view's memory
   * (a read-only view's `array()` is writable; see {@link BufferView.array}).
   */
  toArray(): AnyTypedArray {
    if (!(#owner in asObject(this))) throw notAView(this, "toArray()");
    return gather(this.#facts, this.#makeArray());
  }

  /** A C-contiguous copy in library-owned native memory: host views through the native strided
   * copy, CUDA device views on the same device through the driver. */
  copy(): BufferView {
    if (!(#owner in asObject(this))) throw notAView(this, "copy()");
    return newView(copyOf(this.#state()));
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
    const stream = copyStreamOption(opts) as StreamHandle | undefined;
    return newView(toHost(this.#state(), stream));
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
   *
   * With `{ cast: true }` a view of another dtype, or a TypedArray of another type than the form
   * of `toArray()` (its values, of its natural dtype, in C order), is converted as
   * {@link BufferView.astype} converts; an array in the form of `toArray()` is copied as it is.
   */
  copyFrom(src: BufferView | AnyTypedArray | readonly unknown[], opts?: CopyFromOptions): this {
    if (!(#owner in asObject(this))) throw notAView(this, "copyFrom()");
    this.#live();
    // Every caller value is read before the states are taken: a getter could dispose either view.
    const stream = copyStreamOption(opts) as StreamHandle | undefined;
    const cast = opts === undefined || opts === null
      ? undefined
      : optionalBoolean((opts as { cast?: unknown }).cast, "copyFrom()'s cast option");
    if (isBufferView(src)) {
      const from = stateOf(src);
      if (cast === true && from.facts.info !== this.#facts.info) castInto(this.#state(), from, stream);
      else copyInto(this.#state(), from, stream);
    } else if (cast === true && !isArray(src) && typedArrayTag(src) !== this.#facts.info.tag) {
      castArrayInto(this.#state(), src, stream);
    } else {
      const values = isArray(src) ? flatten(this.#facts, src) : src;
      const tag = isArray(src) ? this.#facts.info.tag : typedArrayTag(src);
      if (tag === undefined) {
        throw new DLPackError(
          "argument",
          `copyFrom takes a BufferView, a TypedArray or nested arrays of values, got ${shown(src)}`,
        );
      }
      copyFromArray(this.#state(), values as AnyTypedArray, tag, stream);
    }
    return this;
  }

  /**
   * The DLPack protocol's producer side, with the Python keywords in camelCase: a legacy capsule
   * when `maxVersion` is absent or below [1, 0] (read-only data refused then), a versioned one
   * otherwise; `copy: true` copies (IS_COPIED), `dlDevice` other than this device is refused. For
   * CUDA data `stream` fences the consumer's stream after the view's producer stream (see
   * `fenceForConsumer` in cuda.ts); on host data a stream is refused. `importDLPack(view)` uses it.
   */
  __dlpack__(opts?: DLPackProtocolOptions): Capsule {
    if (!(#owner in asObject(this))) throw notAView(this, "__dlpack__()");
    const options = readProtocolOptions(opts);
    return protocolExport(this.#state(), options);
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
    if (dtype === undefined || ndim === undefined) {
      throw new DLPackError("argument", `as() needs a dtype and a rank, got ${shown(dtype)} and ${shown(ndim)}`);
    }
    const refusals = this.#refusals({ dtype, ndim });
    if (refusals.length > 0) {
      throw refusedError(`as(${typeof dtype === "string" ? dtype : shown(dtype)}, ${shown(ndim)}) refused`, refusals);
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
    if (this.#access === "readonly") throw readonlyForever(this.#facts);
    this.#access = "readwrite";
    return this;
  }

  /** Each requirement this view fails, as `"<field>: required <x>, got <y>"`. */
  refusals(req: Requirements): string[] {
    if (!(#owner in asObject(this))) throw notAView(this, "refusals()");
    return this.#refusals(req);
  }

  #refusals(req: Requirements): string[] {
    this.#live();
    // Read before the state is taken: the caller's object may have getters.
    const checked = readRequirements(req);
    return refusalsOf(this.#state(), checked);
  }

  /** Returns this view if it meets every requirement, else throws `DLPackError` listing them all. */
  require(req: Requirements): this {
    if (!(#owner in asObject(this))) throw notAView(this, "require()");
    const refusals = this.#refusals(req);
    if (refusals.length > 0) throw refusedError("requirements not met", refusals);
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
    return this.#derive(sliced(this.#state(), items));
  }

  /** The sub-view at integer indices on the leading axes (negative from the end, like
   * `Array.prototype.at`); with `ndim` indices a 0-d view of one element. Zero-copy. */
  at(...indices: number[]): BufferView {
    if (!(#owner in asObject(this))) throw notAView(this, "at()");
    return this.#derive(atIndices(this.#state(), indices));
  }

  /** The axes reversed (numpy's `.T`), zero-copy; with axes (`transpose(2, 0, 1)` or
   * `transpose([2, 0, 1])`), the axes in that order, as {@link BufferView.permute}. */
  transpose(): BufferView;
  /** The axes in the order `axes` lists them (`transpose([2, 0, 1])`), zero-copy. */
  transpose(axes: readonly number[]): BufferView;
  /** The axes in the order the arguments list them (`transpose(2, 0, 1)`), zero-copy. */
  transpose(...axes: number[]): BufferView;
  transpose(...axes: unknown[]): BufferView {
    if (!(#owner in asObject(this))) throw notAView(this, "transpose()");
    if (axes.length === 0) return this.#derive(transposed(this.#state()));
    return this.#derive(permuted(this.#state(), listArgument(axes)));
  }

  /** The axes reversed (numpy's `.T`, `transpose()`), zero-copy. */
  get T(): BufferView {
    if (!(#owner in asObject(this))) throw notAView(this, "T");
    return this.#derive(transposed(this.#state()));
  }

  /** The axes in the order `axes` lists them (the array API's `permute_dims`), zero-copy:
   * `permute([2, 0, 1])` or `permute(2, 0, 1)`. */
  permute(axes: readonly number[]): BufferView;
  /** The axes in the order the arguments list them (`permute(2, 0, 1)`), zero-copy. */
  permute(...axes: number[]): BufferView;
  permute(...axes: unknown[]): BufferView {
    if (!(#owner in asObject(this))) throw notAView(this, "permute()");
    return this.#derive(permuted(this.#state(), listArgument(axes)));
  }

  /** The same elements in C order under a new shape (one extent may be -1): `reshape([2, 36])` or
   * `reshape(2, 36)`. Zero-copy; throws `DLPackError` ("strides") when the strides do not allow
   * it: reshape `copy()` then. */
  reshape(shape: readonly number[]): BufferView;
  /** {@link BufferView.reshape} with the extents as arguments (`reshape(2, 36)`). */
  reshape(...shape: number[]): BufferView;
  reshape(...shape: unknown[]): BufferView {
    if (!(#owner in asObject(this))) throw notAView(this, "reshape()");
    return this.#derive(reshaped(this.#state(), listArgument(shape)));
  }

  /** The elements in reverse order along `axis` (an integer or a list, negative from the end), or
   * along every axis when it is omitted (numpy's `flip`); zero-copy, with negative strides. */
  flip(axis?: number | readonly number[]): BufferView {
    if (!(#owner in asObject(this))) throw notAView(this, "flip()");
    return this.#derive(flipped(this.#state(), axis));
  }

  /** The elements in C order as one axis: a zero-copy view when the strides allow it (as
   * `reshape(-1)`), else a copy in library memory (numpy's `ravel`). */
  ravel(): BufferView {
    if (!(#owner in asObject(this))) throw notAView(this, "ravel()");
    const state = this.#state();
    const layout = raveled(state);
    return layout === undefined ? newView(flatCopy(state)) : this.#derive(layout);
  }

  /** A copy of the elements in C order as one axis, in library memory (numpy's `flatten`): always a
   * copy, never sharing this view's memory. */
  flatten(): BufferView {
    if (!(#owner in asObject(this))) throw notAView(this, "flatten()");
    return newView(flatCopy(this.#state()));
  }

  /** The value of a view of exactly one element, whatever its rank (numpy's and PyTorch's
   * `item()`); refused ("shape") for any other size. */
  item(): Scalar {
    if (!(#owner in asObject(this))) throw notAView(this, "item()");
    return itemOf(this.#state());
  }

  /**
   * The values converted to `dtype` with numpy's casting rules (floats to integers truncate toward
   * zero; NaN, infinities and values out of range there are refused; integers wrap; complex to
   * real keeps the real part; bfloat16 and the small floats round to nearest even), in a new
   * C-contiguous allocation: on the view's device for CUDA device memory (converted on the host
   * between two copies), else in host memory. With `{ copy: false }` and the view's own dtype, a new
   * view of the same memory instead; `copy: false` with another dtype is refused. A literal dtype
   * types the result: `view.astype("float32").array()` is a `Float32Array`.
   */
  astype<D extends DType>(dtype: D, opts?: AstypeOptions): TypedView<D, number> {
    if (!(#owner in asObject(this))) throw notAView(this, "astype()");
    const info = dtypeInfo(dtype);
    const o = optionsObject(opts, "astype() options");
    const copyOption: unknown = o.copy;
    const copy = optionalBoolean(copyOption, "astype()'s copy option");
    const state = this.#state();
    if (info === state.facts.info) {
      const same = copy === false ? this.#derive(identity(state)) : newView(copyOf(state));
      return same as TypedView<D, number>;
    }
    if (copy === false) {
      throw new DLPackError(
        "dtype",
        `astype(${info.name}, { copy: false }): this view is ${state.facts.info.name}, and converting needs a copy`,
      );
    }
    return newView(castCopy(state, info)) as TypedView<D, number>;
  }

  /** numpy's broadcasting to `shape`: repeated axes get stride 0. Zero-copy and read-only. */
  broadcastTo(shape: readonly number[]): BufferView {
    if (!(#owner in asObject(this))) throw notAView(this, "broadcastTo()");
    return this.#derive(broadcast(this.#state(), shape));
  }

  /** Without extent-1 axes: all of them, or the axis (or axes) given, which must have extent 1. */
  squeeze(axis?: number | readonly number[]): BufferView {
    if (!(#owner in asObject(this))) throw notAView(this, "squeeze()");
    return this.#derive(squeezed(this.#state(), axis));
  }

  /** With a new extent-1 axis at `axis` of the result (default 0; negative from the end). */
  expandDims(axis?: number): BufferView {
    if (!(#owner in asObject(this))) throw notAView(this, "expandDims()");
    return this.#derive(expanded(this.#state(), axis));
  }

  /** Iterates the first axis: element values for a 1-d view, sub-views (`at(i)`) otherwise. */
  [Symbol.iterator](): IterableIterator<Scalar | BufferView> {
    if (!(#owner in asObject(this))) throw notAView(this, "[Symbol.iterator]()");
    return items(this, this.#firstAxis(), this.#facts.shape.length === 1);
  }

  /** `[index, item]` pairs over the first axis, as `Array.prototype.entries`. */
  entries(): IterableIterator<[number, Scalar | BufferView]> {
    if (!(#owner in asObject(this))) throw notAView(this, "entries()");
    return pairs(this, this.#firstAxis(), this.#facts.shape.length === 1);
  }

  /** The extent of the first axis (refused for a disposed or 0-d view). */
  #firstAxis(): number {
    this.#live();
    const n = this.#facts.shape[0];
    if (n === undefined) throw new DLPackError("shape", "a 0-d view has no axis to iterate over");
    return n;
  }

  /** The values as nested JS arrays (numpy's `tolist()`); a 0-d view gives its one value. */
  toNested(): unknown {
    if (!(#owner in asObject(this))) throw notAView(this, "toNested()");
    return toNested(this.#state());
  }

  /** Writes `value` into every element (checked once, as `set` checks it). */
  fill(value: Scalar): this {
    if (!(#owner in asObject(this))) throw notAView(this, "fill()");
    this.#live();
    refuseWrite(this.#access, "fill()", this.#facts);
    // Checked before the state is taken: a complex value is a caller's array.
    const one = encodeOne(this.#facts.info, value);
    fill(this.#state(), one);
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
    views.remove(this, this.#slot);
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
    views.remove(this, this.#slot);
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
      views.remove(this, this.#slot);
      this.#forget();
      return;
    }
    // Detaching leaves every TypedArray over it with length 0: no access after free.
    detach(buffer);
    this.#extras!.buffer = undefined;
    this.#extras!.array = undefined;
    views.remove(this, this.#slot);
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
    if (this.#owner === 0) throw disposedError();
    const buffer = this.#extras === undefined ? undefined : this.#extras.buffer;
    if (buffer !== undefined && isDetached(buffer)) {
      throw new DLPackError(
        "disposed",
        "the ArrayBuffer array() returned was transferred or detached by other code; this view no longer " +
          "reads through it (the memory stays alive for the transferred buffer: see the README's threat model)",
      );
    }
  }

  // Inspection: what console.log and JSON.stringify show. The formatting is in
  // src/engines/inspect.ts; here is only whether values may be read (a live view over host memory).
  /** @ignore (library-internal) `console.log(view)` in Deno; see {@link BufferView.toJSON}. */
  [DENO_INSPECT](inspect?: unknown, options?: unknown): string {
    return #owner in asObject(this) ? printed(this.#printable(), true, inspect, options) : NOT_A_VIEW_TEXT;
  }

  /** @ignore (library-internal) `console.log(view)` in Bun and Node (the same text as in Deno). */
  [NODE_INSPECT](depth?: unknown, options?: unknown): string {
    return #owner in asObject(this) ? printed(this.#printable(), false, depth, options) : NOT_A_VIEW_TEXT;
  }

  /** @ignore (library-internal) What `deno jupyter` shows: console.log's text and an HTML table. */
  [JUPYTER_DISPLAY](): { "text/plain": string; "text/html": string } {
    return displayed(#owner in asObject(this) ? this.#printable() : NOT_A_VIEW_TEXT);
  }

  /**
   * The view's metadata, without values, for `JSON.stringify(view)`. `console.log(view)` prints the
   * same facts and the values, numpy-style: nested brackets per axis, the first and last 3 items of
   * each axis above 1000 elements, no values for device memory or a disposed view.
   */
  toJSON(): ViewJSON {
    if (!(#owner in asObject(this))) throw notAView(this, "toJSON()");
    return jsonOf(this.#facts, this.#access, this.#address, this.#owner === 0);
  }

  /** What printing reads: the facts, and the values unless the view may not be read (`error`). */
  #printable(): Printable {
    let error: unknown;
    try {
      // Throws instead of reading when the array() buffer was transferred away.
      if (this.#owner !== 0) this.#live();
    } catch (thrown) {
      error = thrown;
    }
    const read = (i: number[]) => applyTo(getElement, this, i) as Scalar;
    return { facts: this.#facts, access: this.#access, disposed: this.#owner === 0, error, read };
  }

  /** One line for logs: the header `console.log` prints above the values. */
  toString(): string {
    if (!(#owner in asObject(this))) throw notAView(this, "toString()");
    return headerOf(this.#printable());
  }
}

/** The list a varargs method got: the one array argument (`reshape([2, 3])`), or the arguments
 * themselves (`reshape(2, 3)`), a fresh array the engine reads once. */
function listArgument(args: readonly unknown[]): unknown {
  return args.length === 1 && isArray(args[0]) ? args[0] : args;
}

// `get` as the class defined it, captured at load: a caller who later replaces the prototype's
// changes nothing here.
const getElement = BufferView.prototype.get;

function* items(view: BufferView, n: number, one: boolean): Generator<Scalar | BufferView> {
  for (let i = 0; i < n; i++) {
    yield one ? callWith(getElement, view, i) as Scalar : derive(view, atIndices(stateOf(view), [i]));
  }
}

function* pairs(view: BufferView, n: number, one: boolean): Generator<[number, Scalar | BufferView]> {
  for (let i = 0; i < n; i++) {
    yield [i, one ? callWith(getElement, view, i) as Scalar : derive(view, atIndices(stateOf(view), [i]))];
  }
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
  /** {@link BufferView.slice}, typed: the dtype is kept, and the rank too where the items are
   * literals (each integer, or index string such as `"-1"`, drops an axis). */
  slice<const I extends SliceItem[]>(...items: I): TypedView<D, SliceRank<N, I>>;
  /** {@link BufferView.at}, typed: each index drops a leading axis. */
  at<const I extends number[]>(...indices: I): TypedView<D, Minus<N, I["length"]>>;
  /** {@link BufferView.transpose}, typed. */
  transpose(): TypedView<D, N>;
  /** {@link BufferView.transpose} with axes, typed. */
  transpose(axes: readonly number[]): TypedView<D, N>;
  /** {@link BufferView.transpose} with axes, typed. */
  transpose(...axes: number[]): TypedView<D, N>;
  /** {@link BufferView.T}, typed. */
  readonly T: TypedView<D, N>;
  /** {@link BufferView.permute}, typed. */
  permute(axes: readonly number[]): TypedView<D, N>;
  /** {@link BufferView.permute}, typed. */
  permute(...axes: number[]): TypedView<D, N>;
  /** {@link BufferView.reshape}, typed: the rank is the new shape's length. */
  reshape<const S extends readonly number[]>(shape: S): TypedView<D, S["length"]>;
  /** {@link BufferView.reshape} with the extents as arguments, typed. */
  reshape<const S extends number[]>(...shape: S): TypedView<D, S["length"]>;
  /** {@link BufferView.flip}, typed. */
  flip(axis?: number | readonly number[]): TypedView<D, N>;
  /** {@link BufferView.ravel}, typed. */
  ravel(): TypedView<D, 1>;
  /** {@link BufferView.flatten}, typed. */
  flatten(): TypedView<D, 1>;
  /** {@link BufferView.item}, typed. */
  item(): ScalarOf<D>;
  /** {@link BufferView.astype}, typed: the rank is kept. */
  astype<E extends DType>(dtype: E, opts?: AstypeOptions): TypedView<E, N>;
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

/** The view an import with `require: R` returns: typed when `R` names a literal dtype and rank. */
export type RequiredView<R> = TypedView<RequiredDType<R>, RequiredNdim<R>>;

/** What iterating a `TypedView<D, N>` yields: values for N = 1, views of rank N - 1 otherwise. */
export type ItemOf<D extends DType, N extends number> = number extends N ? ScalarOf<D> | TypedView<D, number>
  : N extends 1 ? ScalarOf<D>
  : TypedView<D, Minus<N, 1>>;
