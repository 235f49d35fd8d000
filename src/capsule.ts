/**
 * `Capsule`: an exported managed tensor waiting for a consumer, like Python's PyCapsule. It is
 * taken once (ownership passes to the consumer) or disposed (its deleter runs); a capsule that is
 * neither is released by the garbage-collection backstop.
 * @module
 */
import { core } from "../ffi/mod.ts";
import { DLPackError } from "./errors.ts";
import { LazyBackstop } from "./owner.ts";

// Held value: address * 2 + versioned, so nothing is allocated per capsule.
const backstop = new LazyBackstop<number>(
  (held) => core().dlpk_managed_delete(Math.floor(held / 2), held % 2),
  (holder) => (holder as Capsule).owned,
);

const OWNED = 0;
const TAKEN = 1;
const DISPOSED = 2;

let branded: (x: object) => boolean;

/** Whether `x` really is a capsule this library made (not merely `instanceof`: a prototype
 * impostor would pass that and then fail on the first private field). */
export function isCapsule(x: unknown): x is Capsule {
  return typeof x === "object" && x !== null && branded(x);
}

/** An exported DLPack tensor (versioned or legacy) until a consumer takes it. */
export class Capsule {
  #address: number;
  #versioned: boolean;
  #state = OWNED;
  #epoch: number;

  static {
    branded = (x) => #state in x;
  }

  /** @internal Made by the export functions. */
  constructor(address: number, versioned: boolean) {
    this.#address = address;
    this.#versioned = versioned;
    this.#epoch = backstop.add(this, address * 2 + (versioned ? 1 : 0));
  }

  /** The managed struct's address (`DLManagedTensorVersioned*` or `DLManagedTensor*`). */
  get address(): bigint {
    return BigInt(this.#address);
  }

  /** Whether the struct is a `DLManagedTensorVersioned` (else the legacy `DLManagedTensor`). */
  get versioned(): boolean {
    return this.#versioned;
  }

  /** @internal Neither taken nor disposed. */
  get owned(): boolean {
    return this.#state === OWNED;
  }

  /** Whether a consumer took it. */
  get taken(): boolean {
    return this.#state === TAKEN;
  }

  /** Whether it was disposed before anyone took it. */
  get disposed(): boolean {
    return this.#state === DISPOSED;
  }

  /** Hands the struct to a foreign consumer, which must call its deleter exactly once. A capsule
   * can be taken once. */
  take(): bigint {
    return BigInt(this.takeAddress());
  }

  /** @internal `take()` as a number. */
  takeAddress(): number {
    if (this.#state !== OWNED) {
      throw new DLPackError(
        "consumed",
        this.#state === TAKEN ? "this capsule was already taken by a consumer" : "this capsule was disposed",
      );
    }
    this.#state = TAKEN;
    backstop.remove(this, this.#epoch);
    return this.#address;
  }

  /** Releases the struct if nobody took it (runs its deleter). Idempotent. */
  dispose(): void {
    if (this.#state !== OWNED) return;
    this.#state = DISPOSED;
    backstop.remove(this, this.#epoch);
    core().dlpk_managed_delete(this.#address, this.#versioned ? 1 : 0);
  }

  /** Same as {@link Capsule.dispose}, for `using`. */
  [Symbol.dispose](): void {
    this.dispose();
  }
}
