/**
 * Pins: JS objects kept reachable while native owner records hold their memory. Native code never
 * calls JS; it queues the ids of released pins in this realm's queue, and JS sweeps the queue.
 * @module
 */
import { core, runtime } from "../../ffi/mod.ts";
import { DLPackError } from "../facts/errors.ts";
import { scratch, U32 } from "./scratch.ts";
import { objectSlots, startInterval, stopInterval } from "../facts/intrinsics.ts";

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

/** Whether this realm's pin queue exists (it is made on first use). */
export function realmMade(): boolean {
  return realm !== 0;
}

/** This realm's native pin queue (made on first use). */
export function realmAddress(): number {
  if (realm === 0) {
    realm = core().dlpk_realm_new();
    if (realm === 0) throw new DLPackError("library", "out of memory while registering this JS realm's pin queue");
  }
  return realm;
}

/** Keeps `value` reachable until the returned native owner's last reference goes. `onRelease`
 * runs on the JS thread when that is noticed (for objects that need an explicit release). The
 * owner record is journaled (src/native/journal.ts) for its holder; if this throws, nothing was
 * recorded for `value`, and whatever was made is journaled, to be released. */
export function pin(value: unknown, bytes: number, onRelease?: () => void): number {
  const id = newPinId();
  const status = core().dlpk_pin_new(realmAddress(), id, bytes, scratch.at);
  if (status !== 0) throw new DLPackError("library", `could not pin memory (status ${status})`);
  const owner = scratch.u32[U32.ownerHi] * 0x1_0000_0000 + scratch.u32[U32.ownerLo];
  recordPin(id, value, onRelease);
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

/** Notes that a released pin no entry of `pinned` stands for was queued (a keeper whose offer came
 * after the consumer released the export): the next sweep drains the queue even with no pins. */
export function markStray(): void {
  strayQueued = true;
}

/** Keeps `value` reachable under `id`, whose native pin owner now exists. Runs nothing else (no
 * sweep, whose release callbacks are caller code): call {@link pinsRecorded} once what the native
 * call journaled is held. */
export function recordPin(id: number, value: unknown, onRelease?: () => void): void {
  if (onRelease === undefined) pinned[id] = value;
  else {
    pinned[id] = new PinnedWithRelease(value, onRelease);
    withRelease[id] = 1;
  }
  pinCount++;
}

/** After pins were recorded and what they pin is held: sweeps now and then, and keeps the sweep
 * timer running while pins exist. Never throws. perf(export): small, with no `try` of its own, so
 * that it inlines into the export (JavaScriptCore inlines no function that has one). */
export function pinsRecorded(): void {
  if (++sinceSweep >= 64 || sweepTimer === undefined) sweepNow();
}

/** The rare part of {@link pinsRecorded}: sweep every so often on the export path too, so a busy
 * loop releases memory promptly without paying a native call per export. */
function sweepNow(): void {
  try {
    if (sinceSweep >= 64) {
      sinceSweep = 0;
      sweepPins();
    }
    scheduleSweep();
  } catch {
    // Swept by the next call, the timer, or stats().
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
      const released = forgetPin(id);
      if (released !== undefined) (callbacks ??= objectSlots<() => void>(n))[count++] = released.onRelease;
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
    if (pinCount === 0) {
      stopInterval(sweepTimer);
      sweepTimer = undefined;
    }
  }, 250);
  sweepTimer = timer;
  runtime().unrefTimer(timer);
}

/** Drops the pin of a capsule disposed from JS, which the native side freed at once (its id
 * returned, never queued): with no further call, so an exhausted stack cannot leave its slot. */
export function dropFreedPin(id: number): void {
  if (!(id > 0 && id < nextPinId)) return;
  const released = forgetPin(id);
  if (released !== undefined) notifyReleased(released);
}

/** Frees the slot of the pin `id` (one this realm handed out); returns its entry when it has a
 * release callback, which the caller runs. */
function forgetPin(id: number): PinnedWithRelease | undefined {
  const entry = pinned[id];
  pinned[id] = undefined;
  // A pin whose recording failed (the export then deleted its struct) was never counted.
  if (entry !== undefined) pinCount--;
  freeIds[freeCount++] = id;
  if (withRelease[id] === 0) return undefined;
  withRelease[id] = 0;
  return entry as PinnedWithRelease;
}
