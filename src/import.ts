/**
 * Importing DLPack tensors: `importDLPack` (byte_offset folded into the address) and the strict
 * `fromDLPack`.
 * @module
 */
import { core } from "../ffi/mod.ts";
import { refusalError, scratch, U32 } from "./description.ts";
import { DLPackError, optionsObject, shown } from "./errors.ts";
import { type AddressLike, toAddress } from "./address.ts";
import { BufferView, isBufferView, viewFromScratch } from "./view.ts";
import type { Owner } from "./owner.ts";
import { Capsule, isCapsule } from "./capsule.ts";
import type { DLPackProtocolOptions } from "./export.ts";

/** Options of `importDLPack` / `fromDLPack`. */
export interface ImportOptions {
  /** Names the producer (recorded as `view.producer`). */
  readonly producer?: string;
}

/** A raw managed-tensor address of either generation. */
export type ManagedAddress = { readonly versioned: AddressLike } | { readonly legacy: AddressLike };

/** An object speaking the DLPack protocol on the JS side (a `BufferView` does). */
export interface DLPackProvider {
  /** Returns a capsule the caller then owns. */
  __dlpack__(opts?: DLPackProtocolOptions): Capsule;
  /** `[device type code, device id]`. */
  __dlpack_device__?(): readonly [number, number];
}

/** Anything `importDLPack` takes. */
export type DLPackSource = ManagedAddress | Capsule | DLPackProvider;

/** The protocol version this consumer asks producers for. */
const MAX_VERSION: readonly [number, number] = [1, 3];

const IMPORT_VERSIONED = 1;
const IMPORT_STRICT_OFFSET = 2;
const READ_ONLY = 1;

/** Imports one managed tensor; refusals release the producer (deleter called once) and throw. */
export function importManaged(
  address: number,
  versioned: boolean,
  strict: boolean,
  producer: string | null,
  keepAlive?: unknown,
): BufferView {
  const options = (versioned ? IMPORT_VERSIONED : 0) | (strict ? IMPORT_STRICT_OFFSET : 0);
  const status = core().dlpk_import(address, options, scratch.at);
  if (status !== 0) throw refusalError(status, scratch, address !== 0);
  const access = versioned ? ((scratch.u32[U32.flags] & READ_ONLY) !== 0 ? "readonly" : "readwrite") : "unknown";
  return viewFromScratch(scratch, access, producer, "external", keepAlive);
}

function producerOf(opts: ImportOptions | undefined): string | null {
  if (opts === undefined) return null;
  const producer = optionsObject(opts, "import options").producer ?? null;
  if (producer !== null && typeof producer !== "string") {
    throw new DLPackError("requirements", `producer must be a string, got ${shown(producer)}`);
  }
  return producer;
}

function importSource(src: DLPackSource, strict: boolean, opts: ImportOptions | undefined): BufferView {
  // Options are checked before anything is taken: on a mistake here the caller still owns src.
  const producer = producerOf(opts);
  // The common case first: an object literal { versioned: address } / { legacy: address }.
  if (src !== null && typeof src === "object" && Object.getPrototypeOf(src) === Object.prototype) {
    const plain = src as { versioned?: unknown; legacy?: unknown; __dlpack__?: unknown };
    if (typeof plain.__dlpack__ !== "function") {
      if ("versioned" in plain) return importManaged(toAddress(plain.versioned, "versioned"), true, strict, producer);
      if ("legacy" in plain) return importManaged(toAddress(plain.legacy, "legacy"), false, strict, producer);
    }
  }
  if (isCapsule(src)) {
    const versioned = src.versioned;
    return importManaged(src.takeAddress(), versioned, strict, producer);
  }
  if (src instanceof Capsule || (src instanceof BufferView && !isBufferView(src))) {
    // Object.create(Capsule.prototype) and the like: the prototype's getters would throw.
    throw new DLPackError("null_data", "this object only pretends to be a Capsule or BufferView");
  }
  if (src !== null && typeof src === "object") {
    if (typeof (src as DLPackProvider).__dlpack__ === "function") {
      const capsule = (src as DLPackProvider).__dlpack__({ maxVersion: MAX_VERSION });
      if (!isCapsule(capsule)) {
        throw new DLPackError("null_data", "__dlpack__() must return a Capsule");
      }
      const name = producer ?? (src as { constructor?: { name?: string } }).constructor?.name ?? null;
      return importManaged(capsule.takeAddress(), capsule.versioned, strict, name);
    }
    if ("versioned" in src) return importManaged(toAddress(src.versioned, "versioned"), true, strict, producer);
    if ("legacy" in src) return importManaged(toAddress(src.legacy, "legacy"), false, strict, producer);
  }
  throw new DLPackError(
    "null_data",
    "importDLPack takes { versioned: address }, { legacy: address }, a Capsule, or an object with __dlpack__()",
  );
}

/**
 * Imports a DLPack tensor as a zero-copy view. The producer's `byte_offset` is folded into
 * `view.address`. A refused tensor is handed back to its producer (deleter called exactly once)
 * before the `DLPackError` is thrown.
 */
export function importDLPack(src: DLPackSource, opts?: ImportOptions): BufferView {
  return importSource(src, false, opts);
}

/**
 * The strict import: like `importDLPack`, but a non-zero `byte_offset` is refused too. Returns
 * the view and its owner share; `owner.release()` (or `using`) disposes the view.
 */
export function fromDLPack(src: DLPackSource, opts?: ImportOptions): { view: BufferView; owner: Owner } {
  const view = importSource(src, true, opts);
  return { view, owner: view.keepAlive };
}
