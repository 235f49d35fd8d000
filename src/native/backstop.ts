/**
 * The GC backstop: a FinalizationRegistry that registers lazily, releasing the native share of a
 * handle (a view, a capsule, an owner share, a Python object) collected without `dispose()`.
 * @module
 */
import { runtime } from "../../ffi/mod.ts";
import { releaseDeferred } from "./journal.ts";
import { enqueueMicrotask, Float64ArrayCtor, newRegistry, objectSlots } from "../facts/intrinsics.ts";

/** Waiting handles a backstop holds before it flushes them all at once. */
const BACKSTOP_BATCH = 1024;
/** The newest waiting handles a backstop keeps in its small, young list. */
const RECENT = 32;
/** Adds between two renewals of the young list: a small share of what V8 allocates between two
 * scavenges (each import allocates about 100 bytes), so the list rarely ever survives one. Where
 * such stores cost nothing special (Bun) the list is kept: perf(import+dispose, export) a replaced
 * array costs JavaScriptCore more in a mixed loop than the store it would save. */
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
 * young generation: a new handle stored into an old array runs the write barrier's slow path
 * (perf(import+dispose) in Deno). A full young list moves to the older list of 1024.
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
      // Deferred releases first: they may run a release callback that adds a handle, which must
      // belong to the epoch this flush registers. Only here, at a microtask checkpoint: a flush
      // `add` makes runs while what a native call journaled may still wait for its holder.
      releaseDeferred();
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

  /** Registers every waiting handle that is still live (replays nothing: see the constructor). */
  flush(): void {
    // The epoch moves before anything is registered: every handle waiting now is one this flush
    // may register, so its remove() must unregister it even if the flush is interrupted before
    // reaching it.
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
