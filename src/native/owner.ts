/**
 * JS handles on native owner records: shares that keep memory alive, the GC backstop that releases
 * forgotten ones, and pins that keep JS objects reachable while native code holds their memory.
 * @module
 */
import { core, loadedCore, runtime, whenLoaded } from "../../ffi/mod.ts";
import { JOURNAL_CAPACITY, JOURNAL_ENTRIES_BYTE } from "../facts/abi.ts";
import { DLPackError } from "../facts/errors.ts";
import { scratch, U32 } from "./description.ts";
import {
  type Elements,
  enqueueMicrotask,
  Float64ArrayCtor,
  Int32ArrayCtor,
  newRegistry,
  objectSlots,
  slots,
  startInterval,
  startTimeout,
  stopInterval,
} from "../facts/intrinsics.ts";

/** Waiting handles a backstop holds before it flushes them all at once. */
const BACKSTOP_BATCH = 1024;
/** The newest waiting handles a backstop keeps in its small, young list. */
const RECENT = 32;
/** Adds between two renewals of the young list: a small share of what V8 allocates between two
 * scavenges (each import allocates about 100 bytes), so the list rarely ever survives one. Where
 * such stores cost nothing special (Bun) the list is kept: a replaced array costs JavaScriptCore
 * more (5-10 ns per export and import in a mixed loop) than the store it would save. */
const RENEW_AFTER = runtime().costlyOldToYoung ? 1024 : 0x4000_0000;

/** A new young list: an array literal, whose slots are its own (index writes reach no setter a
 * caller put on Array.prototype) and which V8 allocates in its young generation. */
function youngSlots(): (object | undefined)[] {
  // deno-fmt-ignore
  return [
    undefined, undefined, undefined, undefined, undefined, undefined, undefined, undefined,
    undefined, undefined, undefined, undefined, undefined, undefined, undefined, undefined,
    undefined, undefined, undefined, undefined, undefined, undefined, undefined, undefined,
    undefined, undefined, undefined, undefined, undefined, undefined, undefined, undefined,
  ];
}

/**
 * A FinalizationRegistry that registers lazily. Most handles are made and disposed within one tick
 * (import, read, dispose): registering each would cost more than the import itself, so new handles
 * wait in a list and are registered at the next microtask checkpoint (or once 1024 are waiting),
 * and only if they are still live then. A handle disposed before that never touches the registry.
 *
 * New handles go to a list of 32 that V8 gets a fresh one of every 1024 adds, so it stays in its
 * young generation: a new handle stored into an old array runs the write barrier's slow path,
 * which cost Deno about 7 ns per import. A full young list moves to the older list of 1024.
 *
 * `add` never throws once it has stored a handle, and a flush interrupted by an exception (an
 * exhausted stack) resumes where it stopped: a handle is registered at most once, and `remove`
 * unregisters every handle a flush may have reached.
 */
export class LazyBackstop<T extends number> {
  #registry: FinalizationRegistry<T>;
  #isLive: (holder: object) => boolean;
  #recent: (object | undefined)[] = youngSlots();
  // Held values are numbers (addresses): unboxed here, so waiting handles allocate nothing.
  #recentHelds: Float64Array = new Float64ArrayCtor(RECENT);
  #recentCount = 0;
  #renewIn = RENEW_AFTER;
  // Own slots written by index: a setter a caller put on Array.prototype never sees them.
  #holders: (object | undefined)[] = objectSlots(BACKSTOP_BATCH);
  #helds: Float64Array = new Float64ArrayCtor(BACKSTOP_BATCH);
  #count = 0;
  /** Handles added in an epoch below this one may have been registered. */
  #epoch = 0;
  #scheduled = false;
  #flushLater: () => void;

  /** `cleanup` runs for a collected live handle; `isLive` says whether a handle still needs it. */
  constructor(cleanup: (held: T) => void, isLive: (holder: object) => boolean) {
    this.#registry = newRegistry(cleanup);
    this.#isLive = isLive;
    this.#flushLater = () => {
      this.#scheduled = false;
      this.flush();
    };
  }

  /** Starts guarding `holder`; returns the epoch to hand back to {@link LazyBackstop.remove}. */
  add(holder: object, held: T): number {
    // The rare cases (a full young list or a renewal due, either of which sets the sign bit; no
    // flush scheduled yet) are handled before the handle is stored: if that throws (an exhausted
    // stack), nothing was stored and the caller still owns what `held` stands for, whereas a throw
    // after the store would leave the caller releasing a handle the flush then registers.
    if ((((RECENT - 1 - this.#recentCount) | --this.#renewIn) < 0) || !this.#scheduled) this.#prepare();
    const n = this.#recentCount;
    this.#recent[n] = holder;
    this.#recentHelds[n] = held;
    this.#recentCount = n + 1;
    return this.#epoch;
  }

  /** The rare cases of `add`, out of line so that it stays small enough to inline. */
  #prepare(): void {
    this.#makeRoom();
    if (!this.#scheduled) this.#schedule();
  }

  #makeRoom(): void {
    if (this.#recentCount >= RECENT) this.#spill();
    if (this.#renewIn < 0) this.#renew();
  }

  /** Moves the full young list to the older one (flushing both when that has no room). */
  #spill(): void {
    const count = this.#count;
    if (count > BACKSTOP_BATCH - RECENT) {
      this.flush();
      return;
    }
    // No call from here on: the move cannot be interrupted half way.
    const recent = this.#recent;
    const n = this.#recentCount;
    for (let i = 0; i < n; i++) {
      this.#holders[count + i] = recent[i];
      this.#helds[count + i] = this.#recentHelds[i]!;
      recent[i] = undefined;
    }
    this.#count = count + n;
    this.#recentCount = 0;
  }

  /** Replaces the young list by a fresh one (before the old one is likely to leave V8's young
   * generation), moving the waiting handles over. */
  #renew(): void {
    this.#renewIn = RENEW_AFTER;
    const fresh = youngSlots();
    // No call from here on.
    const recent = this.#recent;
    for (let i = 0; i < this.#recentCount; i++) {
      fresh[i] = recent[i];
      recent[i] = undefined;
    }
    this.#recent = fresh;
  }

  /** Never throws (kept apart so that `add` has no try/catch and stays inlinable). */
  #schedule(): void {
    try {
      enqueueMicrotask(this.#flushLater);
      this.#scheduled = true;
    } catch {
      // Flushed by a later add (or when the batch is full).
    }
  }

  /** The holder released its share itself (call once, after it stopped being live). */
  remove(holder: object, epoch: number): void {
    if (epoch < this.#epoch) this.#registry.unregister(holder);
    else {
      // Still waiting. The last one added (an import disposed right away) leaves the list now, so
      // the list does not keep it reachable until the next flush; others are skipped by the flush.
      const n = this.#recentCount - 1;
      if (n >= 0 && this.#recent[n] === holder) {
        this.#recent[n] = undefined;
        this.#recentCount = n;
      }
    }
  }

  /** Registers every waiting handle that is still live. */
  flush(): void {
    // Deferred releases first: they may run a release callback that adds a handle, which must
    // belong to the epoch this flush registers. Then the epoch moves before anything is registered:
    // every handle waiting now is one this flush may register, so its remove() must unregister it
    // even if the flush is interrupted before reaching it.
    releaseDeferred();
    this.#epoch++;
    while (this.#recentCount > 0) {
      this.#recentCount = this.#registerLast(this.#recent, this.#recentHelds, this.#recentCount);
    }
    while (this.#count > 0) this.#count = this.#registerLast(this.#holders, this.#helds, this.#count);
  }

  /** Registers the last of `n` waiting handles of a list if it is still live, and clears its slot;
   * returns `n - 1` (the caller stores it: an interruption before that leaves the slot to retry). */
  #registerLast(list: (object | undefined)[], helds: Float64Array, n: number): number {
    const holder = list[n - 1]!;
    if (this.#isLive(holder)) this.#registry.register(holder, helds[n - 1] as T, holder);
    list[n - 1] = undefined;
    return n - 1;
  }
}

// ---------------------------------------------------------------------------------------------
// Deferred releases. A release that must happen right after an exception (the stack ran out
// between taking native ownership and handing it to a view) may itself fail the same way, so the
// catch blocks only write what is owed into these buffers (no call, nothing that can throw) and
// try to release; whatever is left is released at the next import, export, allocation, stats()
// or microtask checkpoint.

/** Capacity of the deferred object list. */
export const DEFERRED_CAPACITY = 4096;
/** A one-element count. */
export type Count = Elements<Int32Array, 0>;

/** [0]: entries in {@link deferredNumbers}, the native journal's count. Until the library is
 * loaded (nothing is owed before it is), a placeholder. */
export let deferredCount: Count = new Int32Array(1) as Count;
/** Owner records (> 0) and managed structs (`-(address * 2 + versioned)`) still to release: this
 * thread's journal, which the native side keeps (`dlpk_journal()`), so that every copy of this
 * module in the thread shares it and a release finds its entry without being told where it is.
 * A journaled release ends its entry natively before it calls anything (see releaseOwner). */
export let deferredNumbers: Float64Array = new Float64Array(0);

// Views of the journal from the moment the library is loaded, before any native value exists.
whenLoaded((lib) => {
  const journal = runtime().arrayBuffer(lib.dlpk_journal(), JOURNAL_ENTRIES_BYTE + JOURNAL_CAPACITY * 8);
  deferredCount = new Int32ArrayCtor(journal, 0, 1) as Count;
  deferredNumbers = new Float64ArrayCtor(journal, JOURNAL_ENTRIES_BYTE, JOURNAL_CAPACITY);
});

/** [0]: entries in {@link deferredObjects}. */
export const deferredObjectCount: Count = new Int32Array(1) as Count;
/** Views and capsules still to dispose (own slots: index writes reach no setter). */
export const deferredObjects: (object | undefined)[] = objectSlots(DEFERRED_CAPACITY);

/** How the library disposes its own objects (views, capsules), registered by their modules. */
const disposers: ((x: object) => boolean)[] = objectSlots(4) as ((x: object) => boolean)[];
let disposerCount = 0;

/** Registers the disposer of one kind of library object (returns false for other objects). */
export function registerDisposer(dispose: (x: object) => boolean): void {
  disposers[disposerCount++] = dispose;
}

function disposeObject(x: object): void {
  for (let i = 0; i < disposerCount; i++) if (disposers[i]!(x)) return;
}

let releaseScheduled = false;

/** Releases everything deferred (small enough to inline where nothing is). */
export function releaseDeferred(): void {
  if ((deferredCount[0] | deferredObjectCount[0]) !== 0) releaseAllDeferred();
}

/** Each entry ends as its release starts (natively, for the journal of numbers). Nothing is
 * replayed while this thread is inside a producer's deleter: a deleter may be a JS function that
 * calls back into the library from a release under way (a replay's among them), and a nested
 * replay would run deleters inside deleters and dispose objects the outer one is disposing. A
 * timer, which never runs inside a deleter, retries then. */
function releaseAllDeferred(): void {
  const lib = core();
  if (lib.dlpk_inside_deleter() !== 0) {
    releaseAfterDeleter();
    return;
  }
  for (let n = deferredCount[0]; n > 0; n = deferredCount[0]) {
    // Entries past the capacity were never stored (a leak, after 4096 failures in a row).
    if (n > JOURNAL_CAPACITY) {
      deferredCount[0] = JOURNAL_CAPACITY;
      continue;
    }
    // The native side ends the top entry as it starts; a deleter it calls may journal more.
    lib.dlpk_journal_replay();
  }
  for (let n = deferredObjectCount[0]; n > 0; n = deferredObjectCount[0]) {
    if (n > DEFERRED_CAPACITY) {
      deferredObjectCount[0] = DEFERRED_CAPACITY;
      continue;
    }
    // Disposal is idempotent: disposing again after an interruption is harmless. A disposal may
    // park more above this entry (a deleter calling back): the entry then becomes a hole.
    const x = deferredObjects[n - 1];
    if (x !== undefined) disposeObject(x);
    deferredObjects[n - 1] = undefined;
    if (deferredObjectCount[0] === n) deferredObjectCount[0] = n - 1;
  }
}

function releaseDeferredLater(): void {
  releaseScheduled = false;
  releaseDeferred();
}

let retryTimer: unknown;

/** {@link releaseDeferred} once the deleter this thread is inside has returned. */
function releaseAfterDeleter(): void {
  if (retryTimer !== undefined) return;
  const timer = startTimeout(() => {
    retryTimer = undefined;
    releaseDeferred();
  }, 0);
  retryTimer = timer;
  runtime().unrefTimer(timer);
}

/** Called by the catch blocks after they parked something (with no call before that, as the
 * stack may be exhausted there): releases it now if the stack allows, else at the next microtask
 * checkpoint or call into the library. Never throws once entered. */
export function retryQuietly(): void {
  try {
    if (!releaseScheduled) {
      enqueueMicrotask(releaseDeferredLater);
      releaseScheduled = true;
    }
    releaseDeferred();
  } catch {
    // Released at the next call into the library.
  }
}

/**
 * Releases a native owner share. The release is journaled before the native call (no try/catch:
 * this is the dispose hot path, and JavaScriptCore does not inline functions that have one), so
 * if the call cannot even start (an exhausted stack) the share is released later instead of lost;
 * the exception still reaches the caller. The native side ends the entry as it starts, so a call
 * that started is never replayed, even when it does not return here (a deleter that is a JS
 * callback and throws: the runtime rethrows that from this call).
 */
export function releaseOwner(owner: number): void {
  const n = deferredCount[0];
  deferredNumbers[n] = owner;
  deferredCount[0] = n + 1;
  core().dlpk_journal_release(owner);
}

/** Disposes an export of this library its JS side still holds (a capsule nobody took), journaled
 * like {@link releaseOwner}: the struct is released as its deleter would, and a pin it held last
 * is dropped right here instead of at the next sweep. */
export function disposeExport(address: number, versioned: boolean): void {
  const n = deferredCount[0];
  const code = -(address * 2 + (versioned ? 1 : 0));
  deferredNumbers[n] = code;
  deferredCount[0] = n + 1;
  disposeJournaled(code);
}

/** {@link disposeExport} for a caller that journaled the release itself, as the top entry
 * holding `code` (a capsule, before it marks itself disposed). The pin the native side freed (its
 * id returned, never queued) is dropped with no further call, so an exhausted stack cannot leave
 * its slot. */
export function disposeJournaled(code: number): void {
  const id = core().dlpk_export_dispose(code);
  if (!(id > 0 && id < nextPinId)) return;
  const entry = pinned[id];
  pinned[id] = undefined;
  if (entry !== undefined) pinCount--;
  freeIds[freeCount++] = id;
  if (withRelease[id] !== 0) {
    withRelease[id] = 0;
    notifyReleased(entry as PinnedWithRelease);
  }
}

/** Releases native owner shares whose holders were collected without `dispose()`. */
const shares = new LazyBackstop<number>(
  (owner) => core().dlpk_owner_release(owner),
  (holder) => ownerLive(holder),
);

/** Something that releases one share when asked (a view, or an extra share): the library's own
 * functions, so nothing a caller replaces on a prototype is called. */
export interface Releasable {
  dispose(): void;
  readonly disposed: boolean;
}

let ownerLive: (x: object) => boolean;

/**
 * One reference-counted share of the memory behind a view. The producer's deleter (or the free of
 * library memory) runs once every share, view and export referring to it is gone.
 */
export class Owner {
  #address: number;
  #holder: Releasable | undefined;
  #epoch = 0;

  static {
    ownerLive = (x) => #address in x && (x as Owner).#holder === undefined && (x as Owner).#address !== 0;
  }

  /** @ignore (library-internal) Use `view.keepAlive` or `owner.retain()`. */
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
    if (this.#holder !== undefined ? this.#holder.disposed : this.#address === 0) {
      throw new DLPackError("disposed", "cannot retain a released owner share");
    }
    core().dlpk_owner_retain(this.#address);
    // The new share owns a reference from here on: if making its handle fails, give it back.
    const address = this.#address;
    try {
      return new Owner(address, undefined);
    } catch (error) {
      deferredNumbers[deferredCount[0]++] = address;
      retryQuietly();
      throw error;
    }
  }

  /** Releases this share (for a view's own share: disposes the view). Idempotent. */
  release(): void {
    if (this.#holder !== undefined) {
      this.#holder.dispose();
      return;
    }
    const address = this.#address;
    if (address === 0) return;
    // Unregistered before anything changes: if that throws, this share is still live and whole.
    shares.remove(this, this.#epoch);
    this.#address = 0;
    releaseOwner(address);
  }

  /** Same as {@link Owner.release}, for `using`. */
  [Symbol.dispose](): void {
    this.release();
  }
}

// ---------------------------------------------------------------------------------------------
// Pins: JS objects kept reachable for native owners. Native code never calls JS; it queues the
// ids of released pins, and JS sweeps the queue.

// Pinned values by pin id, in own slots (index writes reach no setter, and no Map method a caller
// can replace is involved). Ids of released pins are reused.
let pinned: unknown[] = objectSlots(256);
/** 1 where the pin's entry is a {@link PinnedWithRelease}: one byte read instead of an
 * `instanceof`, which walks a pinned TypedArray's three prototypes on every release. */
let withRelease = new Uint8Array(256);
let freeIds = new Int32Array(256);
let freeCount = 0;
/** Ids below this have been handed out (0 is never used). */
let nextPinId = 1;
let pinCount = 0;
// Over an ArrayBuffer of its own: its address is cached, and in Bun a small array built without one
// keeps its storage in the GC heap until something touches its buffer, which then moves it.
/** Capacity of `drained`: a constant, so no replaced length getter can size a native write. */
const DRAINED = 256;
const drained = new Float64Array(new ArrayBuffer(DRAINED * 8));
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
  // Read without a call: from here on the pin owner is ours to release on any exception.
  const owner = scratch.u32[U32.ownerHi] * 0x1_0000_0000 + scratch.u32[U32.ownerLo];
  try {
    recordPin(id, value, onRelease);
  } catch (error) {
    deferredNumbers[deferredCount[0]++] = owner;
    retryQuietly();
    throw error;
  }
  return owner;
}

/** The id for a pin about to be made natively (`dlpk_export_buffer` makes its own). An id is
 * only reused after the native side reported its release, so no live pin ever shares it. */
export function newPinId(): number {
  if (freeCount > 0) return freeIds[--freeCount]!;
  if (nextPinId === pinned.length) growPins();
  return nextPinId++;
}

function growPins(): void {
  const n = pinned.length;
  const bigger = objectSlots<unknown>(2 * n);
  for (let i = 0; i < n; i++) bigger[i] = pinned[i];
  const ids = new Int32Array(2 * n);
  for (let i = 0; i < freeCount; i++) ids[i] = freeIds[i]!;
  const flags = new Uint8Array(2 * n);
  for (let i = 0; i < n; i++) flags[i] = withRelease[i]!;
  pinned = bigger;
  withRelease = flags;
  freeIds = ids;
}

let sinceSweep = 0;
/** A released pin no entry of `pinned` stands for is queued (a keeper whose offer came late). */
let strayQueued = false;

/** Keeps `value` reachable under `id`, whose native pin owner now exists (its address is the
 * scratch's owner field: every caller records the pin right after the native call made it). */
export function recordPin(id: number, value: unknown, onRelease?: () => void): void {
  if (onRelease === undefined) pinned[id] = value;
  else {
    pinned[id] = new PinnedWithRelease(value, onRelease);
    withRelease[id] = 1;
  }
  pinCount++;
  // Nothing below may throw: the pin is recorded, and a caller's catch must not undo it.
  try {
    if (!onMainThread) shareBeyondRealm(value, scratch.owner());
    // Sweep every so often on the export path too, so a busy loop releases memory promptly
    // without paying a native call per export.
    if (++sinceSweep >= 64) {
      sinceSweep = 0;
      sweepPins();
    }
    scheduleSweep();
  } catch {
    // Swept by the next call, the timer, or stats(); an offer not made leaves the export as
    // long-lived as this Worker, as for memory that is not shared.
  }
}

class PinnedWithRelease {
  constructor(readonly value: unknown, readonly onRelease: () => void) {}
}

/** Drops every pin whose native owner was released since the last sweep; returns how many.
 * A release callback may reenter (export, import, stats() all sweep, reusing `drained`): callbacks
 * run only after their batch was read, and one that throws cannot stop the rest of the batch. */
export function sweepPins(): number {
  if (pinCount === 0 && !strayQueued) return 0;
  strayQueued = false;
  const lib = core();
  const queue = realmAddress();
  let total = 0;
  for (;;) {
    const n = lib.dlpk_pins_drain(queue, drainedAt ||= runtime().addressOf(drained), DRAINED);
    // Nothing in this loop calls out, so the ids are read straight from `drained`; the (rare)
    // callbacks are collected, in a list made only when there is one, and run after it.
    let callbacks: ((() => void) | undefined)[] | undefined;
    let count = 0;
    for (let i = 0; i < n; i++) {
      // n <= DRAINED, the native write's capacity.
      const id = drained[i]!;
      // Only ids this realm handed out come back; anything else is ignored.
      if (!(id > 0 && id < nextPinId)) continue;
      const entry = pinned[id];
      pinned[id] = undefined;
      // A pin whose recording failed (the export then deleted its struct) was never counted.
      if (entry !== undefined) pinCount--;
      freeIds[freeCount++] = id;
      if (withRelease[id] !== 0) {
        withRelease[id] = 0;
        (callbacks ??= objectSlots<() => void>(n))[count++] = (entry as PinnedWithRelease).onRelease;
      }
    }
    for (let i = 0; i < count; i++) {
      try {
        callbacks![i]!();
      } catch {
        // A keepAlive's release is a notification: the memory is already given back, nothing
        // can be retried, and throwing here would surface in an unrelated call (or the timer).
      }
    }
    total += n;
    if (n < DRAINED) return total;
  }
}

/** Runs a released pin's callback (a capsule disposed from JS freed it at once). */
function notifyReleased(entry: PinnedWithRelease): void {
  try {
    entry.onRelease();
  } catch {
    // A notification, as in sweepPins: the memory is already given back.
  }
}

/** How many JS objects are pinned right now (after a sweep). */
export function pinnedCount(): number {
  sweepPins();
  return pinCount;
}

// While pins exist, sweep now and then even if the program makes no further calls, so memory a
// consumer released is not held until the next export. The timer never keeps the process alive.
function scheduleSweep(): void {
  if (sweepTimer !== undefined) return;
  const timer = startInterval(() => {
    sweepPins();
    if (offerCount !== 0) repeatOffers();
    if (pinCount === 0) {
      stopInterval(sweepTimer);
      sweepTimer = undefined;
    }
  }, 250);
  sweepTimer = timer;
  runtime().unrefTimer(timer);
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
/** Offers not yet taken (the main thread may not have been listening when they were posted), in
 * two plain slot arrays: no Map or iterator a caller could replace is involved. */
let offerTokens = slots(0);
let offerBuffers = objectSlots<SharedArrayBuffer>(0);
let offerCount = 0;

function shareBeyondRealm(value: unknown, pinOwner: number): void {
  const buffer = sharedBufferOf(value);
  if (buffer === undefined) return;
  const token = core().dlpk_pin_share(pinOwner);
  if (token === 0) return; // out of memory: the export lives as long as this Worker, as before
  offers ??= new BroadcastChannel(KEEPER_CHANNEL);
  offers.postMessage({ token, buffer });
  if (offerCount === offerTokens.length) {
    const tokens = slots(2 * offerCount + 4);
    const buffers = objectSlots<SharedArrayBuffer>(2 * offerCount + 4);
    for (let i = 0; i < offerCount; i++) {
      tokens[i] = offerTokens[i]!;
      buffers[i] = offerBuffers[i];
    }
    offerTokens = tokens;
    offerBuffers = buffers;
  }
  offerTokens[offerCount] = token;
  offerBuffers[offerCount++] = buffer;
}

/** Posts again every offer the main thread has not taken yet; forgets taken and released ones. */
function repeatOffers(): void {
  const lib = core();
  let kept = 0;
  for (let i = 0; i < offerCount; i++) {
    const token = offerTokens[i]!;
    const buffer = offerBuffers[i];
    offerBuffers[i] = undefined;
    if (lib.dlpk_pin_kept(token) !== 0) continue;
    offers!.postMessage({ token, buffer });
    offerTokens[kept] = token;
    offerBuffers[kept++] = buffer;
  }
  offerCount = kept;
}

/** The main thread's side: pins each offered SharedArrayBuffer for as long as the Worker's pin.
 * An offer is the first call into the library this realm may make (a program that only starts
 * Workers): it loads the library here, as any first use does. Never throws: it runs as an event
 * handler, where an exception would end the program. */
function keepOffered(event: { readonly data: unknown }): void {
  try {
    const data = event.data as { token?: unknown; buffer?: unknown } | null;
    if (data === null || typeof data !== "object" || typeof data.token !== "number") return;
    const buffer = sharedBufferOf(data.buffer);
    if (buffer === undefined) return;
    const lib = core();
    const id = newPinId();
    const status = lib.dlpk_pin_keep(data.token, realmAddress(), id, applyFn(sabByteLength, buffer, []) as number);
    if (status === 0) recordPin(id, buffer);
    // 1: the consumer released it before the offer arrived: the keeper's id is already queued.
    else strayQueued = true;
  } catch {
    // The library cannot be loaded in this realm (nothing here could release the keeper either),
    // or the stack ran out: the Worker offers again until the offer is taken.
  }
}

let keeper: BroadcastChannel | undefined;
let keeperUnrefed = false;

function openKeeper(): void {
  keeper = new BroadcastChannel(KEEPER_CHANNEL);
  keeper.onmessage = keepOffered;
  keeperUnrefed = runtime().unrefChannel(keeper);
}

// The main thread listens from the start, whatever it did first, with the listener unref'd so that
// it never keeps the process alive (Bun's `unref()`; in Deno the method its node:worker_threads
// channel calls). Only where a runtime offers neither does it listen just while some other realm
// using the library is alive (native realm count, polled: this realm must have loaded the library).
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
    const timer = startInterval(keeperTick, 50);
    runtime().unrefTimer(timer);
  }
}
