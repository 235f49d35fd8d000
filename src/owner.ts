/**
 * JS handles on native owner records: shares that keep memory alive, the GC backstop that releases
 * forgotten ones, and pins that keep JS objects reachable while native code holds their memory.
 * @module
 */
import { core, runtime } from "../ffi/mod.ts";
import { DLPackError } from "./errors.ts";
import { scratch } from "./description.ts";

/** Releases native owner shares whose JS handles were collected without `dispose()`. */
const backstop = new FinalizationRegistry<number>((owner) => {
  core().dlpk_owner_release(owner);
});

/** Registers `holder` so that, if it is collected undisposed, its share of `owner` is released. */
export function guard(holder: object, owner: number): void {
  backstop.register(holder, owner, holder);
}

/** The holder released its share itself; the backstop must not release it again. */
export function unguard(holder: object): void {
  backstop.unregister(holder);
}

/** Something that releases one share when asked (a view, or an extra share). */
export interface Releasable {
  dispose(): void;
  readonly disposed: boolean;
}

/**
 * One reference-counted share of the memory behind a view. The producer's deleter (or the free of
 * library memory) runs once every share, view and export referring to it is gone.
 */
export class Owner {
  #address: number;
  #holder: Releasable | undefined;

  /** @internal Use `view.keepAlive` or `owner.retain()`. */
  constructor(address: number, holder: Releasable | undefined) {
    this.#address = address;
    this.#holder = holder;
    if (holder === undefined) guard(this, address);
  }

  /** The native owner record's address (for diagnostics; it is not a tensor address). */
  get address(): bigint {
    return BigInt(this.#address);
  }

  /** Whether this share was released. */
  get released(): boolean {
    return this.#holder !== undefined ? this.#holder.disposed : this.#address === 0;
  }

  /** A new, independent share: the memory stays alive until it is released too. */
  retain(): Owner {
    if (this.released) throw new DLPackError("disposed", "cannot retain a released owner share");
    core().dlpk_owner_retain(this.#address);
    return new Owner(this.#address, undefined);
  }

  /** Releases this share (for a view's own share: disposes the view). Idempotent. */
  release(): void {
    if (this.#holder !== undefined) {
      this.#holder.dispose();
      return;
    }
    if (this.#address === 0) return;
    const address = this.#address;
    this.#address = 0;
    unguard(this);
    core().dlpk_owner_release(address);
  }

  /** Same as {@link Owner.release}, for `using`. */
  [Symbol.dispose](): void {
    this.release();
  }
}

// ---------------------------------------------------------------------------------------------
// Pins: JS objects kept reachable for native owners. Native code never calls JS; it queues the
// ids of released pins, and JS sweeps the queue.

const pinned = new Map<number, unknown>();
let nextPinId = 1;
const drained = new Float64Array(256);
let sweepTimer: unknown;
// This realm's native pin queue. Every Worker evaluates this module again and so gets its own:
// pin ids are per realm, and a shared queue would let one realm unpin another's buffer.
let realm = 0;

function realmAddress(): number {
  if (realm === 0) {
    realm = core().dlpk_realm_new();
    if (realm === 0) throw new DLPackError("library", "out of memory while registering this JS realm's pin queue");
  }
  return realm;
}

/** Keeps `value` reachable until the returned native owner's last reference goes. `onRelease`
 * runs on the JS thread when that is noticed (for objects that need an explicit release). */
export function pin(value: unknown, bytes: number, onRelease?: () => void): number {
  sweepPins();
  const id = nextPinId++;
  const status = core().dlpk_pin_new_in(realmAddress(), id, bytes, scratch.f64);
  if (status !== 0) throw new DLPackError("library", `could not pin memory (status ${status})`);
  pinned.set(id, onRelease === undefined ? value : new PinnedWithRelease(value, onRelease));
  scheduleSweep();
  return scratch.owner();
}

class PinnedWithRelease {
  constructor(readonly value: unknown, readonly onRelease: () => void) {}
}

/** Drops every pin whose native owner was released since the last sweep; returns how many.
 * A release callback may reenter (export, import, stats() all sweep): each batch is copied out of
 * the shared buffer first, and a callback that throws cannot stop the rest of the batch. */
export function sweepPins(): number {
  if (pinned.size === 0) return 0;
  const lib = core();
  const queue = realmAddress();
  let total = 0;
  for (;;) {
    const n = lib.dlpk_pins_drain_in(queue, drained, drained.length);
    const ids = n === 0 ? drained.subarray(0, 0) : drained.slice(0, n);
    const callbacks: (() => void)[] = [];
    for (let i = 0; i < n; i++) {
      const entry = pinned.get(ids[i]);
      pinned.delete(ids[i]);
      if (entry instanceof PinnedWithRelease) callbacks.push(entry.onRelease);
    }
    for (const release of callbacks) {
      try {
        release();
      } catch {
        // A keepAlive's release is a notification: the memory is already given back, nothing
        // can be retried, and throwing here would surface in an unrelated call (or the timer).
      }
    }
    total += n;
    if (n < drained.length) return total;
  }
}

/** How many JS objects are pinned right now (after a sweep). */
export function pinnedCount(): number {
  sweepPins();
  return pinned.size;
}

// While pins exist, sweep now and then even if the program makes no further calls, so memory a
// consumer released is not held until the next export. The timer never keeps the process alive.
function scheduleSweep(): void {
  if (sweepTimer !== undefined) return;
  sweepTimer = setInterval(() => {
    sweepPins();
    if (pinned.size === 0) {
      clearInterval(sweepTimer as number);
      sweepTimer = undefined;
    }
  }, 250);
  runtime().unrefTimer(sweepTimer);
}
