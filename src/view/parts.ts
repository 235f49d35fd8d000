/**
 * The parts of a `BufferView` that are not the class: what few views have (`Extras`), the stamp
 * that ties a handed-out ArrayBuffer to its view, and the errors the class throws.
 * @module
 */
import { DLPackError, shown } from "../facts/errors.ts";
import { Stamp } from "../facts/brands.ts";
import type { AnyTypedArray } from "../facts/dtypes.ts";
import { freeze, newSet, ObjectCtor } from "../facts/intrinsics.ts";
import type { Owner, Releasable } from "../native/shares.ts";
import type { Access, ViewFacts } from "../engines/state.ts";
import { readonlyReason } from "../engines/copy.ts";

/** Ties a handed-out ArrayBuffer to its view: the view (and its memory) lives while the buffer does.
 * A private field stamped onto the buffer (the constructor returns the buffer itself): unlike a
 * property, no setter or Proxy a caller puts on ArrayBuffer.prototype's chain can intercept it. */
export class BufferLink extends Stamp {
  #view: object;
  constructor(buffer: ArrayBuffer, view: object) {
    super(buffer);
    this.#view = view;
  }
}

/** The error of a BufferView method or getter called with a `this` that is no view (a method
 * taken off the prototype, an `Object.create(BufferView.prototype)` impostor): each checks its
 * receiver's private brand first, one check the engine folds into the field read that follows. */
export function notAView(receiver: unknown, member: string): DLPackError {
  return new DLPackError("argument", `BufferView ${member} needs a BufferView as this, got ${shown(receiver)}`);
}

/** What printing something that only pretends to be a view shows (printing never throws). */
export const NOT_A_VIEW_TEXT = "[an object that only pretends to be a BufferView]";

/** The parts of a view few views have. Own fields (defined, not assigned), and the class is not
 * re-exported by any entry: no setter a caller puts anywhere sees the writes. */
export class Extras {
  /** The ArrayBuffer `array()` made over native memory, detached at dispose. */
  buffer: ArrayBuffer | undefined = undefined;
  /** The array `array()` made (the same one each call). */
  array: AnyTypedArray | undefined = undefined;
  /** The view's own share (`keepAlive`), made on first use. */
  share: Owner | undefined = undefined;
  /** The JS value kept reachable while the view lives (`keepAliveValue`). */
  keepAlive: unknown;
  constructor(keepAlive: unknown) {
    this.keepAlive = keepAlive;
  }
}

/** Owner shares of views whose array() buffer was transferred away; never released. */
export const transferredShares = newSet<number>();

export function disposedError(): DLPackError {
  return new DLPackError("disposed", "this view was disposed");
}

export function readonlyError(access: Access, facts: ViewFacts): DLPackError {
  return new DLPackError(
    "readonly",
    access === "readonly"
      ? `this view is ${readonlyReason(facts)}`
      : "this view's access is unknown (legacy DLPack carries no read-only flag); call assumeWritable() if you know it may be written",
  );
}

/** The refusal of `assumeWritable()` for a view that is read-only. */
export function readonlyForever(facts: ViewFacts): DLPackError {
  return new DLPackError("readonly", `this view is ${readonlyReason(facts)}; assumeWritable() cannot override that`);
}

/** The value of every view's `notCloneable`: one enumerable getter that throws, which the
 * structured clone algorithm of both runtimes calls (postMessage, structuredClone,
 * BroadcastChannel): a clone of a view would otherwise be an empty object. */
export const CLONE_GUARD: object = freeze(
  ObjectCtor.defineProperty(ObjectCtor.create(null), "view", {
    enumerable: true,
    get(): never {
      throw new DLPackError(
        "argument",
        "a BufferView cannot be cloned or posted (structuredClone and postMessage would deliver an empty object): " +
          "post exportDLPack(view).take() (a bigint) instead, and importDLPack({ versioned: address }) it in the " +
          "receiving Worker, zero-copy (docs/workers.md)",
      );
    },
  }),
);

/** A view as its Owner share sees it: the view's private methods, not the replaceable public ones. */
export function releasable(dispose: () => void, isDisposed: () => boolean): Releasable {
  return freeze({
    __proto__: null,
    dispose,
    get disposed(): boolean {
      return isDisposed();
    },
  }) as unknown as Releasable;
}
