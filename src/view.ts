/**
 * `BufferView`: one class for every imported tensor and every library allocation. It reads
 * element by element honouring strides, hands out zero-copy TypedArrays for host memory, checks
 * requirements, and releases its share of the memory exactly once.
 * @module
 */
import { core, runtime } from "../ffi/mod.ts";
import { DLPackError } from "./errors.ts";
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
} from "./dtypes.ts";
import { type Device, deviceCode, deviceOf, formatDevice, isHostAccessible } from "./devices.ts";
import { bfloat16ToNumber, decodeMiniFloat, encodeMiniFloat, numberToBfloat16 } from "./scalars.ts";
import { LazyBackstop, Owner } from "./owner.ts";
import { requirementRefusals, type Requirements } from "./requirements.ts";
import { DEVICE_VERIFIED, F64, I32, LAYOUT_C, LAYOUT_F, type Scratch, U32 } from "./description.ts";
import { infoOfTriple } from "./dtypes.ts";
import { copyOf } from "./alloc.ts";
import { type DLPackProtocolOptions, viewDLPack } from "./export.ts";
import type { Capsule } from "./capsule.ts";
import { copyInto, type CopyOptions, toHost } from "./cuda.ts";

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

/** What the library records when it creates a view. */
export interface ViewInit {
  readonly address: number;
  /** Native owner record holding one share for this view. */
  readonly owner: number;
  readonly info: DTypeInfo;
  readonly shape: number[];
  readonly strides: number[];
  readonly size: number;
  readonly nbytes: number;
  readonly minOffset: number;
  readonly maxOffset: number;
  readonly layout: number;
  readonly device: Device;
  readonly access: Access;
  readonly version: DLPackVersion | null;
  readonly flags: number;
  readonly producer: string | null;
  readonly ownerName: string;
  /** Verified device memory (CUDA pointer attributes), or unverified. */
  readonly verified?: boolean;
  readonly keepAlive?: unknown;
}

const READ_ONLY = 1;
const IS_COPIED = 2;
const SUBBYTE_PADDED = 4;

/** Ties a handed-out ArrayBuffer to its view: the view (and its memory) lives while the buffer does. */
const VIEW_OF_BUFFER = Symbol("dlpack.view");

/** The library's name, recorded as `owner` on memory it allocated. */
export const LIBRARY_NAME = "dlpack-ts";

/** Releases the share of views collected without `dispose()` (only a backstop). */
const views = new LazyBackstop<number>(
  (owner) => core().dlpk_owner_release(owner),
  (holder) => !(holder as BufferView).disposed,
);

type Construct = (
  address: number,
  owner: number,
  info: DTypeInfo,
  shape: number[],
  strides: number[],
  size: number,
  nbytes: number,
  minOffset: number,
  maxOffset: number,
  layout: number,
  device: Device,
  access: Access,
  major: number,
  minor: number,
  flags: number,
  producer: string | null,
  ownerName: string,
  verified: boolean,
  keepAlive: unknown,
) => BufferView;

let construct: Construct;
let branded: (x: object) => boolean;

/** Makes a view; only library modules call this. */
export function makeView(init: ViewInit): BufferView {
  return construct(
    init.address,
    init.owner,
    init.info,
    init.shape,
    init.strides,
    init.size,
    init.nbytes,
    init.minOffset,
    init.maxOffset,
    init.layout,
    init.device,
    init.access,
    init.version?.major ?? -1,
    init.version?.minor ?? -1,
    init.flags,
    init.producer,
    init.ownerName,
    init.verified ?? true,
    init.keepAlive,
  );
}

/**
 * Makes a view from the description a native call just wrote (the import hot path: no
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
  const owner = s.owner();
  try {
    const f64 = s.f64;
    const i32 = s.i32;
    const u32 = s.u32;
    const ndim = i32[I32.ndim];
    const shape = new Array<number>(ndim);
    const strides = new Array<number>(ndim);
    for (let d = 0; d < ndim; d++) {
      shape[d] = f64[F64.shape + d];
      strides[d] = f64[F64.strides + d];
    }
    const info = infoOfTriple(u32[U32.code], u32[U32.bits]);
    if (info === undefined) throw new DLPackError("dtype", "native and TS dtype tables disagree");
    return construct(
      s.address(),
      owner,
      info,
      shape,
      strides,
      f64[F64.size],
      f64[F64.nbytes],
      f64[F64.minOffset],
      f64[F64.maxOffset],
      u32[U32.layout],
      deviceOf(i32[I32.deviceType], i32[I32.deviceId]),
      access,
      i32[I32.major],
      i32[I32.minor],
      u32[U32.flags],
      producer,
      ownerName,
      // Unless the caller knows, the native check says (CPU memory, or a claim the CUDA driver confirmed).
      verified ?? (u32[U32.layout] & DEVICE_VERIFIED) !== 0,
      keepAlive,
    );
  } catch (error) {
    core().dlpk_owner_release(owner);
    throw error;
  }
}

/** Whether `x` really is a view this library made. `instanceof` is not enough: an object made with
 * `Object.create(BufferView.prototype)` passes it and then fails on the first private field. */
export function isBufferView(x: unknown): x is BufferView {
  return typeof x === "object" && x !== null && branded(x);
}

/** A zero-copy view of a tensor: an import, a library allocation, or a view over JS memory. */
export class BufferView {
  static {
    // Explicit parameters: a rest/spread pair here would allocate an array per view.
    construct = (
      address,
      owner,
      info,
      shape,
      strides,
      size,
      nbytes,
      minOffset,
      maxOffset,
      layout,
      device,
      access,
      major,
      minor,
      flags,
      producer,
      ownerName,
      verified,
      keepAlive,
    ) =>
      new BufferView(
        address,
        owner,
        info,
        shape,
        strides,
        size,
        nbytes,
        minOffset,
        maxOffset,
        layout,
        device,
        access,
        major,
        minor,
        flags,
        producer,
        ownerName,
        verified,
        keepAlive,
      );
    branded = (x) => #owner in x;
  }

  #address: number;
  #owner: number;
  #info: DTypeInfo;
  #shape: number[];
  #strides: number[];
  #size: number;
  #nbytes: number;
  #minOffset: number;
  #maxOffset: number;
  #layout: number;
  #device: Device;
  #access: Access;
  #major: number;
  #minor: number;
  #flags: number;
  #producer: string | null;
  #ownerName: string;
  #verified: boolean;
  #keepAliveValue: unknown;
  #array: AnyTypedArray | undefined = undefined;
  #buffer: ArrayBuffer | undefined = undefined;
  #publicShape: readonly number[] | undefined = undefined;
  #publicStrides: readonly number[] | undefined = undefined;
  #share: Owner | undefined = undefined;
  #epoch: number;

  private constructor(
    address: number,
    owner: number,
    info: DTypeInfo,
    shape: number[],
    strides: number[],
    size: number,
    nbytes: number,
    minOffset: number,
    maxOffset: number,
    layout: number,
    device: Device,
    access: Access,
    major: number,
    minor: number,
    flags: number,
    producer: string | null,
    ownerName: string,
    verified: boolean,
    keepAlive: unknown,
  ) {
    this.#address = address;
    this.#owner = owner;
    this.#info = info;
    this.#shape = shape;
    this.#strides = strides;
    this.#size = size;
    this.#nbytes = nbytes;
    this.#minOffset = minOffset;
    this.#maxOffset = maxOffset;
    this.#layout = layout;
    this.#device = device;
    this.#access = access;
    this.#major = major;
    this.#minor = minor;
    this.#flags = flags;
    this.#producer = producer;
    this.#ownerName = ownerName;
    this.#verified = verified;
    this.#keepAliveValue = keepAlive;
    this.#epoch = views.add(this, owner);
  }

  /** Address of element 0 (the producer's `byte_offset` already folded in). */
  get address(): bigint {
    return BigInt(this.#address);
  }

  /** The dtype name ("float32", "bfloat16", "float8_e4m3fn", "complex64", "bool", ...). */
  get dtype(): DType {
    return this.#info.name;
  }

  /** The DLPack triple of the dtype. */
  get dl(): DLDataType {
    return this.#info.dl;
  }

  /** Extents per dimension. */
  get shape(): readonly number[] {
    return this.#publicShape ??= Object.freeze(this.#shape.slice());
  }

  /** Strides in elements (computed in C order when the producer sent NULL). */
  get strides(): readonly number[] {
    return this.#publicStrides ??= Object.freeze(this.#strides.slice());
  }

  /** Number of dimensions. */
  get ndim(): number {
    return this.#shape.length;
  }

  /** Number of elements. */
  get size(): number {
    return this.#size;
  }

  /** Bytes of the elements themselves (`size` x item size; packed sub-byte types round up). */
  get nbytes(): number {
    return this.#nbytes;
  }

  /** Where the memory lives. */
  get device(): Device {
    return this.#device;
  }

  /** Whether the CUDA driver confirmed the device claim (always true for host memory). */
  get verified(): boolean {
    return this.#verified;
  }

  /** "readwrite" or "readonly" as the producer declared; "unknown" for the legacy struct. */
  get access(): Access {
    return this.#access;
  }

  /** "external" for imports, the library's name for memory it allocated. */
  get owner(): string {
    return this.#ownerName;
  }

  /** The producer's name when known (e.g. "numpy.ndarray"), else null. */
  get producer(): string | null {
    return this.#producer;
  }

  /** The producer's DLPack version, or null for the legacy struct. */
  get version(): DLPackVersion | null {
    return this.#major < 0 ? null : { major: this.#major, minor: this.#minor };
  }

  /** The versioned struct's flags (all false for legacy imports). */
  get flags(): Flags {
    const f = this.#flags;
    return {
      readOnly: (f & READ_ONLY) !== 0,
      isCopied: (f & IS_COPIED) !== 0,
      subbytePadded: (f & SUBBYTE_PADDED) !== 0,
    };
  }

  /** Whether the elements are laid out in C (row-major) order with no gaps. */
  get cContiguous(): boolean {
    return (this.#layout & LAYOUT_C) !== 0;
  }

  /** Whether the elements are laid out in Fortran (column-major) order with no gaps. */
  get fContiguous(): boolean {
    return (this.#layout & LAYOUT_F) !== 0;
  }

  /** Elements from the start of `array()` to element 0 (non-zero only with negative strides). */
  get spanOffset(): number {
    return -this.#minOffset * this.#info.slots;
  }

  /** This view's own share of the memory. `keepAlive.retain()` gives an independent share that
   * keeps the memory alive after the view is disposed; releasing this one disposes the view. */
  get keepAlive(): Owner {
    return this.#share ??= new Owner(this.#owner, this);
  }

  /** The JS value this view keeps reachable (e.g. a Python object behind an array interface). */
  get keepAliveValue(): unknown {
    return this.#keepAliveValue;
  }

  /** Whether `dispose()` ran. */
  get disposed(): boolean {
    return this.#owner === 0;
  }

  /** @internal The native owner record (for exports that retain it). */
  get nativeOwner(): number {
    this.#live();
    return this.#owner;
  }

  /** @internal Element 0's address as a number. */
  get addressNumber(): number {
    return this.#address;
  }

  /** @internal Strides without the defensive copy. */
  get rawStrides(): readonly number[] {
    return this.#strides;
  }

  /** @internal Shape without the defensive copy. */
  get rawShape(): readonly number[] {
    return this.#shape;
  }

  /** @internal The raw flag bits. */
  get flagBits(): number {
    return this.#flags;
  }

  /** Whether `set` may write: "readwrite" access, or "unknown" after `assumeWritable()`. */
  get writable(): boolean {
    return this.#access === "readwrite";
  }

  /**
   * A zero-copy TypedArray over the view's whole span (from its lowest to its highest element),
   * for host-accessible memory. Element 0 sits at `spanOffset`. Complex dtypes interleave real
   * and imaginary parts; bfloat16 comes as Uint16Array bits; bool, FP8, FP6 and FP4 as Uint8Array.
   * The array is detached (length 0) when the view is disposed, so it can never read freed memory.
   */
  array(): AnyTypedArray {
    this.#live();
    if (this.#array !== undefined) return this.#array;
    if (this.#device.type !== "cpu" && !isHostAccessible(this.#device.type)) {
      throw new DLPackError(
        "device",
        `array() needs host-accessible memory; this view is on ${
          formatDevice(this.#device)
        } (copy it to the host first)`,
      );
    }
    const Ctor = this.#info.array;
    if (this.#size === 0) return this.#array = new Ctor(new ArrayBuffer(0));
    let start: number;
    let byteLength: number;
    const bits = this.#info.bits;
    if (bits >= 8) {
      const bytes = bits >> 3;
      start = this.#address + this.#minOffset * bytes;
      byteLength = (this.#maxOffset - this.#minOffset + 1) * bytes;
    } else [start, byteLength] = this.#byteSpan();
    const buffer = runtime().arrayBuffer(start, byteLength);
    // A plain symbol property (defineProperty is several times slower on ArrayBuffers).
    (buffer as ArrayBuffer & { [VIEW_OF_BUFFER]?: BufferView })[VIEW_OF_BUFFER] = this;
    this.#buffer = buffer;
    return this.#array = new Ctor(buffer, 0, Math.floor(byteLength / Ctor.BYTES_PER_ELEMENT));
  }

  /** Start address and length in bytes of the memory the view can reach. */
  #byteSpan(): [number, number] {
    const bits = this.#slotBits();
    const loBits = this.#minOffset * bits;
    const hiBits = (this.#maxOffset + 1) * bits;
    const lo = Math.floor(loBits / 8);
    const hi = Math.ceil(hiBits / 8);
    return [this.#address + lo, hi - lo];
  }

  /** Bits each element occupies in memory (padded sub-byte types take a whole byte). */
  #slotBits(): number {
    const bits = this.#info.bits;
    return bits < 8 && (this.#flags & SUBBYTE_PADDED) !== 0 ? 8 : bits;
  }

  /** Reads one element. Indices must be integers within the shape. */
  get(...index: number[]): Scalar {
    const at = this.#position(index, "get");
    const a = this.#array ?? this.array();
    switch (this.#info.kind) {
      case "int":
      case "float":
      case "bigint":
        return a[at];
      case "bool":
        return a[at] !== 0;
      case "bfloat16":
        return bfloat16ToNumber(a[at] as number);
      case "complex":
        return [a[at * 2] as number, a[at * 2 + 1] as number] as Complex;
      case "minifloat":
        return decodeMiniFloat(this.#info.name as MiniFloatDType, this.#readBits(a as Uint8Array, at));
    }
  }

  /** Writes one element; refused for read-only views and for "unknown" access until
   * `assumeWritable()`. */
  set(value: Scalar, ...index: number[]): void {
    if (this.#access !== "readwrite") {
      throw new DLPackError(
        "readonly",
        this.#access === "readonly"
          ? "this view is read-only (the producer set READ_ONLY)"
          : "this view's access is unknown (legacy DLPack carries no read-only flag); call assumeWritable() if you know it may be written",
      );
    }
    const at = this.#position(index, "set");
    const a = this.#array ?? this.array();
    const info = this.#info;
    switch (info.kind) {
      case "int":
        a[at] = expectInteger(value, info.name);
        return;
      case "float":
        a[at] = expectNumber(value, info.name);
        return;
      case "bigint":
        a[at] = expectBigInt(value, info.name);
        return;
      case "bool":
        if (typeof value !== "boolean") throw typeError(info.name, "a boolean", value);
        a[at] = value ? 1 : 0;
        return;
      case "bfloat16":
        a[at] = numberToBfloat16(expectNumber(value, info.name));
        return;
      case "complex": {
        if (
          !Array.isArray(value) || value.length !== 2 || typeof value[0] !== "number" || typeof value[1] !== "number"
        ) {
          throw typeError(info.name, "[real, imaginary]", value);
        }
        a[at * 2] = value[0];
        a[at * 2 + 1] = value[1];
        return;
      }
      case "minifloat":
        this.#writeBits(
          a as Uint8Array,
          at,
          encodeMiniFloat(info.name as MiniFloatDType, expectNumber(value, info.name)),
        );
        return;
    }
  }

  /** The element position in `array()` units for an index, after every check. */
  #position(index: readonly number[], what: string): number {
    this.#live();
    const shape = this.#shape;
    if (index.length !== shape.length) {
      throw new DLPackError(
        "shape",
        `${what}() needs ${shape.length} indices for a ${shape.length}-d view, got ${index.length}`,
      );
    }
    const strides = this.#strides;
    let at = -this.#minOffset;
    for (let d = 0; d < shape.length; d++) {
      const i = index[d];
      if (!Number.isInteger(i) || i < 0 || i >= shape[d]) {
        throw new DLPackError("shape", `index ${String(i)} is out of range for dimension ${d} of extent ${shape[d]}`);
      }
      at += i * strides[d];
    }
    return at;
  }

  #readBits(bytes: Uint8Array, at: number): number {
    const bits = this.#slotBits();
    if (bits === 8) return bytes[at];
    const [bit, mask] = this.#bitOf(at, bits);
    const word = bytes[bit >>> 3] | ((bytes[(bit >>> 3) + 1] ?? 0) << 8);
    return (word >>> (bit & 7)) & mask;
  }

  #writeBits(bytes: Uint8Array, at: number, code: number): void {
    const bits = this.#slotBits();
    if (bits === 8) {
      bytes[at] = code;
      return;
    }
    const [bit, mask] = this.#bitOf(at, bits);
    const byte = bit >>> 3;
    const shift = bit & 7;
    const word = (bytes[byte] | ((bytes[byte + 1] ?? 0) << 8)) & ~(mask << shift) | ((code & mask) << shift);
    bytes[byte] = word & 0xff;
    if (shift + bits > 8) bytes[byte + 1] = word >>> 8;
  }

  /** Bit position from the start of `array()` of the element at `at`, for packed sub-byte data. */
  #bitOf(at: number, bits: number): [number, number] {
    const loBits = this.#minOffset * bits;
    const startBit = Math.floor(loBits / 8) * 8;
    return [(at + this.#minOffset) * bits - startBit, (1 << bits) - 1];
  }

  /**
   * A contiguous C-order copy in a new JS TypedArray (complex interleaved, packed sub-byte types
   * one code per byte).
   */
  toArray(): AnyTypedArray {
    this.#live();
    const src = this.array();
    const info = this.#info;
    const packed = info.kind === "minifloat" && this.#slotBits() < 8;
    const Ctor = info.array;
    const slots = info.slots;
    const out = new Ctor(new ArrayBuffer(this.#size * slots * Ctor.BYTES_PER_ELEMENT));
    if (this.#size === 0) return out;
    const shape = this.#shape;
    const strides = this.#strides;
    const ndim = shape.length;
    const index = new Array<number>(ndim).fill(0);
    let at = -this.#minOffset;
    for (let k = 0; k < this.#size; k++) {
      if (packed) out[k] = this.#readBits(src as Uint8Array, at);
      else if (slots === 2) {
        out[2 * k] = src[2 * at];
        out[2 * k + 1] = src[2 * at + 1];
      } else out[k] = src[at];
      // Odometer step over the index, moving `at` by strides.
      for (let d = ndim - 1; d >= 0; d--) {
        if (++index[d] < shape[d]) {
          at += strides[d];
          break;
        }
        at -= (shape[d] - 1) * strides[d];
        index[d] = 0;
      }
    }
    return out;
  }

  /** A C-contiguous copy in library-owned native memory: host views through the native strided
   * copy, CUDA device views on the same device through the driver. */
  copy(): BufferView {
    this.#live();
    return copyOf(this);
  }

  /**
   * A new C-contiguous view in library-owned host (CPU) memory with this view's values. CUDA
   * device memory is copied through the driver (ordered after the view's producer stream, or on
   * `opts.stream`, and complete on return); host-accessible memory is copied directly. Throws
   * `DLPackError` ("cuda") when device memory needs a driver that is missing.
   */
  toHost(opts?: CopyOptions): BufferView {
    this.#live();
    return toHost(this, opts);
  }

  /**
   * Copies `src`'s values into this view: host memory (cpu, cudaHost, cudaManaged) and CUDA device
   * memory in any direction, device to device included. Dtype and shape must match and this view
   * must be writable, and C-contiguous or laid out exactly like `src`. Complete on return.
   */
  copyFrom(src: BufferView, opts?: CopyOptions): this {
    this.#live();
    copyInto(this, src, opts);
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
    return viewDLPack(this, opts);
  }

  /** `[device type code, device id]`, as the protocol's `__dlpack_device__()`. */
  __dlpack_device__(): [number, number] {
    return [deviceCode(this.#device.type), this.#device.id];
  }

  /**
   * A statically typed view of the same tensor: TypeScript then knows the TypedArray of
   * `array()`, the element type of `get`/`set` and the number of indices. Throws `DLPackError`
   * ("requirements") when the dtype or rank differ.
   */
  as<D extends DType, N extends number>(dtype: D, ndim: N): TypedView<D, N> {
    const refusals = this.refusals({ dtype, ndim });
    if (refusals.length > 0) {
      throw new DLPackError("requirements", `as(${dtype}, ${ndim}) refused: ${refusals.join("; ")}`, refusals);
    }
    return this as unknown as TypedView<D, N>;
  }

  /**
   * Records the caller's assertion that memory of "unknown" access (a legacy import) may be
   * written. The library never makes that assumption by itself; read-only views stay read-only.
   */
  assumeWritable(): this {
    this.#live();
    if (this.#access === "readonly") {
      throw new DLPackError(
        "readonly",
        "the producer marked this tensor READ_ONLY; assumeWritable() cannot override that",
      );
    }
    this.#access = "readwrite";
    return this;
  }

  /** Each requirement this view fails, as `"<field>: required <x>, got <y>"`. */
  refusals(req: Requirements): string[] {
    this.#live();
    return requirementRefusals(this, req);
  }

  /** Returns this view if it meets every requirement, else throws `DLPackError` listing them all. */
  require(req: Requirements): this {
    const refusals = this.refusals(req);
    if (refusals.length > 0) {
      throw new DLPackError("requirements", `requirements not met: ${refusals.join("; ")}`, refusals);
    }
    return this;
  }

  /**
   * Releases this view's share of the memory: the producer's deleter runs once no other share,
   * view or export needs it. Arrays from `array()` are detached first. Idempotent.
   */
  dispose(): void {
    const owner = this.#owner;
    if (owner === 0) return;
    this.#owner = 0;
    const buffer = this.#buffer;
    this.#buffer = undefined;
    this.#array = undefined;
    this.#keepAliveValue = undefined;
    views.remove(this, this.#epoch);
    if (buffer !== undefined) {
      if (isDetached(buffer)) {
        // Someone transferred it (ArrayBuffer.prototype.transfer, postMessage): the runtimes move
        // native memory into the new buffer without copying, and nothing can revoke that one.
        // Keeping this share for the rest of the process is the only way it never reads freed
        // memory; stats() shows it.
        transferredShares.push(owner);
        return;
      }
      // Detaching leaves every TypedArray over it with length 0: no access after free.
      (buffer as ArrayBuffer & { transfer(length: number): ArrayBuffer }).transfer(0);
    }
    core().dlpk_owner_release(owner);
  }

  /** Same as {@link BufferView.dispose}, for `using`. */
  [Symbol.dispose](): void {
    this.dispose();
  }

  #live(): void {
    if (this.#owner === 0) throw new DLPackError("disposed", "this view was disposed");
    if (this.#buffer !== undefined && isDetached(this.#buffer)) {
      throw new DLPackError(
        "disposed",
        "the ArrayBuffer array() returned was transferred or detached by other code; this view no longer " +
          "reads through it (the memory stays alive for the transferred buffer: see the README's threat model)",
      );
    }
  }

  /** @internal A one-line description for logs. */
  toString(): string {
    return `BufferView(${this.dtype}, [${this.#shape.join(", ")}], ${formatDevice(this.#device)}${
      this.disposed ? ", disposed" : ""
    })`;
  }
}

/** Owner shares of views whose array() buffer was transferred away; never released. */
const transferredShares: number[] = [];

function isDetached(buffer: ArrayBuffer): boolean {
  return (buffer as ArrayBuffer & { detached?: boolean }).detached === true;
}

function expectNumber(value: Scalar, dtype: DType): number {
  if (typeof value !== "number") throw typeError(dtype, "a number", value);
  return value;
}

const INT_RANGES: Readonly<Record<string, readonly [number, number]>> = {
  int8: [-128, 127],
  int16: [-32768, 32767],
  int32: [-(2 ** 31), 2 ** 31 - 1],
  uint8: [0, 255],
  uint16: [0, 65535],
  uint32: [0, 2 ** 32 - 1],
};

const BIGINT_RANGES: Readonly<Record<string, readonly [bigint, bigint]>> = {
  int64: [-(2n ** 63n), 2n ** 63n - 1n],
  uint64: [0n, 2n ** 64n - 1n],
};

/** An integer element must be an integer in the dtype's range: a TypedArray store would
 * silently truncate 1.5, wrap 300 to 44 and turn NaN into 0. */
function expectInteger(value: Scalar, dtype: DType): number {
  const n = expectNumber(value, dtype);
  const [lo, hi] = INT_RANGES[dtype];
  if (!Number.isInteger(n) || n < lo || n > hi) throw typeError(dtype, `an integer in ${lo}..${hi}`, value);
  return n;
}

function expectBigInt(value: Scalar, dtype: DType): bigint {
  if (typeof value !== "bigint") throw typeError(dtype, "a bigint", value);
  const [lo, hi] = BIGINT_RANGES[dtype];
  if (value < lo || value > hi) throw typeError(dtype, `a bigint in ${lo}..${hi}`, value);
  return value;
}

function typeError(dtype: DType, expected: string, got: unknown): DLPackError {
  const shown = typeof got === "bigint" ? `${got}n` : Array.isArray(got) ? `[${got.join(", ")}]` : String(got);
  return new DLPackError("dtype", `a ${dtype} element takes ${expected}, got ${typeof got} ${shown}`);
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
}
