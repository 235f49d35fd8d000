/**
 * TypedArrays as memory: the facts of one read through the intrinsics (its dtype, its bytes,
 * whether its buffer can move or has gone), the layouts that may be laid over its bytes (the
 * export options, checked against them), and views over its own memory made from a pin record
 * (`fromArray`, a copy's staged source): one native call pins it and journals the record.
 * @module
 */
import { core } from "../../ffi/mod.ts";
import { DLPackError, optionalBoolean, optionsObject, shown, withArticle } from "../facts/errors.ts";
import { type AnyTypedArray, type DType, type DTypeInfo, dtypeInfo, infoOfTag } from "../facts/dtypes.ts";
import { deviceOf } from "../facts/devices.ts";
import { checkShape, checkStrides, cStrides, layoutOf, listText, reach, sizeOf } from "../facts/layout.ts";
import {
  bufferState,
  ceil,
  copyNumbers,
  isArray,
  isCount,
  isDetached,
  isExtensible,
  objectSlots,
  RESIZABLE,
  SHARED,
  typedArrayBuffer,
  typedArrayByteLength,
} from "../facts/intrinsics.ts";
import { DLPACK_VERSION, Flag, MAX_RANK } from "../facts/abi.ts";
import { KEY_ADDRESS, KEY_OWNER, scratch } from "../native/scratch.ts";
import { newPinId, realmAddress, recordPin } from "../native/pins.ts";
import { LIBRARY_NAME, type Owned, type ViewFacts, viewOrigin } from "./state.ts";

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

/** An export's layout. */
export interface Layout {
  info: DTypeInfo;
  shape: readonly number[];
  strides: readonly number[];
  /** Byte offset of element 0 from the source's first byte. */
  byteOffset: number;
}

/** Export options as read from the caller's object: each field exactly once, the shape already
 * copied and checked, the strides copied (a getter or Proxy sees one read and cannot change what
 * was validated, and no caller code runs once the options are read). */
export interface Options {
  shape: number[] | undefined;
  /** Checked against the rank when the layout is resolved: an array of our own by then. */
  strides: unknown;
  info: DTypeInfo | undefined;
  /** Checked when the layout is resolved; null means the default. */
  offset: unknown;
  readonly: boolean;
}

export const NO_OPTIONS: Options = {
  shape: undefined,
  strides: undefined,
  info: undefined,
  offset: undefined,
  readonly: false,
};

/** Reads the caller's export options once (undefined when there are none). */
export function readOptions(options: ExportOptions | null | undefined): Options | undefined {
  if (options === undefined || options === null) return undefined;
  const o = optionsObject(options, "export options");
  const shape: unknown = o.shape;
  const strides: unknown = o.strides;
  const dtype: unknown = o.dtype;
  const offset: unknown = o.offset;
  const readonly = optionalBoolean(o.readonly, "readonly") === true;
  return {
    shape: shape === undefined ? undefined : checkShape(shape),
    strides: ownList(strides),
    info: dtype === undefined ? undefined : dtypeInfo(dtype as DType),
    offset,
    readonly,
  };
}

/** A caller's array copied element by element (each read once), as checkStrides later reads it;
 * anything else as it is (checkStrides refuses it). */
function ownList(value: unknown): unknown {
  if (!isArray(value)) return value;
  const n: unknown = value.length;
  if (!isCount(n) || n > MAX_RANK) {
    throw new DLPackError("strides", `strides must list at most ${MAX_RANK} integers, got ${shown(n)}`);
  }
  const out = objectSlots<unknown>(n);
  for (let i = 0; i < n; i++) out[i] = value[i];
  return out;
}

/** Whether the options change the layout (else the source's own layout is exported). */
export function reshapes(opts: Options | undefined): opts is Options {
  return opts !== undefined &&
    (opts.shape !== undefined || opts.strides !== undefined || opts.info !== undefined ||
      (opts.offset !== undefined && opts.offset !== null));
}

/** Resolves shape/strides/dtype/offset options against a source of `byteLength` bytes whose
 * natural layout is given, and checks every element stays inside those bytes. */
export function resolveLayout(
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
          `${first < 0 ? `${-first / 8} bytes before` : `byte ${ceil(end / 8)} of`} ${
            withArticle(`${byteLength}-byte`)
          } source`,
      );
    }
  }
  if ((offset * bits) % 8 !== 0) throw new DLPackError("byte_offset", `element 0 must start on a byte boundary`);
  return { info, shape, strides, byteOffset: (offset * bits) / 8 };
}

/** Returns the object it is given: a class extending it adds its private fields to that object. */
class Identity {
  constructor(target: object) {
    return target as Identity;
  }
}

/**
 * The dtype of a TypedArray already exported whole, as a private field of the array itself (the
 * constructor returns the array it is given, so `new WholeArray(x, info)` adds the field to `x`):
 * only arrays over a fixed-length, non-shared ArrayBuffer. Everything such an export checks (the
 * brand, the element type, the buffer and whether it can resize or is shared) is fixed for the life
 * of the array, except detachment, which the byte length shows (0) and which sends the export the
 * full way. A private field can be neither forged nor reached through a Proxy, keeps nothing alive
 * and is invisible to the caller's code, and adding one costs an array's first export next to
 * nothing, where an entry in a WeakMap costs about as much as making the array: exporting the same
 * array again reads one getter instead of five. perf(export of a TypedArray made for it, export).
 */
class WholeArray extends Identity {
  readonly #info: DTypeInfo;

  private constructor(target: AnyTypedArray, info: DTypeInfo) {
    super(target);
    this.#info = info;
  }

  /** Remembers `x`'s dtype (once: a second field would throw). An array that is not extensible
   * is not remembered (engines that apply extensibility to private fields would refuse it). */
  static remember(x: AnyTypedArray, info: DTypeInfo): void {
    if (!(#info in x) && isExtensible(x)) new WholeArray(x, info);
  }

  /** The dtype remembered for `x`, or undefined (also for anything that is not an object). */
  static known(x: unknown): DTypeInfo | undefined {
    return typeof x === "object" && x !== null && #info in x ? (x as WholeArray).#info : undefined;
  }
}

/** The dtype of a TypedArray exported whole before ({@link WholeArray}), or undefined. */
export const knownWholeArray: (x: unknown) => DTypeInfo | undefined = WholeArray.known;

/** The TypedArray facts every export needs, read through the intrinsics (`shared`: over a
 * SharedArrayBuffer). */
export function typedArraySource(
  x: AnyTypedArray,
  tag: string,
): { info: DTypeInfo; byteLength: number; shared: boolean } {
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
  if (info === undefined) throw new DLPackError("dtype", `${withArticle(tag)} has no dtype this library exports`);
  const byteLength = typedArrayByteLength(x);
  if (byteLength === 0 && (state & SHARED) === 0 && isDetached(buffer as ArrayBuffer)) {
    throw new DLPackError("disposed", "the TypedArray's ArrayBuffer is detached");
  }
  if (state === 0 && byteLength > 0) WholeArray.remember(x, info);
  return { info, byteLength, shared: (state & SHARED) !== 0 };
}

/** Pins `x` (`byteLength`: its extent, read through the intrinsics, which the native side trusts)
 * with one native call: returns the pin record and the data address, the record journaled until
 * its holder takes it. */
function pinArray(x: AnyTypedArray, byteLength: number): { owner: number; address: number } {
  const id = newPinId();
  const status = core().dlpk_pin_buffer(x, realmAddress(), id, byteLength);
  if (status !== 0) throw new DLPackError("library", `could not pin ${byteLength} bytes (status ${status})`);
  const f64 = scratch.f64;
  const pinned = { owner: f64[KEY_OWNER], address: f64[KEY_ADDRESS] };
  // The pin keeps the TypedArray (and its buffer) reachable until the record's last reference goes.
  recordPin(id, x);
  return pinned;
}

/**
 * A view over `x`'s own memory (`tag`: its checked type), laid out as `opts` say (the export
 * layout, checked against its bytes before anything is pinned): the pin record it holds is
 * journaled until the view does. What `fromArray` makes.
 */
export function arrayView(x: AnyTypedArray, tag: string, opts: Options): Owned {
  const { info, byteLength } = typedArraySource(x, tag);
  const natural = { info, shape: [byteLength / info.slotBytes], strides: undefined, zeroAt: 0 };
  const layout = resolveLayout(natural, byteLength, false, opts);
  const shape = layout.shape as number[];
  const strides = layout.strides as number[];
  const size = sizeOf(shape);
  const r = reach(shape, strides);
  const empty = r.hi < r.lo;
  const flags = opts.readonly ? Flag.readOnly : 0;
  const facts: ViewFacts = {
    info: layout.info,
    shape,
    strides,
    size,
    nbytes: ceil((size * layout.info.bits) / 8),
    minOffset: empty ? 0 : r.lo,
    maxOffset: empty ? -1 : r.hi,
    layout: layoutOf(shape, strides),
    device: CPU,
    // As an import of this library's own export of the array would say.
    origin: viewOrigin(LIBRARY_NAME, "external", DLPACK_VERSION.major, DLPACK_VERSION.minor, flags, true),
  };
  const pinned = pinArray(x, byteLength);
  const address = byteLength === 0 ? 0 : pinned.address + layout.byteOffset;
  return { owner: pinned.owner, address, facts, access: opts.readonly ? "readonly" : "readwrite" };
}

/** The state of a TypedArray's own memory (`tag` its checked type) in C order, shaped like
 * `facts` (whose dtype it holds), over a pin record journaled until the caller releases it. */
export function stagedArray(x: AnyTypedArray, tag: string, facts: ViewFacts): Owned {
  return arrayView(x, tag, { ...NO_OPTIONS, shape: copyNumbers(facts.shape), info: facts.info });
}

const CPU = deviceOf(1, 0);
