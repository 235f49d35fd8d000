/**
 * JS handles on native owner records: shares that keep memory alive, the GC backstop that releases
 * forgotten ones, and pins that keep JS objects reachable while native code holds their memory.
 * @module
 */
import { core, loadedCore, runtime } from "../ffi/mod.ts";
import { DLPackError } from "./errors.ts";
import { scratch } from "./description.ts";

/**
 * A FinalizationRegistry that registers lazily. Most handles are made and disposed within one tick
 * (import, read, dispose): registering each would cost more than the import itself, so new handles
 * wait in a list and are registered at the next microtask checkpoint (or once 1024 are waiting),
 * and only if they are still live then. A handle disposed before that never touches the registry.
 */
export class LazyBackstop<T> {
  #registry: FinalizationRegistry<T>;
  #isLive: (holder: object) => boolean;
  #holders: object[] = [];
  #helds: T[] = [];
  /** Handles added in an epoch below this one have been through a flush. */
  #epoch = 0;
  #scheduled = false;

  /** `cleanup` runs for a collected live handle; `isLive` says whether a handle still needs it. */
  constructor(cleanup: (held: T) => void, isLive: (holder: object) => boolean) {
    this.#registry = new FinalizationRegistry(cleanup);
    this.#isLive = isLive;
  }

  /** Starts guarding `holder`; returns the epoch to hand back to {@link LazyBackstop.remove}. */
  add(holder: object, held: T): number {
    // The epoch is taken before a flush this call may trigger: that flush covers this holder too.
    const epoch = this.#epoch;
    this.#holders.push(holder);
    this.#helds.push(held);
    if (this.#holders.length >= 1024) this.flush();
    else if (!this.#scheduled) {
      this.#scheduled = true;
      queueMicrotask(() => this.flush());
    }
    return epoch;
  }

  /** The holder released its share itself (call once, after it stopped being live). */
  remove(holder: object, epoch: number): void {
    if (epoch < this.#epoch) this.#registry.unregister(holder);
  }

  /** Registers every waiting handle that is still live. */
  flush(): void {
    this.#scheduled = false;
    const holders = this.#holders;
    const helds = this.#helds;
    for (let i = 0; i < holders.length; i++) {
      if (this.#isLive(holders[i])) this.#registry.register(holders[i], helds[i], holders[i]);
    }
    holders.length = 0;
    helds.length = 0;
    this.#epoch++;
  }
}

/** Releases native owner shares whose holders were collected without `dispose()`. */
const shares = new LazyBackstop<number>(
  (owner) => core().dlpk_owner_release(owner),
  (holder) => !(holder as { released: boolean }).released,
);

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
  #epoch = 0;

  /** @internal Use `view.keepAlive` or `owner.retain()`. */
  constructor(address: number, holder: Releasable | undefined) {
    this.#address = address;
    this.#holder = holder;
    if (holder === undefined) this.#epoch = shares.add(this, address);
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
    shares.remove(this, this.#epoch);
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
let drainedAt = 0;
let sweepTimer: unknown;
// This realm's native pin queue. Every Worker evaluates this module again and so gets its own:
// pin ids are per realm, and a shared queue would let one realm unpin another's buffer.
let realm = 0;

/** This realm's native pin queue (made on first use). */
export function realmAddress(): number {
  if (realm === 0) {
    realm = core().dlpk_realm_new();
    if (realm === 0) throw new DLPackError("library", "out of memory while registering this JS realm's pin queue");
  }
  return realm;
}

/** Keeps `value` reachable until the returned native owner's last reference goes. `onRelease`
 * runs on the JS thread when that is noticed (for objects that need an explicit release). */
export function pin(value: unknown, bytes: number, onRelease?: () => void): number {
  const id = newPinId();
  const status = core().dlpk_pin_new(realmAddress(), id, bytes, scratch.at);
  if (status !== 0) throw new DLPackError("library", `could not pin memory (status ${status})`);
  recordPin(id, value, onRelease);
  return scratch.owner();
}

/** The id for a pin about to be made natively (`dlpk_export_buffer` makes its own). */
export function newPinId(): number {
  return nextPinId++;
}

let sinceSweep = 0;
/** A released pin no entry of `pinned` stands for is queued (a keeper whose offer came late). */
let strayQueued = false;

/** Keeps `value` reachable under `id`, whose native pin owner now exists (its address is the
 * scratch's owner field: every caller records the pin right after the native call made it). */
export function recordPin(id: number, value: unknown, onRelease?: () => void): void {
  pinned.set(id, onRelease === undefined ? value : new PinnedWithRelease(value, onRelease));
  if (!onMainThread) shareBeyondRealm(value, scratch.owner());
  // Sweep every so often on the export path too, so a busy loop releases memory promptly
  // without paying a native call per export.
  if (++sinceSweep >= 64) {
    sinceSweep = 0;
    sweepPins();
  }
  scheduleSweep();
}

class PinnedWithRelease {
  constructor(readonly value: unknown, readonly onRelease: () => void) {}
}

/** Drops every pin whose native owner was released since the last sweep; returns how many.
 * A release callback may reenter (export, import, stats() all sweep): each batch is copied out of
 * the shared buffer first, and a callback that throws cannot stop the rest of the batch. */
export function sweepPins(): number {
  if (pinned.size === 0 && !strayQueued) return 0;
  strayQueued = false;
  const lib = core();
  const queue = realmAddress();
  let total = 0;
  for (;;) {
    const n = lib.dlpk_pins_drain(queue, drainedAt ||= runtime().addressOf(drained), drained.length);
    // A copy: a release callback may pin or sweep again, which reuses `drained`.
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
    if (unanswered.size !== 0) repeatOffers();
    if (pinned.size === 0) {
      clearInterval(sweepTimer as number);
      sweepTimer = undefined;
    }
  }, 250);
  runtime().unrefTimer(sweepTimer);
}

// ---------------------------------------------------------------------------------------------
// Shared memory outliving a Worker. When a Worker ends, its heap goes and with it every object its
// pins held: an ArrayBuffer's memory is freed under the consumer. A SharedArrayBuffer's backing
// store is shared, though, so a Worker that pins one also offers it to the main thread, which pins
// it too (a keeper pin natively tied to the Worker's) until the consumer releases the export.

const KEEPER_CHANNEL = "dlpack-ts/keep";
const onMainThread = runtime().mainThread;
const sabByteLength = Object.getOwnPropertyDescriptor(SharedArrayBuffer.prototype, "byteLength")!.get!;
const typedArrayBuffer = Object.getOwnPropertyDescriptor(
  Object.getPrototypeOf(Uint8Array.prototype) as object,
  "buffer",
)!.get!;
const applyFn = Reflect.apply;

/** The SharedArrayBuffer under a TypedArray or DataView, read through intrinsics; else undefined. */
function sharedBufferOf(value: unknown): SharedArrayBuffer | undefined {
  let buffer: unknown = value;
  try {
    if (!(value instanceof SharedArrayBuffer)) buffer = applyFn(typedArrayBuffer, value, []);
    applyFn(sabByteLength, buffer, []); // throws unless buffer really is a SharedArrayBuffer
    return buffer as SharedArrayBuffer;
  } catch {
    return undefined;
  }
}

let offers: BroadcastChannel | undefined;
/** Offers not yet taken: the main thread may not have been listening when they were posted. */
const unanswered = new Map<number, SharedArrayBuffer>();

function shareBeyondRealm(value: unknown, pinOwner: number): void {
  const buffer = sharedBufferOf(value);
  if (buffer === undefined) return;
  const token = core().dlpk_pin_share(pinOwner);
  if (token === 0) return; // out of memory: the export lives as long as this Worker, as before
  offers ??= new BroadcastChannel(KEEPER_CHANNEL);
  offers.postMessage({ token, buffer });
  unanswered.set(token, buffer);
}

/** Posts again every offer the main thread has not taken yet; forgets taken and released ones. */
function repeatOffers(): void {
  const lib = core();
  for (const [token, buffer] of unanswered) {
    const state = lib.dlpk_pin_kept(token);
    if (state === 0) offers!.postMessage({ token, buffer });
    else unanswered.delete(token);
  }
}

/** The main thread's side: pins each offered SharedArrayBuffer for as long as the Worker's pin. */
function keepOffered(event: MessageEvent): void {
  const data = event.data as { token?: unknown; buffer?: unknown } | null;
  if (data === null || typeof data !== "object" || typeof data.token !== "number") return;
  const buffer = sharedBufferOf(data.buffer);
  if (buffer === undefined) return;
  const id = newPinId();
  const status = core().dlpk_pin_keep(data.token, realmAddress(), id, applyFn(sabByteLength, buffer, []) as number);
  if (status === 0) recordPin(id, buffer);
  // 1: the consumer released it before the offer arrived: the keeper's id is already queued.
  else strayQueued = true;
}

let keeper: BroadcastChannel | undefined;
let keeperUnrefed = false;

function openKeeper(): void {
  keeper = new BroadcastChannel(KEEPER_CHANNEL);
  keeper.onmessage = keepOffered;
  keeperUnrefed = runtime().unrefChannel(keeper);
}

// Where a listening channel would keep the process alive (Deno), it listens only while some other
// realm using the library is alive (native realm count, polled); where it can be unref'd (Bun), it
// listens from the start.
function keeperTick(): void {
  const lib = loadedCore();
  if (lib === undefined || keeperUnrefed) return;
  const others = lib.dlpk_realms_live() - (realm !== 0 ? 1 : 0);
  if (others > 0 && keeper === undefined) openKeeper();
  else if (others <= 0 && keeper !== undefined) {
    keeper.close();
    keeper = undefined;
  }
}

if (onMainThread) {
  openKeeper();
  if (!keeperUnrefed) {
    keeper!.close();
    keeper = undefined;
    const timer = setInterval(keeperTick, 50);
    runtime().unrefTimer(timer);
  }
}
