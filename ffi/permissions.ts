/**
 * The Deno permissions a library lookup needs, gathered along the way so that one error names them
 * all, as a run line the user can copy. In an interactive terminal each one is requested instead,
 * so Deno's own prompt asks the user; after the first refusal nothing more is asked. Bun has no
 * permissions: everything is granted there.
 * @module
 */
import { DLPackError } from "../src/facts/errors.ts";
import type { PermissionKind, Runtime } from "./types.ts";

/** The order of the flags in a run line. */
const KINDS: readonly PermissionKind[] = ["ffi", "env", "read", "write", "net"];

/** A target that stands for the cache folder when the variables choosing it could not be read:
 * the run line then computes it in the shell, as the module would. */
export const CACHE_IN_SHELL = "$CACHE";
const CACHE_SHELL_LINE =
  "CACHE=${DLPACK_CACHE:-${DENO_DIR:+$DENO_DIR/dlpack-ts}}; CACHE=${CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/dlpack-ts}; ";

/** Every permission one lookup needs and which of them are missing. */
export class Permissions {
  readonly #rt: Runtime;
  /** Every permission the lookup needs, granted or not, by kind: the run line lists them all. */
  readonly #needed = new Map<PermissionKind, Set<string>>();
  readonly #missing = new Map<PermissionKind, Set<string>>();
  /** Whether the first run downloads, which alone needs the network and a writable cache. */
  #download = false;
  #asking = true;

  /** Starts an empty list for `rt`. */
  constructor(rt: Runtime) {
    this.#rt = rt;
  }

  /**
   * Whether `kind` is granted for `target` ("" for ffi: unscoped). Where Deno can prompt it asks,
   * until the user refuses once. Not granted, it counts as missing unless `optional` (a permission
   * whose lack only costs something, such as writing the cache).
   */
  have(kind: PermissionKind, target = "", optional = false): boolean {
    add(this.#needed, kind, target);
    if (target === CACHE_IN_SHELL) {
      if (!optional) add(this.#missing, kind, target);
      return false;
    }
    const rt = this.#rt;
    const argument = target === "" ? undefined : target;
    if (rt.granted(kind, argument)) return true;
    if (this.#asking && rt.request(kind, argument)) return true;
    this.#asking = false;
    if (!optional) add(this.#missing, kind, target);
    return false;
  }

  /** Records a permission the run line must name that cannot be checked now (the hosts a download
   * is redirected to). */
  note(kind: PermissionKind, target: string): void {
    add(this.#needed, kind, target);
  }

  /** Records that this run goes on to download (the network and writing the cache are for it). */
  downloads(): void {
    this.#download = true;
  }

  /** Whether a permission the lookup needs is missing. */
  get missing(): boolean {
    return this.#missing.size > 0;
  }

  /** The flags that are missing, as Deno spells them. */
  missingFlags(): string[] {
    return KINDS.filter((k) => this.#missing.has(k)).map((k) => flag(k, this.#missing.get(k)!));
  }

  /** A `deno run` line with every permission the lookup needs, for the program being run. */
  runLine(): string {
    const flags = KINDS.filter((k) => this.#needed.has(k)).map((k) => flag(k, this.#needed.get(k)!));
    const shellCache = [...this.#needed.values()].some((targets) => targets.has(CACHE_IN_SHELL));
    return `${shellCache ? CACHE_SHELL_LINE : ""}deno run ${flags.join(" ")} ${quoted(this.#rt.mainModule())}`;
  }

  /** The one error for everything missing: what Deno refused, the run line, what was tried. */
  error(tried: readonly string[]): DLPackError {
    const notes: string[] = [];
    if (this.#download) {
      notes.push(
        "--allow-net and --allow-write are for the first run, which downloads the release build and caches it; " +
          "later runs need neither",
      );
    }
    if (this.#missing.has("ffi")) {
      notes.push(
        "--allow-ffi without a path: a path-scoped --allow-ffi=<dir> lets Deno load the library but not run the " +
          "pointer functions (Deno.UnsafePointer, Deno.UnsafePointerView) that every import and export uses",
      );
    }
    if ([...this.#needed.values()].some((targets) => targets.has(CACHE_IN_SHELL))) {
      notes.push("the CACHE= part picks the cache folder the module uses, from variables it may not read yet");
    }
    return new DLPackError(
      "library",
      `libdlpack could not be looked for: Deno denies ${this.missingFlags().join(" ")}. Run with every permission ` +
        `it needs (or answer Deno's prompts in a terminal):\n  ${this.runLine()}\n` +
        (notes.length > 0 ? `(${notes.join("; ")}.)\n` : "") + `Tried: ${tried.join("; ")}.`,
    );
  }
}

function add(map: Map<PermissionKind, Set<string>>, kind: PermissionKind, target: string): void {
  let targets = map.get(kind);
  if (targets === undefined) map.set(kind, targets = new Set());
  targets.add(target);
}

/** `--allow-<kind>=<targets>` (no value where one target is unscoped), quoted for a POSIX shell. */
function flag(kind: PermissionKind, targets: Set<string>): string {
  if (targets.has("")) return `--allow-${kind}`;
  const value = [...targets].map((t) => t === CACHE_IN_SHELL ? t : escaped(t)).join(",");
  return /^[A-Za-z0-9_./:,=@%+-]*$/.test(value) ? `--allow-${kind}=${value}` : `"--allow-${kind}=${value}"`;
}

/** Escapes what a double-quoted shell word would expand. */
const escaped = (text: string) => text.replace(/[\\"$`]/g, (c) => `\\${c}`);

const quoted = (word: string) => /^[A-Za-z0-9_./:,=@%+-]+$/.test(word) ? word : `"${escaped(word)}"`;
