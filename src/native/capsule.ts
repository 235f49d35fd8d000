/**
 * `Capsule`: an exported managed tensor waiting for a consumer, like Python's PyCapsule. It is
 * taken once (ownership passes to the consumer) or disposed (its deleter runs); a capsule that is
 * neither is released by the garbage-collection backstop.
 * @module
 */
import { DLPackError } from "../facts/errors.ts";
import { core } from "../../ffi/mod.ts";
import { LazyBackstop } from "./backstop.ts";
import { deferredCount, deferredNumbers, registerDisposer } from "./journal.ts";
import { dropFreedPin } from "./pins.ts";
import { Float64ArrayCtor, floor, objectSlots, pinInstanceof, toBigInt } from "../facts/intrinsics.ts";

// Held value: address * 2 + versioned, so nothing is allocated per capsule.
const backstop = new LazyBackstop<number>(
  (held) => disposeExport(floor(held / 2), held % 2 === 1),
  (holder) => owned(holder),
);

/** Disposes an export of this library its JS side still holds (a capsule nobody took), journaled
 * like a view's release: the struct is released as its deleter would, and a pin it held last is
 * dropped right here instead of at the next sweep. */
function disposeExport(address: number, versioned: boolean): void {
  const n = deferredCount[0];
  const code = -(address * 2 + (versioned ? 1 : 0));
  deferredNumbers[n] = code;
  deferredCount[0] = n + 1;
  disposeJournaled(code);
}

/** {@link disposeExport} for a caller that journaled the release itself, as the top entry
 * holding `code` (a capsule, before it marks itself disposed). The pin the native side freed (its
 * id returned, never queued) is dropped with no further call. */
function disposeJournaled(code: number): void {
  dropFreedPin(core().dlpk_export_dispose(code));
}

// The bigint of a struct address, remembered by address: export records are reused (a thread's
// quarantine ring), so a consumer's `take()` mostly meets an address it converted before, and a
// bigint is an immutable primitive (an equal one is the same value). Converting costs 11-19 ns.
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
let dispose: (capsule: Capsule) => void;
let addressOf: (capsule: Capsule) => number;
let versionedOf: (capsule: Capsule) => boolean;

/** Whether `x` really is a capsule this library made (not merely `instanceof`: a prototype
 * impostor would pass that and then fail on the first private field). */
export function isCapsule(x: unknown): x is Capsule {
  return typeof x === "object" && x !== null && branded(x);
}

/** @internal Takes a capsule (what `takeAddress()` does, through nothing a caller can replace). */
export function takeCapsule(capsule: Capsule): number {
  return take(capsule);
}

/** @internal Disposes a capsule (idempotent), through nothing a caller can replace. */
export function disposeCapsule(capsule: Capsule): void {
  dispose(capsule);
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
  #epoch: number;

  static {
    pinInstanceof(this);
    branded = (x) => #state in x;
    // A capsule whose construction threw has no epoch: if the backstop's add threw after storing it
    // (an exhausted stack), the exporter releases the struct itself, so the backstop must not
    // register it and release the same address again when it is collected.
    owned = (x) => #state in x && (x as Capsule).#state === OWNED && (x as Capsule).#epoch !== undefined;
    take = (c) => c.#take();
    dispose = (c) => c.#dispose();
    addressOf = (c) => c.#address;
    versionedOf = (c) => c.#versioned;
    registerDisposer((x) => {
      if (!(#state in x)) return false;
      (x as Capsule).#dispose();
      return true;
    });
  }

  /** @ignore (library-internal) Made by the export functions. The backstop is the last step: once it holds the
   * capsule nothing here throws. */
  constructor(address: number, versioned: boolean) {
    this.#address = address;
    this.#versioned = versioned;
    this.#epoch = backstop.add(this, address * 2 + (versioned ? 1 : 0));
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
    // Unregistered before the state changes: if that throws, the capsule is still whole and owned.
    backstop.remove(this, this.#epoch);
    this.#state = TAKEN;
    return this.#address;
  }

  /** Releases the struct if nobody took it (runs its deleter). Idempotent. */
  dispose(): void {
    this.#dispose();
  }

  #dispose(): void {
    if (this.#state !== OWNED) return;
    backstop.remove(this, this.#epoch);
    // Journaled before the state changes, with no call in between: if the release below cannot even
    // start (an exhausted stack), the struct is released at the next call into the library.
    const n = deferredCount[0];
    const code = -(this.#address * 2 + (this.#versioned ? 1 : 0));
    deferredNumbers[n] = code;
    deferredCount[0] = n + 1;
    this.#state = DISPOSED;
    disposeJournaled(code);
  }

  /** Same as {@link Capsule.dispose}, for `using`. */
  [Symbol.dispose](): void {
    this.#dispose();
  }
}
