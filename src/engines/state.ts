/**
 * The plain state the engines work on: a view's facts (its layout, dtype, device and origin,
 * immutable and shared), and the state of one view as an engine sees it. Nothing here is a view:
 * the class in src/view/ turns what an engine makes into one.
 * @module
 */
import type { DTypeInfo } from "../facts/dtypes.ts";
import type { Device } from "../facts/devices.ts";
import { freeze } from "../facts/intrinsics.ts";
import { Flag } from "../facts/abi.ts";

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

/**
 * Rarely read facts of where a view came from, shared by every view that has the same (most
 * imports of one producer do): nothing per view is allocated for them.
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
 * A view's immutable facts: built once, never changed, and shared by views of the same layout.
 * `shape` and `strides` are the view's own arrays, frozen when first handed out.
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
  /** Layout bits (`Layout.c`, `Layout.f`). */
  readonly layout: number;
  readonly device: Device;
  readonly origin: ViewOrigin;
}

/**
 * One live view as an engine sees it: a fresh record of the view's own fields (never the public
 * getters, which a caller can redefine), made for one engine call.
 */
export interface ViewState {
  /** The native owner record the view holds one share of. */
  readonly owner: number;
  /** Element 0's address. */
  readonly address: number;
  readonly facts: ViewFacts;
  readonly access: Access;
  /** The view itself, as a key of the engines' weak tables (producer streams). */
  readonly key: object;
}

/** Memory an engine made (an allocation, a copy): one share of a native owner record, which the
 * caller turns into a view (or releases), with the facts and access of that view. */
export interface Owned {
  readonly owner: number;
  readonly address: number;
  readonly facts: ViewFacts;
  readonly access: Access;
}

/** The library's name, recorded as `owner` (and producer) on memory it allocated. */
export const LIBRARY_NAME = "dlpack-ts";

/** Where a layout's elements lie: fresh arrays the caller no longer changes (strides in
 * elements), the element count and bytes, the lowest and highest element offsets from element 0,
 * and the layout bits. */
interface Extents {
  readonly shape: number[];
  readonly strides: number[];
  readonly size: number;
  readonly nbytes: number;
  readonly minOffset: number;
  readonly maxOffset: number;
  readonly layout: number;
}

/** The layout of a view derived from another (`slice`, `reshape`, ...), over the same memory. */
export interface DerivedLayout extends Extents {
  /** Bytes from the base's element 0 to the new element 0. */
  readonly byteOffset: number;
  /** The result may not be written even if the base may (a broadcast repeats elements). */
  readonly readonly: boolean;
}

/** What {@link viewFacts} takes: a layout (arrays the caller made and no longer changes) and where
 * the memory came from. */
interface FactsInit extends Extents {
  readonly info: DTypeInfo;
  readonly device: Device;
  readonly origin: ViewOrigin;
}

/** The facts record of a layout (a fresh object: the caller's is never kept). */
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

/** The facts of a view derived from one with `base` facts. */
export function derivedFacts(base: ViewFacts, d: Extents): ViewFacts {
  return viewFacts({
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
}

let lastOrigin: ViewOrigin = freeze({ producer: null, ownerName: "", version: null, flags: 0, verified: true });

/** The origin record for these values: the last one made when it matches, else a new one. */
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

/** A versioned struct's raw flag bits, decoded. */
export function flagsOf(bits: number): Flags {
  return {
    readOnly: (bits & Flag.readOnly) !== 0,
    isCopied: (bits & Flag.isCopied) !== 0,
    subbytePadded: (bits & Flag.isSubbyteTypePadded) !== 0,
  };
}
