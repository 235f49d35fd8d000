/**
 * `Owner`: a share of a native owner record, as `view.keepAlive` and `retain()` hand it out.
 * @module
 */
import { core } from "../../ffi/mod.ts";
import { DLPackError } from "../facts/errors.ts";
import { freeze } from "../facts/intrinsics.ts";
import { LazyBackstop, OWNER_RECORD_BYTES } from "./backstop.ts";
import { held, releaseOwner } from "./journal.ts";

/** Releases native owner shares whose holders were collected without `dispose()`. */
const shares = new LazyBackstop<number>(
  (owner) => core().dlpk_owner_release(owner),
  (holder) => ownerLive(holder),
  OWNER_RECORD_BYTES,
);

/** Something that releases one share when asked (a view, or an extra share): the library's own
 * functions, so nothing a caller replaces on a prototype is called. */
export interface Releasable {
  dispose(): void;
  readonly disposed: boolean;
}

let ownerLive: (x: object) => boolean;

/** What this module passes its own constructor calls; nothing outside it holds it. */
const MAKER: object = freeze({});

/** A new share of the native owner record at `address` (held by `holder` when a view's own share):
 * how the library makes one, the constructor being closed to callers. */
export function makeOwner(address: number, holder: Releasable | undefined): Owner {
  return new Owner(address, holder, MAKER);
}

/**
 * One reference-counted share of the memory behind a view. The producer's deleter (or the free of
 * library memory) runs once every share, view and export referring to it is gone.
 */
export class Owner {
  #address: number;
  #holder: Releasable | undefined;
  #slot = 0;

  static {
    ownerLive = (x) => #address in x && (x as Owner).#holder === undefined && (x as Owner).#address !== 0;
  }

  /** @ignore (library-internal) Use `view.keepAlive` or `owner.retain()`. */
  constructor(address: number, holder: Releasable | undefined, maker: object) {
    // A share made by a caller could release a record it does not hold, under a live view.
    if (maker !== MAKER) {
      throw new DLPackError("argument", "Owner has no public constructor: use view.keepAlive or owner.retain()");
    }
    this.#address = address;
    this.#holder = holder;
    if (holder === undefined) this.#slot = shares.add(this, address);
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
    // The new reference is journaled until the new share holds it (if making it fails, released).
    const address = this.#address;
    core().dlpk_owner_retain(address);
    const share = new Owner(address, undefined, MAKER);
    held();
    return share;
  }

  /** Releases this share (for a view's own share: disposes the view). Idempotent. */
  release(): void {
    if (this.#holder !== undefined) {
      this.#holder.dispose();
      return;
    }
    const address = this.#address;
    if (address === 0) return;
    shares.remove(this, this.#slot);
    this.#address = 0;
    releaseOwner(address);
  }

  /** Same as {@link Owner.release}, for `using`. */
  [Symbol.dispose](): void {
    this.release();
  }
}
