/**
 * Importing DLPack tensors: `importDLPack` (byte_offset folded into the address) and the strict
 * `fromDLPack`.
 * @module
 */
import { isPythonObject } from "../facts/brands.ts";
import { core, runtime } from "../../ffi/mod.ts";
import { KEY_ADDRESS, KEY_GENERATION, KEY_OWNER, scratch, Status } from "../native/scratch.ts";
import { refusalError } from "../native/refusals.ts";
import { DLPackError, isDLPackError, optionsObject, shown } from "../facts/errors.ts";
import { type AddressLike, toAddress } from "../native/address.ts";
import {
  BufferView,
  buildKeyed,
  disposeView,
  isBufferView,
  newView,
  type RequiredView,
  shareOf,
  stateOf,
} from "../view/view.ts";
import type { Owner } from "../native/shares.ts";
import { deferredDisposalCount, deferredDisposals, releaseDeferred, retryQuietly } from "../native/journal.ts";
import { Capsule, capsuleVersioned, disposeCapsule, isCapsule, takeForImport } from "../native/capsule.ts";
import { type DLPackProtocolOptions, protocolExport, readProtocolOptions } from "../engines/exports.ts";
import { callWith } from "../facts/intrinsics.ts";
import { ImportOption } from "../facts/abi.ts";
import {
  type Checked,
  joinedRefusals,
  readRequirements,
  refusalsOf,
  type Requirements,
} from "../engines/requirements.ts";
import { beyondExact, keyed } from "../engines/facts.ts";

/** Options of `importDLPack` / `fromDLPack`. */
export interface ImportOptions {
  /** Names the producer (recorded as `view.producer`). */
  readonly producer?: string | undefined;
  /** What the view must meet (as `view.require`); a view that does not is released and
   * `DLPackError` ("requirements") thrown. A literal `dtype` and `ndim` (or `shape`) type the
   * result: `importDLPack(x, { require: { dtype: "float32", ndim: 2 } })` is a `TypedView<"float32", 2>`. */
  readonly require?: Requirements | undefined;
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

const IMPORT_VERSIONED = ImportOption.versioned;
const IMPORT_STRICT_OFFSET = ImportOption.strictOffset;
const VERSIONED_STRICT = IMPORT_VERSIONED | IMPORT_STRICT_OFFSET;
/** Whether the runtime's FFI hands out pointer objects (Deno), which go to native code as they are. */
const POINTER_OBJECTS = runtime().pointerObjects;
/** 2^53: the addresses below it are the ones a number holds exactly. */
const EXACT = 2 ** 53;
/** 2^53 as a bigint: the addresses below it are the ones a number holds exactly too. */
const BIGINT_EXACT = 9007199254740992n;

// Who owns a tensor when an import throws. An exception that is not a DLPackError (the engine's
// RangeError from an exhausted stack, above all) is only ever thrown before the import took the
// tensor: it is still the caller's. Once the library has taken it (native code took the struct, or
// a capsule was taken), the import returns the view or throws a DLPackError, and the tensor is
// released (a refusal's deleter ran; what could not be handed over is journaled and released at
// the next call). So every catch block after the take turns whatever was thrown into a DLPackError,
// falling back to one made at load when even that call cannot start.

const STACK_MESSAGE = "the JS stack ran out after the import had taken the tensor, before it could return its view " +
  "or report its refusal: the library released the tensor (its deleter runs once), so there is nothing to release; " +
  "import it with more stack left";
/** What an import that took its tensor throws when the stack is too short even to make an error.
 * Made at load, and so shared by every such throw. */
const EXHAUSTED = new DLPackError("stack", STACK_MESSAGE);

/** The error an import throws for `error`, thrown after it took its tensor (whose release is
 * journaled): a DLPackError as it is, anything else as a "stack" error. Releases what is owed
 * when the stack allows. */
function afterTaking(error: unknown): unknown {
  retryQuietly();
  return isDLPackError(error) ? error : new DLPackError("stack", STACK_MESSAGE);
}

/** 1 at the index of each native import status after which the library has taken the tensor
 * (`ok`) or released it (a refusal whose deleter ran); 0 for the refusals that took and released
 * nothing: no struct, an unreadable one, a deleter that is not code, an export another import holds
 * or that was released. */
const TOOK = ((): Uint8Array => {
  const took = new Uint8Array(64).fill(1);
  const none = [
    Status.nullManaged,
    Status.badAddress,
    Status.unmappedStruct,
    Status.badDeleter,
    Status.alreadyImported,
    Status.releasedExport,
  ];
  for (let i = 0; i < none.length; i++) took[none[i]!] = 0;
  return took;
})();

/**
 * Imports one managed tensor held by a capsule (taken here). Refusals release the producer
 * (deleter called once) and throw. From the take on, what the import holds is journaled (the
 * struct by the take, then the owner record by the native import, which ends the struct's entry):
 * an exception before the view holds it leaves it to be released, and turns into a DLPackError.
 */
function importTensor(capsule: Capsule, strict: boolean, producer: string | null): BufferView {
  let taken = false;
  try {
    const versioned = capsuleVersioned(capsule);
    const address = takeForImport(capsule);
    taken = true;
    const options = optionsOf(versioned, strict);
    const status = core().dlpk_import_number(address, options);
    if (status !== 0) throw refusalError(status, scratch, address !== 0);
    return buildKeyed(scratch, scratch.f64[KEY_OWNER], options, producer);
  } catch (error) {
    // Nothing taken yet (the capsule is untouched): the caller keeps it.
    if (!taken) throw error;
    let thrown: unknown = EXHAUSTED;
    try {
      thrown = afterTaking(error);
    } catch {
      // Still no stack: EXHAUSTED, and the release waits for the next call.
    }
    throw thrown;
  }
}

/** Imports the struct at `address` that the caller journaled (an export of this library it just
 * made, for `keepAlive`): the native import ends that entry and holds the struct, or releases it. */
export function importJournaled(address: number, producer: string | null, keepAlive: unknown): BufferView {
  const status = core().dlpk_import_number(address, IMPORT_VERSIONED);
  if (status !== 0) throw refusalError(status, scratch, true);
  // Rare (an export imported again): the facts cache and newView, not the hot path's factory.
  const owner = scratch.f64[KEY_OWNER];
  const at = scratch.f64[KEY_ADDRESS];
  if (at < 0) throw beyondExact(scratch, owner);
  if (scratch.f64[KEY_GENERATION] !== keyed.generation || producer !== keyed.producer) {
    keyed.refresh(scratch, producer, IMPORT_VERSIONED);
  }
  return newView({ owner, address: at, facts: keyed.facts, access: keyed.access }, keepAlive);
}

/** The native import options. */
function optionsOf(versioned: boolean, strict: boolean): number {
  return (versioned ? IMPORT_VERSIONED : 0) | (strict ? IMPORT_STRICT_OFFSET : 0);
}

// The three raw-address imports below (number, pointer object, bigint word) each keep the FFI call
// of their address type, so each call site sees one type; each builds the view inside a `try`
// whose catch only turns what was thrown after the import took its tensor into a DLPackError (the
// owner record is journaled natively until the view holds it). perf(import+dispose): they are kept
// small, so that the whole import inlines into the caller's loop (see docs/internals/hacking.md).

/**
 * Imports one managed tensor at a raw address the caller hands over (the hot path: no
 * capsule to take, so nothing is owed until libdlpack has taken the tensor).
 */
function importManaged(address: number, options: number, producer: string | null): BufferView {
  // The plain versioned import (a constant here once inlined) takes one argument: the library
  // knows its own scratch.
  const status = options === IMPORT_VERSIONED
    ? core().dlpk_import_versioned(address)
    : address >= 0 && address < EXACT && address % 1 === 0
    ? core().dlpk_import_number(address, options)
    : Status.badAddress; // no 64-bit word stands for it: refused as native code refuses it
  try {
    if (status !== 0) return managedRefused(status, address, options);
    return buildKeyed(scratch, scratch.f64[KEY_OWNER], options, producer);
  } catch (error) {
    // What the import took is journaled natively, to be released at the next replay.
    if (TOOK[status] === 0) throw error;
    let thrown: unknown = EXHAUSTED;
    try {
      thrown = afterTaking(error);
    } catch {
      // Still no stack: the release waits for the next call.
    }
    throw thrown;
  }
}

/** The refusal of `importManaged`: a number that is no address at all (which native code refused
 * before reading anything) gets `toAddress`'s message, anything else the import's. */
function managedRefused(status: number, address: number, options: number): never {
  toAddress(address, addressKey(options)); // throws for what is no address
  throw refusalError(status, scratch, address !== 0);
}

/** The key of the source literal an import's options came from, as messages name it. */
function addressKey(options: number): string {
  return (options & IMPORT_VERSIONED) !== 0 ? "versioned" : "legacy";
}

/** `importManaged` for a pointer object of the runtime's FFI (Deno's `PointerObject`), passed to
 * native code as it is. Anything the runtime does not take as a pointer goes the general way. */
function importPointer(pointer: object, options: number, producer: string | null): BufferView {
  const status = pointerImport(pointer, options);
  if (status === NOT_A_POINTER) return importConverted(pointer, options, producer);
  try {
    // A pointer object is never NULL (Deno hands out null for that), so a refusal released the tensor.
    if (status !== 0) return refused(status);
    return buildKeyed(scratch, scratch.f64[KEY_OWNER], options, producer);
  } catch (error) {
    // What the import took is journaled natively, to be released at the next replay.
    if (TOOK[status] === 0) throw error;
    let thrown: unknown = EXHAUSTED;
    try {
      thrown = afterTaking(error);
    } catch {
      // Still no stack: the release waits for the next call.
    }
    throw thrown;
  }
}

/** What {@link pointerImport} returns when the runtime refused the object before any native code
 * ran (no import status is negative). */
const NOT_A_POINTER = -1;

/** `dlpk_import` of a pointer object (its second binding), or {@link NOT_A_POINTER} when the
 * runtime did not take `pointer` as a pointer (it throws before calling: nothing was taken). */
function pointerImport(pointer: object, options: number): number {
  try {
    return core().dlpk_import_pointer(pointer, options);
  } catch {
    return NOT_A_POINTER;
  }
}

/** The refusal of a raw-address import libdlpack made (and released the tensor for). */
function refused(status: number): never {
  throw refusalError(status, scratch, true);
}

/** Imports `{ versioned: address }` / `{ legacy: address }` (the address read once, as given). */
function importAddress(address: unknown, options: number, producer: string | null): BufferView {
  // Any number goes straight to native code, which refuses what cannot be a struct (importManaged
  // gives what is no address at all the clearer message).
  if (typeof address === "number") return importManaged(address, options, producer);
  if (POINTER_OBJECTS && typeof address === "object" && address !== null) {
    return importPointer(address, options, producer);
  }
  return importConverted(address, options, producer);
}

/** `importAddress` for the other forms, kept out of line so the hot path stays small enough for
 * the JIT to inline into its caller. */
function importConverted(address: unknown, options: number, producer: string | null): BufferView {
  // A bigint below 2^53 goes to native code as it is; anything else gets toAddress's checks and
  // messages (a runtime would wrap a bigint beyond 64 bits around, so the range is checked here).
  if (typeof address === "bigint" && address >= 0n && address < BIGINT_EXACT) {
    return importWord(address, options, producer);
  }
  return importManaged(toAddress(address, addressKey(options)), options, producer);
}

/** `importManaged` for a bigint in [0, 2^53), passed to native code as a 64-bit word: converting it
 * to a number costs more than the import's FFI call in Deno. */
function importWord(address: bigint, options: number, producer: string | null): BufferView {
  const status = core().dlpk_import(address, options);
  try {
    if (status !== 0) throw refusalError(status, scratch, address !== 0n);
    return buildKeyed(scratch, scratch.f64[KEY_OWNER], options, producer);
  } catch (error) {
    // What the import took is journaled natively, to be released at the next replay.
    if (TOOK[status] === 0) throw error;
    let thrown: unknown = EXHAUSTED;
    try {
      thrown = afterTaking(error);
    } catch {
      // Still no stack: the release waits for the next call.
    }
    throw thrown;
  }
}

/** Takes and imports a capsule; if that fails after taking it, its struct is released. */
function importCapsule(capsule: Capsule, producer: string | null, strict = false): BufferView {
  return importTensor(capsule, strict, producer);
}

function producerOf(opts: ImportOptions | undefined): string | null {
  if (opts === undefined) return null;
  const producer: unknown = optionsObject(opts, "import options").producer ?? null;
  if (producer !== null && typeof producer !== "string") {
    throw new DLPackError("argument", `producer must be a string, got ${shown(producer)}`);
  }
  return producer;
}

const SOURCES =
  "importDLPack takes { versioned: address }, { legacy: address }, a Capsule, or an object with __dlpack__()";

/** The class name of a provider, for `view.producer` (only a string counts). */
function nameOf(src: object): string | null {
  const ctor: unknown = (src as { constructor?: unknown }).constructor;
  if ((typeof ctor !== "function" && typeof ctor !== "object") || ctor === null) return null;
  const name: unknown = (ctor as { name?: unknown }).name;
  return typeof name === "string" ? name : null;
}

/** Calls a provider's `__dlpack__` (read once by the caller) and imports the capsule it returns. */
function importProvided(
  src: object,
  dlpack: (opts: DLPackProtocolOptions) => unknown,
  strict: boolean,
  producer: string | null,
): BufferView {
  // Everything that reads the caller's object happens before a capsule exists.
  const name = producer ?? nameOf(src);
  const capsule = isBufferView(src) ? dlpackOfView(src) : callWith(dlpack, src, { maxVersion: MAX_VERSION });
  let ours = false;
  try {
    if (!isCapsule(capsule)) throw new DLPackError("argument", "__dlpack__() must return a Capsule");
    ours = true;
    return importCapsule(capsule, name, strict);
  } catch (error) {
    // A capsule the provider handed over is ours: if the import could not even start it is parked
    // for disposal (the disposer leaves a taken capsule alone), before any call since the stack
    // may be exhausted here; and what is thrown is a DLPackError, as for any import that took
    // what it was given.
    if (!ours) throw error;
    deferredDisposals[deferredDisposalCount[0]++] = () => disposeCapsule(capsule as Capsule);
    let thrown: unknown = EXHAUSTED;
    try {
      thrown = afterTaking(error);
    } catch {
      // Still no stack: disposed at the next call.
    }
    throw thrown;
  }
}

function importSource(src: DLPackSource, strict: boolean, producer: string | null): BufferView {
  // `instanceof` first, which the JIT inlines (unlike Object.getPrototypeOf in Deno, and the
  // brand checks, which look for a private name): an object literal is neither, and goes the
  // common way. Both classes pin their Symbol.hasInstance, so no caller can make this lie.
  // Everything else is out of line, so that this stays small enough for the JIT to inline.
  if (src !== null && typeof src === "object" && !(src instanceof Capsule) && !(src instanceof BufferView)) {
    // Each key read once: `{ versioned: address }`, `{ legacy: address }`, or a provider.
    const source = src as { versioned?: unknown; __dlpack__?: unknown };
    const dlpack = source.__dlpack__;
    if (typeof dlpack !== "function" && "versioned" in source) {
      // importAddress, inlined by hand: JavaScriptCore inlines only 5 calls deep, and this is one
      // call less down to the view's backstop entry.
      const address = source.versioned;
      const options = strict ? VERSIONED_STRICT : IMPORT_VERSIONED;
      // Any number: native code refuses what is no address, and importManaged gives the message.
      if (typeof address === "number") return importManaged(address, options, producer);
      if (POINTER_OBJECTS && typeof address === "object" && address !== null) {
        return importPointer(address, options, producer);
      }
      return importConverted(address, options, producer);
    }
    return importObjectSource(src, dlpack, strict, producer);
  }
  return importOther(src, strict, producer);
}

/** The capsule of a view of this library, as its `__dlpack__` makes it for this consumer (through
 * nothing a caller can replace). */
function dlpackOfView(view: BufferView): Capsule {
  return protocolExport(stateOf(view), PROTOCOL);
}

const PROTOCOL = readProtocolOptions({ maxVersion: MAX_VERSION });

/** A provider (its `__dlpack__` read once, by the caller), `{ legacy: address }`, or neither. */
function importObjectSource(src: object, dlpack: unknown, strict: boolean, producer: string | null): BufferView {
  if (typeof dlpack === "function") {
    return importProvided(src, dlpack as never, strict, producer);
  }
  const source = src as { legacy?: unknown };
  if ("legacy" in source) return importAddress(source.legacy, strict ? IMPORT_STRICT_OFFSET : 0, producer);
  return importOther(src, strict, producer);
}

/** What is not an address literal or a provider: the library's own objects (their prototypes
 * possibly replaced), impostors, and what is no source at all. */
function importOther(src: unknown, strict: boolean, producer: string | null): BufferView {
  if (src === null || typeof src !== "object") throw new DLPackError("argument", `${SOURCES}, got ${shown(src)}`);
  if (isCapsule(src)) return importCapsule(src, producer, strict);
  if (isBufferView(src)) return importProvided(src, dlpackOfView as never, strict, producer);
  if (src instanceof Capsule || src instanceof BufferView) {
    // Object.create(Capsule.prototype) and the like: the prototype's getters would throw.
    throw new DLPackError("argument", "this object only pretends to be a Capsule or BufferView");
  }
  if (isPythonObject(src)) {
    throw new DLPackError(
      "argument",
      "importDLPack takes DLPack sources; this is a Python object (a PyObject of the bridge): fromPython(obj) " +
        "from python.ts imports its tensor zero-copy (it calls __dlpack__ for you)",
    );
  }
  throw new DLPackError("argument", `${SOURCES}, got ${shown(src)}`);
}

/** The `require` option, read and checked before anything is taken (undefined when absent). */
export function requirementsOf(
  opts: { readonly require?: Requirements | undefined } | null | undefined,
  fn: string,
): Checked | undefined {
  if (opts === undefined || opts === null) return undefined;
  const req: unknown = optionsObject(opts, `${fn}() options`).require;
  return req === undefined ? undefined : readRequirements(req as Requirements);
}

/** Imports, then checks `require`: a view that fails it is disposed (its producer released). */
function importChecked(src: DLPackSource, strict: boolean, opts: ImportOptions | undefined): BufferView {
  releaseDeferred();
  const required = requirementsOf(opts, strict ? "fromDLPack" : "importDLPack");
  const view = importSource(src, strict, producerOf(opts));
  if (required === undefined) return view;
  try {
    return checkImported(view, required, "the imported tensor");
  } catch (error) {
    // Parked before any call (disposal is idempotent: a failed requirement disposed it already).
    deferredDisposals[deferredDisposalCount[0]++] = () => disposeView(view);
    let thrown: unknown = EXHAUSTED;
    try {
      thrown = afterTaking(error);
    } catch {
      // Still no stack: disposed at the next call.
    }
    throw thrown;
  }
}

/**
 * Imports a DLPack tensor as a zero-copy view. The producer's `byte_offset` is folded into
 * `view.address`. A refused tensor is handed back to its producer (deleter called exactly once)
 * before the `DLPackError` is thrown. With `require`, the view is checked too (and typed).
 */
export function importDLPack<const R extends Requirements>(
  src: DLPackSource,
  opts: ImportOptions & { readonly require: R },
): RequiredView<R>;
/** Imports a DLPack tensor as a zero-copy view (see the overload above). */
export function importDLPack(src: DLPackSource, opts?: ImportOptions): BufferView;
export function importDLPack(src: DLPackSource, opts?: ImportOptions): BufferView {
  // Without options there is nothing to check: one call less on the hot path.
  if (opts !== undefined) return importChecked(src, false, opts);
  releaseDeferred();
  return importSource(src, false, null);
}

/**
 * The strict import: like `importDLPack`, but a non-zero `byte_offset` is refused too. Returns
 * the view and its owner share; `owner.release()` (or `using`) disposes the view.
 */
export function fromDLPack<const R extends Requirements>(
  src: DLPackSource,
  opts: ImportOptions & { readonly require: R },
): { view: RequiredView<R>; owner: Owner };
/** The strict import, returning the view and its owner share (see the overload above). */
export function fromDLPack(src: DLPackSource, opts?: ImportOptions): { view: BufferView; owner: Owner };
export function fromDLPack(src: DLPackSource, opts?: ImportOptions): { view: BufferView; owner: Owner } {
  const view = importChecked(src, true, opts);
  try {
    return { view, owner: shareOf(view) };
  } catch (error) {
    deferredDisposals[deferredDisposalCount[0]++] = () => disposeView(view); // parked before any call: no stack needed
    let thrown: unknown = EXHAUSTED;
    try {
      thrown = afterTaking(error);
    } catch {
      // Still no stack: disposed at the next call.
    }
    throw thrown;
  }
}

/** An import's `require` check: returns `view` when it meets `r`; otherwise disposes it (its
 * producer is released) and throws `DLPackError` ("requirements") listing every refusal. */
export function checkImported(view: BufferView, r: Checked, what: string): BufferView {
  let refusals: string[];
  try {
    refusals = refusalsOf(stateOf(view), r);
  } catch (error) {
    deferredDisposals[deferredDisposalCount[0]++] = () => disposeView(view); // parked before any call: no stack needed
    retryQuietly();
    throw error;
  }
  if (refusals.length === 0) return view;
  disposeView(view);
  const text = joinedRefusals(refusals);
  throw new DLPackError("requirements", `${what} does not meet the requirements: ${text}`, refusals);
}
