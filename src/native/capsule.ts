/**
 * `Capsule`: an exported managed tensor waiting for a consumer, like Python's PyCapsule. It is
 * taken once (ownership passes to the consumer) or disposed (its deleter runs); a capsule that is
 * neither is released by the garbage-collection backstop.
 * @module
 */
import { DLPackError } from "../facts/errors.ts";
import { core } from "../../ffi/mod.ts";
import { EXPORT_RECORD_BYTES, LazyBackstop } from "./backstop.ts";
import { journalCount, journalEntries, releaseStruct } from "./journal.ts";
import { structEntry } from "../facts/abi.ts";
import { dropFreedPin } from "./pins.ts";
import { Float64ArrayCtor, freeze, objectSlots, pinInstanceof, toBigInt } from "../facts/intrinsics.ts";

// Held value: the struct's journal entry, so nothing is allocated per capsule.
const backstop = new LazyBackstop<number>(
  (entry) => dropFreedPin(releaseStruct(entry)),
  (holder) => owned(holder),
  EXPORT_RECORD_BYTES,
);

// The bigint of a struct address, remembered by address: export records are reused (a thread's
// quarantine ring), so a consumer's `take()` mostly meets an address it converted before, and a
// bigint is an immutable primitive (an equal one is the same value). perf(export, released by a
// foreign consumer): converting costs more than the lookup.
const BIG_SLOTS = 4096;
const bigKeys = new Float64ArrayCtor(BIG_SLOTS);
const bigValues = objectSlots<bigint>(BIG_SLOTS);
// No address matches until converted (not even 0).
for (let i = 0; i < BIG_SLOTS; i++) bigKeys[i] = -1;

function bigAddress(address: number): bigint {
  // Direct-mapped by the address's 16-byte units: records come from malloc in contiguous runs, so
  // a thread's recycled records (its quarantine ring's 129) land in distinct slots; a multiplicative
  // hash into 1024 slots collided for about 17 % of takes, each then converting again.
  const i = (address >>> 4) & (BIG_SLOTS - 1);
  if (bigKeys[i] === address) return bigValues[i]!;
  const big = toBigInt(address);
  bigValues[i] = big;
  bigKeys[i] = address;
  return big;
}

const OWNED = 0;
const TAKEN = 1;
const DISPOSED = 2;

let branded: (x: object) => boolean;
let owned: (x: object) => boolean;
let take: (capsule: Capsule) => number;
let takeJournaled: (capsule: Capsule) => number;
let addressOf: (capsule: Capsule) => number;
let versionedOf: (capsule: Capsule) => boolean;
/** Disposes a capsule (idempotent; a taken one is left alone), through nothing a caller can replace. */
export let disposeCapsule: (capsule: Capsule) => void;

/** Whether `x` really is a capsule this library made (not merely `instanceof`: a prototype
 * impostor would pass that and then fail on the first private field). */
export function isCapsule(x: unknown): x is Capsule {
  return typeof x === "object" && x !== null && branded(x);
}

/** Takes a capsule for an import of this library (through nothing a caller can replace): its
 * struct is journaled as it is taken, for the native import to end the entry as it takes the
 * struct over. Returns the struct's address. */
export function takeForImport(capsule: Capsule): number {
  return takeJournaled(capsule);
}

/** Takes a capsule (what `takeAddress()` does, through nothing a caller can replace): the caller
 * holds the struct from here on. */
export function takeCapsule(capsule: Capsule): number {
  return take(capsule);
}

/** What this module passes its own constructor calls; nothing outside it holds it. */
const MAKER: object = freeze({});

/** The capsule of the struct an export just made (`address`; the export journaled it): the capsule
 * holds it from here on. */
export function capsuleOf(address: number, versioned: boolean): Capsule {
  const capsule = new Capsule(address, versioned, MAKER);
  journalCount[0]--;
  return capsule;
}

/** @internal The struct's address, through nothing a caller can replace. */
export function capsuleAddress(capsule: Capsule): number {
  return addressOf(capsule);
}

/** @internal Whether the struct is versioned, through nothing a caller can replace. */
export function capsuleVersioned(capsule: Capsule): boolean {
  return versionedOf(capsule);
}

/** @internal Whether it is neither taken nor disposed. */
export function capsuleOwned(capsule: Capsule): boolean {
  return owned(capsule);
}

/** An exported DLPack tensor (versioned or legacy) until a consumer takes it. */
export class Capsule {
  #address: number;
  #versioned: boolean;
  #state = OWNED;
  /** Set last in the constructor (undefined at run time on a capsule whose construction threw). */
  #slot: number;

  static {
    pinInstanceof(this);
    branded = (x) => #state in x;
    // A capsule whose construction threw has no slot: if the backstop's add threw after storing it
    // (an exhausted stack), the exporter releases the struct itself, so the backstop must not
    // register it and release the same address again when it is collected.
    owned = (x) => #state in x && (x as Capsule).#state === OWNED && (x as Capsule).#slot !== undefined;
    take = (c) => c.#take();
    takeJournaled = (c) => c.#takeJournaled();
    addressOf = (c) => c.#address;
    versionedOf = (c) => c.#versioned;
    disposeCapsule = (c) => c.#dispose();
  }

  /** @ignore (library-internal) Made by the export functions. The backstop is the last step: once it holds the
   * capsule nothing here throws. */
  constructor(address: number, versioned: boolean, maker: object) {
    // A capsule made by a caller could dispose a struct a consumer holds, unpinning its memory.
    if (maker !== MAKER) {
      throw new DLPackError("argument", "Capsule has no public constructor: capsules come from the export functions");
    }
    this.#address = address;
    this.#versioned = versioned;
    this.#slot = backstop.add(this, structEntry(address, versioned));
  }

  /** The managed struct's address (`DLManagedTensorVersioned*` or `DLManagedTensor*`). */
  get address(): bigint {
    return bigAddress(this.#address);
  }

  /** Whether the struct is a `DLManagedTensorVersioned` (else the legacy `DLManagedTensor`). */
  get versioned(): boolean {
    return this.#versioned;
  }

  /** @ignore (library-internal) Neither taken nor disposed. */
  get owned(): boolean {
    return this.#state === OWNED;
  }

  /** Whether a consumer took it. */
  get taken(): boolean {
    return this.#state === TAKEN;
  }

  /** Whether it was disposed before anyone took it. */
  get disposed(): boolean {
    return this.#state === DISPOSED;
  }

  /** Hands the struct to a foreign consumer, which must call its deleter exactly once. A capsule
   * can be taken once. */
  take(): bigint {
    // Converted before taking: once taken, nothing may throw before the caller has the address.
    const address = bigAddress(this.#address);
    this.#take();
    return address;
  }

  /** @ignore (library-internal) `take()` as a number. */
  takeAddress(): number {
    return this.#take();
  }

  #take(): number {
    if (this.#state !== OWNED) {
      throw new DLPackError(
        "consumed",
        this.#state === TAKEN ? "this capsule was already taken by a consumer" : "this capsule was disposed",
      );
    }
    backstop.remove(this, this.#slot);
    this.#state = TAKEN;
    return this.#address;
  }

  /** {@link Capsule.#take} for an import: the struct journaled, with no call in between, before
   * the state changes (an import that cannot even start leaves it to be released). */
  #takeJournaled(): number {
    const entry = structEntry(this.#address, this.#versioned);
    if (this.#state !== OWNED) return this.#take();
    backstop.remove(this, this.#slot);
    const n = journalCount[0];
    journalEntries[n] = entry;
    journalCount[0] = n + 1;
    this.#state = TAKEN;
    return this.#address;
  }

  /** Releases the struct if nobody took it (runs its deleter). Idempotent. */
  dispose(): void {
    this.#dispose();
  }

  #dispose(): void {
    if (this.#state !== OWNED) return;
    backstop.remove(this, this.#slot);
    // Journaled before the state changes, with no call in between: if the release below cannot even
    // start (an exhausted stack), the struct is released at the next call into the library.
    const entry = structEntry(this.#address, this.#versioned);
    const n = journalCount[0];
    journalEntries[n] = entry;
    journalCount[0] = n + 1;
    this.#state = DISPOSED;
    // The pin the native side freed (its id returned, never queued) is dropped with no further call.
    dropFreedPin(core().dlpk_export_dispose(entry));
  }

  /** Same as {@link Capsule.dispose}, for `using`. */
  [Symbol.dispose](): void {
    this.#dispose();
  }
}
