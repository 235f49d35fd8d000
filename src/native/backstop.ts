/**
 * The GC backstop: a FinalizationRegistry that registers lazily, releasing the native share of a
 * handle (a view, a capsule, an owner share, a Python object) collected without `dispose()`.
 * @module
 */
import { runtime } from "../../ffi/mod.ts";
import { releaseDeferred } from "./journal.ts";
import {
  enqueueMicrotask,
  Float64ArrayCtor,
  hintExternalMemory,
  Int32ArrayCtor,
  newRegistry,
  objectSlots,
} from "../facts/intrinsics.ts";

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

/** About the native memory an owner record takes (its allocation included): what a view or an
 * owner share left to the collector keeps, beside the producer's own memory. */
export const OWNER_RECORD_BYTES = 88;
/** About the native memory an export's records take (the managed struct with its shape and
 * strides, and the owner of its pin): what a capsule left to the collector keeps. */
export const EXPORT_RECORD_BYTES = 272;
/** Native bytes of registered handles a backstop tells the collector about at once (one allocation
 * per hint: a small share of what the registrations themselves cost). */
const HINT_BYTES = 64 * 1024;
/** Slots in a backstop's first table of held values (it doubles when full). */
const FIRST_SLOTS = 4096;
/** A held value whose holder released it itself: the slot only waits for the collector (or the
 * flush) to free it. No held value is NaN (addresses and journal entries are whole numbers). */
const RELEASED = NaN;

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
 * Each handle's held value sits in a slot of a table of its own, and the registry holds only the
 * slot's index (a small integer, which neither engine allocates) and no unregister token: a token
 * made each registration cost a weakly keyed map entry (V8, JavaScriptCore) and a hash of the
 * handle, which kept about twice the memory reachable per handle left to the collector. Each place
 * of the young list owns a slot, which its handle takes along (its held value copied in) when it
 * leaves the place: `add`, and the `remove` of an import disposed at once, touch only the young
 * list. A registered handle that releases its share itself marks its slot released instead of
 * unregistering; a slot is freed by whoever sees it last: the flush (a handle no longer live when
 * it comes), or the registry's callback (a registered handle, once collected), which releases
 * nothing for a released slot.
 *
 * `add` never throws once it has stored a handle, and a flush interrupted by an exception (an
 * exhausted stack) resumes where it stopped: a handle is registered at most once, and its held
 * value is released at most once, never once `remove` has run.
 */
export class LazyBackstop<T extends number> {
  #registry: FinalizationRegistry<number>;
  #isLive: (holder: object) => boolean;
  #recent: (object | undefined)[] = youngSlots();
  /** A slot reserved for each place of the young list (so that `add` and `remove` of a handle
   * disposed at once touch no free stack): a handle leaving its place takes the slot with it. */
  #recentSlots: Int32Array = new Int32ArrayCtor(RECENT);
  /** The young handles' held values, by place: they reach the slot table when a handle leaves
   * its place (unboxed, so waiting handles allocate nothing). */
  #recentHelds: Float64Array = new Float64ArrayCtor(RECENT);
  #recentCount = 0;
  #renewIn = RENEW_AFTER;
  // Own slots written by index: a setter a caller put on Array.prototype never sees them.
  #holders: (object | undefined)[] = objectSlots(BACKSTOP_BATCH);
  #slots: Int32Array = new Int32ArrayCtor(BACKSTOP_BATCH);
  #count = 0;
  /** The held value of each slot in use ({@link RELEASED} once its holder released it). */
  #held: Float64Array = new Float64ArrayCtor(FIRST_SLOTS);
  /** The free slots, a stack (its top reused first: a handle disposed at once leaves its slot to
   * the next one). */
  #free: Int32Array = freeSlots(0, FIRST_SLOTS);
  #freeCount = FIRST_SLOTS;
  #scheduled = false;
  #flushLater: () => void;
  /** Native bytes each handle keeps (what its `cleanup` frees), for {@link hintExternalMemory}. */
  #nativeBytes: number;
  /** Native bytes of handles registered since the last hint. */
  #unhinted = 0;

  /** `cleanup` runs for a collected live handle; `isLive` says whether a handle still needs it;
   * `nativeBytes`: about how much native memory a handle keeps until then. */
  constructor(cleanup: (held: T) => void, isLive: (holder: object) => boolean, nativeBytes = 0) {
    this.#nativeBytes = nativeBytes;
    this.#registry = newRegistry((slot: number) => {
      const held = this.#held[slot]!;
      this.#free[this.#freeCount++] = slot;
      if (held === held) cleanup(held as T);
    });
    this.#isLive = isLive;
    for (let i = 0; i < RECENT; i++) this.#recentSlots[i] = this.#free[--this.#freeCount]!;
    this.#flushLater = () => {
      this.#scheduled = false;
      // Deferred releases first: they may run a release callback that adds a handle, which this
      // flush then registers like any other. Only here, at a microtask checkpoint: a flush `add`
      // makes runs while what a native call journaled may still wait for its holder.
      releaseDeferred();
      this.flush();
    };
  }

  /** Starts guarding `holder`; returns its slot, to hand back to {@link LazyBackstop.remove}. */
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
    return this.#recentSlots[n]!;
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
    const n = this.#recentCount;
    this.#reserve(n);
    // No call from here on: the move cannot be interrupted half way.
    const recent = this.#recent;
    for (let i = 0; i < n; i++) {
      const slot = this.#recentSlots[i]!;
      this.#held[slot] = this.#recentHelds[i]!;
      this.#holders[count + i] = recent[i];
      this.#slots[count + i] = slot;
      this.#recentSlots[i] = this.#free[--this.#freeCount]!;
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

  /** Makes sure `n` slots are free, doubling the slot table if not (before anything changes). */
  #reserve(n: number): void {
    if (this.#freeCount < n) this.#grow();
  }

  /** Doubles the slot table. */
  #grow(): void {
    const size = this.#held.length;
    const held = new Float64ArrayCtor(size * 2);
    const free = freeSlots(size, size * 2);
    // No call from here on: both tables change together. The slots still free move over too.
    const old = this.#held;
    for (let i = 0; i < size; i++) held[i] = old[i]!;
    const n = this.#freeCount;
    for (let i = 0; i < n; i++) free[size + i] = this.#free[i]!;
    this.#held = held;
    this.#free = free;
    this.#freeCount = size + n;
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

  /** The holder released its share itself (call once, with the slot `add` returned, before anything
   * else could release the held value). Calls nothing, so it cannot throw. */
  remove(holder: object, slot: number): void {
    // The last one added (an import disposed right away) leaves the list now, so the list does not
    // keep it reachable until the next flush; its slot stays with its place, for the next one.
    const n = this.#recentCount - 1;
    if (n >= 0 && this.#recent[n] === holder) {
      this.#recent[n] = undefined;
      this.#recentCount = n;
    } else {
      // Registered (the registry's callback frees the slot once the handle is collected, releasing
      // nothing), or waiting deeper: the flush then frees the slot of a handle no longer live
      // (the mark may be overwritten when the handle leaves the young list; only liveness counts).
      this.#held[slot] = RELEASED;
    }
  }

  /** Registers every waiting handle that is still live, and frees the slots of the others. */
  flush(): void {
    // Each young handle registered takes its place's slot along: the places get free ones.
    this.#reserve(this.#recentCount);
    while (this.#recentCount > 0) this.#recentCount = this.#registerRecent(this.#recentCount);
    while (this.#count > 0) this.#count = this.#registerLast(this.#count);
    if (this.#unhinted >= HINT_BYTES) {
      // The collector counts only its own heap: it would let registered handles (and the native
      // memory they keep) pile up between collections. Told, it collects them about as soon as if
      // that memory were its own.
      hintExternalMemory(this.#unhinted);
      this.#unhinted = 0;
    }
  }

  /** Registers the last of `n` handles of the young list if it is still live (its place then gets
   * a free slot; a handle no longer live leaves its slot to the place), and clears its place;
   * returns `n - 1` (the caller stores it: an interruption before the registration leaves the
   * place to retry, and nothing after it can throw). */
  #registerRecent(n: number): number {
    const holder = this.#recent[n - 1]!;
    if (this.#isLive(holder)) {
      const slot = this.#recentSlots[n - 1]!;
      this.#held[slot] = this.#recentHelds[n - 1]!;
      this.#registry.register(holder, slot);
      this.#recentSlots[n - 1] = this.#free[--this.#freeCount]!;
      this.#unhinted += this.#nativeBytes;
    }
    this.#recent[n - 1] = undefined;
    return n - 1;
  }

  /** {@link LazyBackstop.#registerRecent} for the older list, whose places keep no slot: the slot
   * of a handle no longer live is freed. */
  #registerLast(n: number): number {
    const holder = this.#holders[n - 1]!;
    const slot = this.#slots[n - 1]!;
    if (this.#isLive(holder)) {
      this.#registry.register(holder, slot);
      this.#unhinted += this.#nativeBytes;
    } else this.#free[this.#freeCount++] = slot;
    this.#holders[n - 1] = undefined;
    return n - 1;
  }
}

/** A stack of the free slots `from` to `to` - 1 (the lowest on top), in a table of `to`. */
function freeSlots(from: number, to: number): Int32Array {
  const free = new Int32ArrayCtor(to);
  for (let i = from; i < to; i++) free[i - from] = to - 1 - (i - from);
  return free;
}
