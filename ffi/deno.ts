/**
 * The Deno binding of the runtime boundary (`Deno.dlopen`, `Deno.UnsafePointerView`).
 * @module
 */
import { DLPackError } from "../src/facts/errors.ts";
import type { OpenLibrary, PermissionKind, Runtime, SymbolTable } from "./types.ts";
import { bindSymbols } from "./results.ts";

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

/** The Deno implementation of {@link Runtime}. */
export function denoRuntime(): Runtime {
  // Captured now: the pointer functions every import and export calls must not be replaceable by a
  // caller afterwards (they are writable static methods). None of them uses `this`.
  const { create, of, value: pointerValueOf } = Deno.UnsafePointer;
  const { getArrayBuffer, getCString } = Deno.UnsafePointerView;
  // One pointer object made at load, which getArrayBuffer offsets: making a pointer object per
  // call costs more than the ArrayBuffer itself. Nothing is ever mapped below BASE.
  const BASE = 4096;
  let base: Deno.PointerObject | null | undefined;
  return {
    name: "deno",
    open<T extends SymbolTable>(path: string, table: T): OpenLibrary<T> {
      const defs: Record<string, Deno.ForeignFunction> = {};
      for (const [name, spec] of Object.entries(table)) {
        defs[name] = {
          parameters: spec.args as Deno.NativeType[],
          result: spec.returns as Deno.NativeResultType,
          optional: spec.optional ?? false,
        };
      }
      const lib = Deno.dlopen(path, defs);
      return {
        path,
        symbols: bindSymbols(lib.symbols as Record<string, unknown>, table),
        close: () => lib.close(),
      };
    },
    arrayBuffer(address: number, byteLength: number): ArrayBuffer {
      try {
        // A number is accepted (and avoids a BigInt per call); addresses are below 2^53.
        if (address >= BASE) {
          return getArrayBuffer(base ??= create(BASE as unknown as bigint)!, byteLength, address - BASE);
        }
        return getArrayBuffer(create(address as unknown as bigint)!, byteLength);
      } catch (error) {
        throw refused(error);
      }
    },
    addressOf(view: ArrayBufferView): number {
      try {
        return NumberCtor(pointerValueOf(of(view as Uint8Array<ArrayBuffer>)));
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
          return pointerValueOf(pointer as Deno.PointerObject);
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
      const descriptor: Deno.PermissionDescriptor = kind === "env"
        ? { name: "env", variable: target }
        : kind === "net"
        ? { name: "net", host: target }
        : { name: kind, path: target };
      try {
        return Deno.permissions.querySync(descriptor).state === "granted";
      } catch {
        return true; // cannot tell (a descriptor this Deno does not know): the operation itself reports
      }
    },
    makePrivateDir(parent?: string): Promise<string> {
      // Deno's own temporary folder lookup needs no env permission (node:os tmpdir() reads TMPDIR).
      return Deno.makeTempDir({ dir: parent, prefix: ".dlpack-load-" });
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
        return getCString(create(address as unknown as bigint)!);
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
