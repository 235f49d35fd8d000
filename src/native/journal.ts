/**
 * The journal of releases the JS side owes: this thread's, kept natively (zig/src/journal.zig) so
 * that every copy of this module in the thread shares it, and viewed here. Each entry is an owner
 * record or a managed struct (`structEntry`, generated from zig/src/abi.zig). Two ways in:
 *
 * - Every native call that hands JS an owned record or struct (imports, allocations, retains,
 *   pins, exports) journals it before it returns. The JS holder (a view, a capsule, an owner
 *   share) ends that entry with one store once it holds what the entry stands for; an exception
 *   in between leaves the entry, to be released at the next replay. Between such a call and that
 *   store no caller code runs (options are read before the call) and nothing replays the journal
 *   (the public functions replay only as they start, before anything of theirs is pending).
 * - A release JS makes is journaled before its native call (no call in between), so a release
 *   that cannot even start (an exhausted stack) is replayed instead of lost.
 *
 * Views and capsules whose disposal must wait (an exception after a view existed) are parked in a
 * list of their own, disposed at the same replays.
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

/** Capacity of the deferred object list. */
const DEFERRED_CAPACITY = 4096;
/** A one-element count. */
type Count = Elements<Int32Array, 0>;

/** [0]: entries in {@link journalEntries}, the native journal's count. Until the library is
 * loaded (nothing is owed before it is), a placeholder. */
export let journalCount: Count = new Int32Array(1) as Count;
/** The entries still to release, the last one on top. A release ends its entry natively before
 * it calls anything (see {@link releaseOwner}). */
export let journalEntries: Float64Array = new Float64Array(0);

// Views of the journal from the moment the library is loaded, before any native value exists.
whenLoaded((lib) => {
  const journal = runtime().arrayBuffer(lib.dlpk_journal(), JOURNAL_ENTRIES_BYTE + JOURNAL_CAPACITY * 8);
  journalCount = new Int32ArrayCtor(journal, 0, 1) as Count;
  journalEntries = new Float64ArrayCtor(journal, JOURNAL_ENTRIES_BYTE, JOURNAL_CAPACITY);
});

/** The holder of what a native call just journaled took it: ends the top entry (the view layer
 * and capsules write this store themselves, on their hot paths). */
export function held(): void {
  journalCount[0]--;
}

/** Releases what the top entry stands for (an owner record or struct a native call journaled and
 * no holder took: an engine's temporary, or what a refusal gives back), ending that entry first. */
export function releaseTop(entry: number): void {
  core().dlpk_journal_release(entry);
}

/** [0]: entries in {@link deferredDisposals}. */
export const deferredDisposalCount: Count = new Int32Array(1) as Count;
/** Disposals of views and capsules still to run: `() => disposeView(view)`, made where the object
 * is parked (a closure is made without a call, so parking needs no stack), each naming its own
 * disposer; own slots: index writes reach no setter. */
export const deferredDisposals: ((() => void) | undefined)[] = objectSlots(DEFERRED_CAPACITY);

let releaseScheduled = false;

/** Releases everything deferred (small enough to inline where nothing is). */
export function releaseDeferred(): void {
  if ((journalCount[0] | deferredDisposalCount[0]) !== 0) releaseAllDeferred();
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
  for (let n = journalCount[0]; n > 0; n = journalCount[0]) {
    // Entries past the capacity were never stored (a leak, after 4096 failures in a row).
    if (n > JOURNAL_CAPACITY) {
      journalCount[0] = JOURNAL_CAPACITY;
      continue;
    }
    // The native side ends the top entry as it starts; a deleter it calls may journal more.
    lib.dlpk_journal_replay();
  }
  for (let n = deferredDisposalCount[0]; n > 0; n = deferredDisposalCount[0]) {
    if (n > DEFERRED_CAPACITY) {
      deferredDisposalCount[0] = DEFERRED_CAPACITY;
      continue;
    }
    // Disposal is idempotent: disposing again after an interruption is harmless. A disposal may
    // park more above this entry (a deleter calling back): the entry then becomes a hole.
    const dispose = deferredDisposals[n - 1];
    if (dispose !== undefined) dispose();
    deferredDisposals[n - 1] = undefined;
    if (deferredDisposalCount[0] === n) deferredDisposalCount[0] = n - 1;
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

/** Releases what is owed now if the stack allows, else at the next microtask checkpoint or call
 * into the library (for a catch block that parked something, or an import that took its tensor
 * and throws). Never throws once entered. */
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
  const n = journalCount[0];
  journalEntries[n] = owner;
  journalCount[0] = n + 1;
  core().dlpk_journal_release(owner);
}

/** Releases a capsule's struct (`entry`: its journal entry) as {@link releaseOwner} releases an
 * owner record, through `dlpk_export_dispose`; returns the id of a pin it freed at once (0: none). */
export function releaseStruct(entry: number): number {
  const n = journalCount[0];
  journalEntries[n] = entry;
  journalCount[0] = n + 1;
  return core().dlpk_export_dispose(entry);
}
