/**
 * The Deno binding of the runtime boundary (`Deno.dlopen`, `Deno.UnsafePointerView`). Typed locally
 * (the few parts of the `Deno` namespace it uses), so a type check without Deno's declarations (a
 * Bun or tsc project importing the module) needs none.
 * @module
 */
import { DLPackError } from "../src/facts/errors.ts";
import type { MemoryReads, OpenLibrary, PermissionKind, Runtime, SymbolTable } from "./types.ts";
import { bindSymbols } from "./results.ts";
import { Load } from "../src/facts/abi.ts";

declare const pointerBrand: unique symbol;
/** Deno's pointer object, opaque here. */
type Pointer = { readonly [pointerBrand]: unknown };

type PermissionDescriptor =
  | { readonly name: "env"; readonly variable?: string | undefined }
  | { readonly name: "net"; readonly host?: string | undefined }
  | { readonly name: "read" | "write" | "ffi"; readonly path?: string | undefined };

interface ForeignFunction {
  /** The symbol's name in the library, when it is not the key. */
  readonly name?: string;
  readonly parameters: readonly string[];
  readonly result: string;
  readonly optional: boolean;
}

/** The reads of an `UnsafePointerView` used here, each at a byte offset from its pointer. */
interface PointerView {
  getBigInt64(offset: number): bigint;
  getBigUint64(offset: number): bigint;
}

interface CommandOutput {
  readonly code: number;
  readonly stdout: Uint8Array;
  readonly stderr: Uint8Array;
}

interface DenoNamespace {
  readonly UnsafePointer: {
    // A number is accepted as well as a bigint.
    create(value: number | bigint): Pointer | null;
    of(view: ArrayBufferView): Pointer | null;
    value(pointer: Pointer | null): number | bigint;
  };
  readonly UnsafePointerView: {
    new (pointer: Pointer): PointerView;
    readonly prototype: PointerView;
    getArrayBuffer(pointer: Pointer, byteLength: number, offset?: number): ArrayBuffer;
    getCString(pointer: Pointer, offset?: number): string;
  };
  dlopen(
    path: string,
    symbols: Record<string, ForeignFunction>,
  ): { readonly symbols: Record<string, unknown>; close(): void };
  readonly permissions: {
    querySync(descriptor: PermissionDescriptor): { readonly state: "granted" | "denied" | "prompt" };
    requestSync(descriptor: PermissionDescriptor): { readonly state: "granted" | "denied" | "prompt" };
  };
  readonly stdin: { isTerminal(): boolean };
  readonly stderr: { isTerminal(): boolean };
  readonly mainModule: string;
  readonly env: { get(name: string): string | undefined };
  statSync(path: string): unknown;
  unrefTimer(id: number): void;
  // Deno's own temporary folder when `dir` is undefined.
  makeTempDirSync(options: { readonly dir?: string | undefined; readonly prefix?: string }): string;
  readonly Command: new (program: string, options: {
    readonly args: string[];
    readonly stdout: "piped";
    readonly stderr: "piped";
    readonly stdin: "null";
  }) => { outputSync(): CommandOutput };
  readonly build: { readonly os: string; readonly arch: string };
}

const NumberCtor = Number;

/** The method Deno's own `node:worker_threads` BroadcastChannel calls for `ref()` / `unref()`: a
 * symbol-keyed method of the web BroadcastChannel (`false` stops its listener from keeping the
 * event loop alive). Captured at load; undefined where this Deno has none. */
const refChannel = ((): ((this: BroadcastChannel, ref: boolean) => void) | undefined => {
  try {
    const proto = BroadcastChannel.prototype as unknown as Record<symbol, unknown>;
    for (const key of Object.getOwnPropertySymbols(proto)) {
      const method = proto[key];
      if (key.description === "refBroadcastChannel" && typeof method === "function") {
        return method as (this: BroadcastChannel, ref: boolean) => void;
      }
    }
  } catch {
    // No BroadcastChannel, or a prototype that cannot be read: channels stay referenced.
  }
  return undefined;
})();
const applyFn = Reflect.apply;

/** The pointer functions' errors: FFI permission revoked after the library was loaded (ready()
 * checks it up front) becomes a DLPackError saying so; anything else passes unchanged. Out of line,
 * so the functions on the import and export paths stay small. */
function refused(error: unknown): unknown {
  if ((error as Error | null)?.name !== "NotCapable") return error;
  return new DLPackError(
    "library",
    `Deno's FFI permission was revoked after libdlpack was loaded: ${(error as Error).message}. ` +
      `Keep --allow-ffi (without a path) for as long as the library is used.`,
  );
}

/** Deno's descriptor of a permission (`--allow-<kind>=<target>`). */
function descriptorOf(kind: PermissionKind, target?: string): PermissionDescriptor {
  if (kind === "env") return { name: "env", variable: target };
  if (kind === "net") return { name: "net", host: target };
  return { name: kind, path: target };
}

/** The Deno implementation of {@link Runtime}. */
export function denoRuntime(): Runtime {
  // The global, as the local declarations above describe it (this runs only in Deno).
  const Deno = (globalThis as unknown as { readonly Deno: DenoNamespace }).Deno;
  // Captured now: the pointer functions every import and export calls must not be replaceable by a
  // caller afterwards (they are writable static methods). None of them uses `this`.
  const { create, of, value: pointerValueOf } = Deno.UnsafePointer;
  const { getArrayBuffer, getCString } = Deno.UnsafePointerView;
  const PointerViewCtor = Deno.UnsafePointerView;
  const { getBigInt64, getBigUint64 } = PointerViewCtor.prototype;
  // One pointer object made at load, which getArrayBuffer offsets: making a pointer object per
  // call costs more than the ArrayBuffer itself. Nothing is ever mapped below BASE.
  const BASE = 4096;
  let base: Pointer | null | undefined;
  let reads: MemoryReads | undefined;
  /** The scalar reads: numbers through libdlpack's `dlpk_load` (one fast FFI call, where each
   * `UnsafePointerView` read costs several times that), 64-bit integers over one pointer view of
   * BASE that each offsets (a view per read would cost a pointer object each), made on first use,
   * as making the pointer needs the FFI permission. perf(import+get+dispose) */
  const makeReads = (load: (address: number, kind: number) => number): MemoryReads => {
    let view: PointerView | undefined;
    const at = <T>(get: (this: PointerView, offset: number) => T) => (address: number): T => {
      try {
        return applyFn(get, view ??= new PointerViewCtor(base ??= create(BASE)!), [address - BASE]);
      } catch (error) {
        throw refused(error);
      }
    };
    const loads = (kind: number) => (address: number): number => load(address, kind);
    return Object.freeze({
      u8: loads(Load.u8),
      i8: loads(Load.i8),
      u16: loads(Load.u16),
      i16: loads(Load.i16),
      u32: loads(Load.u32),
      i32: loads(Load.i32),
      f32: loads(Load.f32),
      f64: loads(Load.f64),
      i64: at(getBigInt64),
      u64: at(getBigUint64),
    });
  };
  return {
    name: "deno",
    open<T extends SymbolTable>(path: string, table: T): OpenLibrary<T> {
      const defs: Record<string, ForeignFunction> = {};
      for (const [name, spec] of Object.entries(table)) {
        defs[name] = {
          ...(spec.symbol === undefined ? {} : { name: spec.symbol }),
          parameters: spec.args,
          result: spec.returns,
          optional: spec.optional ?? false,
        };
      }
      const lib = Deno.dlopen(path, defs);
      return {
        path,
        symbols: bindSymbols(lib.symbols, table),
        close: () => lib.close(),
      };
    },
    arrayBuffer(address: number, byteLength: number): ArrayBuffer {
      try {
        // A number is accepted (and avoids a BigInt per call); addresses are below 2^53.
        if (address >= BASE) {
          return getArrayBuffer(base ??= create(BASE)!, byteLength, address - BASE);
        }
        return getArrayBuffer(create(address)!, byteLength);
      } catch (error) {
        throw refused(error);
      }
    },
    reads(load: (address: number, kind: number) => number): MemoryReads {
      return reads ??= makeReads(load);
    },
    addressOf(view: ArrayBufferView): number {
      try {
        return NumberCtor(pointerValueOf(of(view)));
      } catch (error) {
        throw refused(error);
      }
    },
    pointerObjects: true,
    costlyOldToYoung: true,
    pointerValue(pointer: unknown): number | bigint | undefined {
      if (typeof pointer === "number" || typeof pointer === "bigint") return pointer;
      if (pointer === null) return 0;
      if (typeof pointer === "object") {
        try {
          return pointerValueOf(pointer as Pointer);
        } catch {
          return undefined;
        }
      }
      return undefined;
    },
    env(name: string): string | undefined {
      try {
        if (Deno.permissions.querySync({ name: "env", variable: name }).state !== "granted") return undefined;
        return Deno.env.get(name);
      } catch {
        return undefined;
      }
    },
    exists(path: string): boolean {
      try {
        Deno.statSync(path);
        return true;
      } catch {
        return false;
      }
    },
    unrefTimer(timer: unknown): void {
      Deno.unrefTimer(timer as number);
    },
    granted(kind: PermissionKind, target?: string): boolean {
      try {
        return Deno.permissions.querySync(descriptorOf(kind, target)).state === "granted";
      } catch {
        return true; // cannot tell (a descriptor this Deno does not know): the operation itself reports
      }
    },
    request(kind: PermissionKind, target?: string): boolean {
      const descriptor = descriptorOf(kind, target);
      try {
        const state = Deno.permissions.querySync(descriptor).state;
        if (state === "granted") return true;
        // Deno prompts on standard error and reads the answer from standard input; elsewhere a
        // request would only turn "not granted" into "denied" without asking anyone.
        if (state !== "prompt" || !Deno.stdin.isTerminal() || !Deno.stderr.isTerminal()) return false;
        return Deno.permissions.requestSync(descriptor).state === "granted";
      } catch {
        return true;
      }
    },
    mainModule(): string {
      const main = Deno.mainModule;
      return main.startsWith("file:") ? decodeURIComponent(new URL(main).pathname) : main;
    },
    embedded(): boolean {
      return false; // deno compile's embedded files are read and opened through the ordinary paths
    },
    makePrivateDir(parent?: string): string {
      // Deno's own temporary folder lookup needs no env permission (node:os tmpdir() reads TMPDIR).
      return Deno.makeTempDirSync({ dir: parent, prefix: ".dlpack-load-" });
    },
    gc(): boolean {
      const gc = (globalThis as { gc?: () => void }).gc;
      if (gc === undefined) return false;
      gc();
      return true;
    },
    runCommand(program: string, args: readonly string[]) {
      try {
        const out = new Deno.Command(program, { args: [...args], stdout: "piped", stderr: "piped", stdin: "null" })
          .outputSync();
        const text = new TextDecoder();
        return { code: out.code, stdout: text.decode(out.stdout), stderr: text.decode(out.stderr) };
      } catch {
        return undefined;
      }
    },
    cString(address: number): string {
      try {
        return getCString(create(address)!);
      } catch (error) {
        throw refused(error);
      }
    },
    // Deno gives Workers a WorkerGlobalScope; the main realm has none.
    mainThread: !("WorkerGlobalScope" in globalThis),
    unrefChannel(channel: BroadcastChannel): boolean {
      if (refChannel === undefined) return false;
      try {
        applyFn(refChannel, channel, [false]);
        return true;
      } catch {
        return false;
      }
    },
    os: Deno.build.os,
    arch: Deno.build.arch,
  };
}
