/**
 * The journal of releases the JS side owes (this thread's, kept natively: zig/src/journal.zig),
 * and the library objects whose disposal waits: a release that must happen right after an
 * exception may itself fail the same way, so what is owed is written where it cannot be lost and
 * released at the next call into the library or microtask checkpoint.
 * @module
 */
import { core, runtime, whenLoaded } from "../../ffi/mod.ts";
import { JOURNAL_CAPACITY, JOURNAL_ENTRIES_BYTE } from "../facts/abi.ts";
import {
  type Elements,
  enqueueMicrotask,
  Float64ArrayCtor,
  Int32ArrayCtor,
  objectSlots,
  startTimeout,
} from "../facts/intrinsics.ts";

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
