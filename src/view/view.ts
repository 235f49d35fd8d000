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
import { copyStreamOption, DLPackError, shown } from "../facts/errors.ts";
import type { AnyTypedArray, ArrayFor, DLDataType, DType, Scalar, ScalarOf } from "../facts/dtypes.ts";
import { type Device, deviceCode } from "../facts/devices.ts";
import { listArgument, type SliceItem } from "../facts/shape.ts";
import {
  ArrayBufferCtor,
  callWith,
  detach,
  floor,
  freeze,
  isDetached,
  ObjectCtor,
  pinInstanceof,
  toBigInt,
} from "../facts/intrinsics.ts";
import { LazyBackstop, OWNER_RECORD_BYTES } from "../native/backstop.ts";
import { journalCount, releaseOwner } from "../native/journal.ts";
import { makeOwner, type Owner } from "../native/shares.ts";
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
import { beyondExact, keyed } from "../engines/facts.ts";
import { elementAt, gather, readAt, requireHost, spanBytes, spanStart, stageValue, storeAt } from "../engines/codec.ts";
import { atIndices, broadcast, expanded, permuted, reshaped, sliced, squeezed, transposed } from "../engines/derive.ts";
import { copyOf, type CopyOptions, refuseWrite, toHost } from "../engines/copy.ts";
import {
  arraySource,
  astypeArguments,
  astyped,
  type AstypeOptions,
  copyArrayInto,
  type CopyFromOptions,
  copyFromOptions,
  copyViewInto,
} from "../engines/cast.ts";
import { flatCopy, flipped, identity, itemOf, raveled } from "../engines/layouts.ts";
import { type DLPackProtocolOptions, protocolExport, readProtocolOptions } from "../engines/exports.ts";
import {
  asRequirements,
  readRequirements,
  refusalsOf,
  refuseAs,
  refusedError,
  type RequiredDType,
  type RequiredNdim,
  type Requirements,
} from "../engines/requirements.ts";
import { encodeOne, fill, toNested } from "../engines/values.ts";
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
/** A view's facts for a getter, after the receiver's brand check (`what` names the getter). */
let factsOf: (x: unknown, what: string) => ViewFacts;

// What the layers above read of a view and do with it (its own fields and private methods) goes
// through these functions, never through the public getters, which live on a prototype anyone can
// redefine.

/** A view's state for one engine call (throws "disposed" for a disposed view, and for one whose
 * `array()` buffer was transferred away). */
export let stateOf: (view: BufferView) => ViewState;
/** Disposes a view (idempotent). */
export let disposeView: (view: BufferView) => void;
/** The view's own share (`view.keepAlive`). */
export let shareOf: (view: BufferView) => Owner;
/** A new view over part of `base`'s memory (`layout` from src/engines/derive.ts), holding its own
 * share of the same owner record: disposing either leaves the other intact. Refused ("disposed")
 * for a disposed base. */
export let derive: (base: BufferView, layout: DerivedLayout) => BufferView;

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

/** Whether `x` really is a view this library made. `instanceof` is not enough: an object made with
 * `Object.create(BufferView.prototype)` passes it and then fails on the first private field. */
export function isBufferView(x: unknown): x is BufferView {
  return typeof x === "object" && x !== null && branded(x);
}

/** What the library passes its own constructor calls; nothing outside this module holds it. */
const MAKER: object = freeze({});
const NO_NEW_TEXT = "BufferView has no public constructor: views come from the library's functions " +
  "(importDLPack, fromArray, zeros, empty, ...), never from new BufferView()";

/** {@link ObjectCtor} in a constant of this module, which the JIT folds (an imported binding it
 * reads anew each time). */
const asObject: ObjectConstructor = ObjectCtor;

/** A zero-copy view of a tensor: an import, a library allocation, or a view over JS memory. `D` and
 * `N` are its dtype and rank where TypeScript knows them (a literal dtype, `as()`, `require`): they
 * type `array()`, `get`/`set` and the indices. A plain `BufferView` is any dtype and rank. */
export class BufferView<D extends DType = DType, N extends number = number> {
  /** The brand check (`x instanceof BufferView`): it narrows to a plain view, never a typed one. */
  declare static [Symbol.hasInstance]: (x: unknown) => x is BufferView;

  static {
    // The backstop entry is made here, after the constructor, not inside it: JavaScriptCore inlines
    // only 5 calls deep, and the import's chain down to the entry fits that only this way. Last:
    // once the backstop holds the view, nothing here throws.
    construct = (owner, address, facts, access, keepAlive) => {
      const view = new BufferView(owner, address, facts, access, MAKER);
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
      const view = new BufferView(owner, address, cache.facts, cache.access, MAKER);
      view.#slot = views.add(view, owner);
      // The view holds the owner record the import journaled: one store ends its entry.
      journalCount[0]--;
      return view;
    };
    pinInstanceof(this);
    branded = (x) => #owner in x;
    liveView = (x) => #owner in x && (x as BufferView).#owner !== 0;
    factsOf = (x, what) => {
      if (!(#owner in asObject(x))) throw notAView(x, what);
      return (x as BufferView).#facts;
    };
    stateOf = (v) => v.#state();
    disposeView = (v) => v.#dispose();
    shareOf = (v) => v.#keepAlive();
    derive = (v, d) => v.#derive(d);
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
  private constructor(owner: number, address: number, facts: ViewFacts, access: Access, maker: object) {
    // TypeScript's `private` is gone at run time: without this, `new BufferView(...)` with any
    // address and facts would read and write wherever a caller pointed it.
    if (maker !== MAKER) throw new DLPackError("argument", NO_NEW_TEXT);
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
  #derive<V>(d: DerivedLayout): V {
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
    return derived as V;
  }

  /** Address of element 0 (the producer's `byte_offset` already folded in). */
  get address(): bigint {
    if (!(#owner in asObject(this))) throw notAView(this, "address");
    return toBigInt(this.#address);
  }

  /** The dtype name ("float32", "bfloat16", "float8_e4m3fn", "complex64", "bool", ...). */
  get dtype(): D {
    return factsOf(this, "dtype").info.name as D;
  }

  /** The DLPack triple of the dtype. */
  get dl(): DLDataType {
    return factsOf(this, "dl").info.dl;
  }

  /** Extents per dimension. */
  get shape(): Readonly<Tuple<number, N>> & readonly number[] {
    // The view's own array, frozen once: nothing can change it, so nothing needs a copy.
    return freeze(factsOf(this, "shape").shape) as Tuple<number, N> & number[];
  }

  /** Strides in elements (computed in C order when the producer sent NULL). */
  get strides(): Readonly<Tuple<number, N>> & readonly number[] {
    return freeze(factsOf(this, "strides").strides) as Tuple<number, N> & number[];
  }

  /** Number of dimensions. */
  get ndim(): N {
    return factsOf(this, "ndim").shape.length as N;
  }

  /** Bytes per element (numpy's `itemsize`): `dl.bits / 8`, a fraction for the packed sub-byte
   * dtypes (0.5 for `float4_e2m1fn`). */
  get itemsize(): number {
    return factsOf(this, "itemsize").info.bits / 8;
  }

  /** The extent of the first axis (`shape[0]`, numpy's `len()`); refused ("shape") for a 0-d view,
   * which has none. */
  get length(): number {
    const n = factsOf(this, "length").shape[0];
    if (n === undefined) throw new DLPackError("shape", "a 0-d view has no length (numpy's len() refuses it too)");
    return n;
  }

  /** Number of elements. */
  get size(): number {
    return factsOf(this, "size").size;
  }

  /** Bytes of the elements themselves (`size` x item size; packed sub-byte types round up). */
  get nbytes(): number {
    return factsOf(this, "nbytes").nbytes;
  }

  /** Where the memory lives. */
  get device(): Device {
    return factsOf(this, "device").device;
  }

  /** Whether the CUDA driver confirmed the device claim (always true for host memory). */
  get verified(): boolean {
    return factsOf(this, "verified").origin.verified;
  }

  /** "readwrite" or "readonly" as the producer declared; "unknown" for the legacy struct; "readonly"
   * whatever the producer said when the data lies in memory this process cannot write. */
  get access(): Access {
    if (!(#owner in asObject(this))) throw notAView(this, "access");
    return this.#access;
  }

  /** "external" for imports, the library's name for memory it allocated. */
  get owner(): string {
    return factsOf(this, "owner").origin.ownerName;
  }

  /** The producer's name when known (e.g. "numpy.ndarray"), else null. */
  get producer(): string | null {
    return factsOf(this, "producer").origin.producer;
  }

  /** The producer's DLPack version, or null for the legacy struct. */
  get version(): DLPackVersion | null {
    const version = factsOf(this, "version").origin.version;
    return version === null ? null : { major: version.major, minor: version.minor };
  }

  /** The versioned struct's flags (all false for legacy imports); `readOnly` is also set when the data
   * lies in memory this process cannot write. */
  get flags(): Flags {
    return flagsOf(factsOf(this, "flags").origin.flags);
  }

  /** Whether the elements are laid out in C (row-major) order with no gaps. */
  get cContiguous(): boolean {
    return (factsOf(this, "cContiguous").layout & LAYOUT_C) !== 0;
  }

  /** Whether the elements are laid out in Fortran (column-major) order with no gaps. */
  get fContiguous(): boolean {
    return (factsOf(this, "fContiguous").layout & LAYOUT_F) !== 0;
  }

  /** Elements from the start of `array()` to element 0 (non-zero only with negative strides). */
  get spanOffset(): number {
    const facts = factsOf(this, "spanOffset");
    return -facts.minOffset * facts.info.slots;
  }

  /** This view's own share of the memory. `keepAlive.retain()` gives an independent share that
   * keeps the memory alive after the view is disposed; releasing this one disposes the view. */
  get keepAlive(): Owner {
    if (!(#owner in asObject(this))) throw notAView(this, "keepAlive");
    return this.#keepAlive();
  }

  #keepAlive(): Owner {
    const extras = this.#extras ??= new Extras(undefined);
    return extras.share ??= makeOwner(this.#owner, releasable(() => this.#dispose(), () => this.#owner === 0));
  }

  /** The JS value this view keeps reachable (e.g. a Python object behind an array interface). */
  get keepAliveValue(): unknown {
    if (!(#owner in asObject(this))) throw notAView(this, "keepAliveValue");
    return this.#extras?.keepAlive;
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
  array(): ArrayFor<D> {
    if (!(#owner in asObject(this))) throw notAView(this, "array()");
    return this.#makeArray() as ArrayFor<D>;
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
  get(...index: Tuple<number, N>): ScalarOf<D> {
    if (!(#owner in asObject(this))) throw notAView(this, "get()");
    if (this.#owner === 0) throw disposedError();
    const at = elementAt(this.#facts, index, "get");
    // Read in place (no ArrayBuffer made), unless an array() handed out was detached under the view
    // (its buffer transferred by other code: it reads undefined without touching memory).
    const a = this.#extras?.array;
    if (a !== undefined && a[at] === undefined) this.#live();
    return readAt(this.#facts, this.#address, at) as ScalarOf<D>;
  }

  /** Writes one element; refused for read-only views and for "unknown" access until
   * `assumeWritable()`. */
  set(value: ScalarOf<D>, ...index: Tuple<number, N>): void {
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
  toArray(): ArrayFor<D> {
    if (!(#owner in asObject(this))) throw notAView(this, "toArray()");
    return gather(this.#facts, this.#makeArray()) as ArrayFor<D>;
  }

  /** A C-contiguous copy in library-owned native memory: host views through the native strided
   * copy, CUDA device views on the same device through the driver. */
  copy(): BufferView<D, N> {
    if (!(#owner in asObject(this))) throw notAView(this, "copy()");
    return newView(copyOf(this.#state())) as BufferView<D, N>;
  }

  /**
   * A new C-contiguous view in library-owned host (CPU) memory with this view's values. CUDA
   * device memory is copied through the driver (ordered after the view's producer stream, or on
   * `opts.stream`, and complete on return); host-accessible memory is copied directly. Throws
   * `DLPackError` ("cuda") when device memory needs a driver that is missing.
   */
  toHost(opts?: CopyOptions): BufferView<D, N> {
    if (!(#owner in asObject(this))) throw notAView(this, "toHost()");
    this.#live();
    const stream = copyStreamOption(opts) as StreamHandle | undefined;
    return newView(toHost(this.#state(), stream)) as BufferView<D, N>;
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
    const o = copyFromOptions(opts);
    if (isBufferView(src)) {
      copyViewInto(this.#state(), stateOf(src), o);
    } else {
      const values = arraySource(this.#facts, src, o.cast);
      copyArrayInto(this.#state(), values, o.stream);
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
  as<E extends DType, M extends number>(dtype: E, ndim: M): BufferView<E, M> {
    if (!(#owner in asObject(this))) throw notAView(this, "as()");
    const checked = asRequirements(dtype, ndim);
    refuseAs(this.#state(), checked, dtype, ndim);
    return this as unknown as BufferView<E, M>;
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
  slice<const I extends SliceItem[]>(...items: I): BufferView<D, SliceRank<N, I>> {
    if (!(#owner in asObject(this))) throw notAView(this, "slice()");
    return this.#derive(sliced(this.#state(), items));
  }

  /** The sub-view at integer indices on the leading axes (negative from the end, like
   * `Array.prototype.at`); with `ndim` indices a 0-d view of one element. Zero-copy. */
  at<const I extends number[]>(...indices: I): BufferView<D, Minus<N, I["length"]>> {
    if (!(#owner in asObject(this))) throw notAView(this, "at()");
    return this.#derive(atIndices(this.#state(), indices));
  }

  /** The axes reversed (numpy's `.T`), zero-copy; with axes (`transpose(2, 0, 1)` or
   * `transpose([2, 0, 1])`), the axes in that order, as {@link BufferView.permute}. */
  transpose(): BufferView<D, N>;
  /** The axes in the order `axes` lists them (`transpose([2, 0, 1])`), zero-copy. */
  transpose(axes: readonly number[]): BufferView<D, N>;
  /** The axes in the order the arguments list them (`transpose(2, 0, 1)`), zero-copy. */
  transpose(...axes: number[]): BufferView<D, N>;
  transpose(...axes: unknown[]): BufferView<D, N> {
    if (!(#owner in asObject(this))) throw notAView(this, "transpose()");
    if (axes.length === 0) return this.#derive(transposed(this.#state()));
    return this.#derive(permuted(this.#state(), listArgument(axes)));
  }

  /** The axes reversed (numpy's `.T`, `transpose()`), zero-copy. */
  get T(): BufferView<D, N> {
    if (!(#owner in asObject(this))) throw notAView(this, "T");
    return this.#derive(transposed(this.#state()));
  }

  /** The axes in the order `axes` lists them (the array API's `permute_dims`), zero-copy:
   * `permute([2, 0, 1])` or `permute(2, 0, 1)`. */
  permute(axes: readonly number[]): BufferView<D, N>;
  /** The axes in the order the arguments list them (`permute(2, 0, 1)`), zero-copy. */
  permute(...axes: number[]): BufferView<D, N>;
  permute(...axes: unknown[]): BufferView<D, N> {
    if (!(#owner in asObject(this))) throw notAView(this, "permute()");
    return this.#derive(permuted(this.#state(), listArgument(axes)));
  }

  /** The same elements in C order under a new shape (one extent may be -1): `reshape([2, 36])` or
   * `reshape(2, 36)`. Zero-copy; throws `DLPackError` ("strides") when the strides do not allow
   * it: reshape `copy()` then. */
  reshape<const S extends readonly number[]>(shape: S): BufferView<D, S["length"]>;
  /** {@link BufferView.reshape} with the extents as arguments (`reshape(2, 36)`). */
  reshape<const S extends number[]>(...shape: S): BufferView<D, S["length"]>;
  reshape(...shape: unknown[]): BufferView<D> {
    if (!(#owner in asObject(this))) throw notAView(this, "reshape()");
    return this.#derive(reshaped(this.#state(), listArgument(shape)));
  }

  /** The elements in reverse order along `axis` (an integer or a list, negative from the end), or
   * along every axis when it is omitted (numpy's `flip`); zero-copy, with negative strides. */
  flip(axis?: number | readonly number[]): BufferView<D, N> {
    if (!(#owner in asObject(this))) throw notAView(this, "flip()");
    return this.#derive(flipped(this.#state(), axis));
  }

  /** The elements in C order as one axis: a zero-copy view when the strides allow it (as
   * `reshape(-1)`), else a copy in library memory (numpy's `ravel`). */
  ravel(): BufferView<D, 1> {
    if (!(#owner in asObject(this))) throw notAView(this, "ravel()");
    const state = this.#state();
    const layout = raveled(state);
    return (layout === undefined ? newView(flatCopy(state)) : this.#derive(layout)) as BufferView<D, 1>;
  }

  /** A copy of the elements in C order as one axis, in library memory (numpy's `flatten`): always a
   * copy, never sharing this view's memory. */
  flatten(): BufferView<D, 1> {
    if (!(#owner in asObject(this))) throw notAView(this, "flatten()");
    return newView(flatCopy(this.#state())) as BufferView<D, 1>;
  }

  /** The value of a view of exactly one element, whatever its rank (numpy's and PyTorch's
   * `item()`); refused ("shape") for any other size. */
  item(): ScalarOf<D> {
    if (!(#owner in asObject(this))) throw notAView(this, "item()");
    return itemOf(this.#state()) as ScalarOf<D>;
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
  astype<E extends DType>(dtype: E, opts?: AstypeOptions): BufferView<E, N> {
    if (!(#owner in asObject(this))) throw notAView(this, "astype()");
    const { info, copy } = astypeArguments(dtype, opts);
    const state = this.#state();
    const owned = astyped(state, info, copy);
    return owned === undefined ? this.#derive(identity(state)) : newView(owned) as BufferView<E, N>;
  }

  /** numpy's broadcasting to `shape`: repeated axes get stride 0. Zero-copy and read-only. */
  broadcastTo<const S extends readonly number[]>(shape: S): BufferView<D, S["length"]> {
    if (!(#owner in asObject(this))) throw notAView(this, "broadcastTo()");
    return this.#derive(broadcast(this.#state(), shape));
  }

  /** Without extent-1 axes: all of them, or the axis (or axes) given, which must have extent 1. */
  squeeze(axis?: number | readonly number[]): BufferView<D> {
    if (!(#owner in asObject(this))) throw notAView(this, "squeeze()");
    return this.#derive(squeezed(this.#state(), axis));
  }

  /** With a new extent-1 axis at `axis` of the result (default 0; negative from the end). */
  expandDims(axis?: number): BufferView<D, Plus1<N>> {
    if (!(#owner in asObject(this))) throw notAView(this, "expandDims()");
    return this.#derive(expanded(this.#state(), axis));
  }

  /** Iterates the first axis: element values for a 1-d view, sub-views (`at(i)`) otherwise. */
  [Symbol.iterator](): IterableIterator<ItemOf<D, N>> {
    if (!(#owner in asObject(this))) throw notAView(this, "[Symbol.iterator]()");
    return this.#items(false) as IterableIterator<ItemOf<D, N>>;
  }

  /** `[index, item]` pairs over the first axis, as `Array.prototype.entries`. */
  entries(): IterableIterator<[number, ItemOf<D, N>]> {
    if (!(#owner in asObject(this))) throw notAView(this, "entries()");
    return this.#items(true) as IterableIterator<[number, ItemOf<D, N>]>;
  }

  /** The first axis's items, or `[index, item]` pairs (refused now for a disposed or 0-d view). */
  #items(pairs: boolean): Generator<unknown> {
    this.#live();
    const n = this.#facts.shape[0];
    if (n === undefined) throw new DLPackError("shape", "a 0-d view has no axis to iterate over");
    return axisItems(this as BufferView, n, this.#facts.shape.length === 1, pairs);
  }

  /** The values as nested JS arrays (numpy's `tolist()`); a 0-d view gives its one value. */
  toNested(): Nested<ScalarOf<D>, N> {
    if (!(#owner in asObject(this))) throw notAView(this, "toNested()");
    return toNested(this.#state()) as Nested<ScalarOf<D>, N>;
  }

  /** Writes `value` into every element (checked once, as `set` checks it). */
  fill(value: ScalarOf<D>): this {
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

// `get` as the class defined it, captured at load: a caller who later replaces the prototype's
// changes nothing here.
const getElement = BufferView.prototype.get;

function* axisItems(view: BufferView, n: number, values: boolean, pairs: boolean): Generator<unknown> {
  for (let i = 0; i < n; i++) {
    const item = values ? callWith(getElement, view, i) : derive(view, atIndices(stateOf(view), [i]));
    yield pairs ? [i, item] : item;
  }
}

/** A view whose dtype and rank TypeScript knows: `BufferView<D, N>` (the name the API used first). */
export type TypedView<D extends DType, N extends number> = BufferView<D, N>;

/** The view an import with `require: R` returns: typed when `R` names a literal dtype and rank. */
export type RequiredView<R> = BufferView<RequiredDType<R>, RequiredNdim<R>>;

/** What iterating a `BufferView<D, N>` yields: values for N = 1, views of rank N - 1 otherwise. */
export type ItemOf<D extends DType, N extends number> = number extends N ? ScalarOf<D> | BufferView<D>
  : N extends 1 ? ScalarOf<D>
  : BufferView<D, Minus<N, 1>>;
