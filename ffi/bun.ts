/**
 * The Bun binding of the runtime boundary (`bun:ffi`). Typed locally so `deno check` needs no Bun
 * type declarations.
 * @module
 */
import type { MemoryReads, OpenLibrary, Runtime, SymbolTable } from "./types.ts";
import { typedArrayBuffer } from "../src/facts/intrinsics.ts";
import { bindSymbols } from "./results.ts";

interface BunFFI {
  dlopen(
    path: string,
    defs: Record<string, { args: readonly string[]; returns: string; optional?: boolean }>,
  ): { symbols: Record<string, (...args: unknown[]) => unknown>; close(): void };
  toArrayBuffer(address: number, byteOffset: number, byteLength: number): ArrayBuffer;
  ptr(view: ArrayBufferView): number;
  /** Each takes an address and an optional byte offset. */
  read: MemoryReads;
  CString: new (address: number) => { toString(): string };
}

interface BunGlobal {
  gc(force: boolean): void;
  isMainThread: boolean;
  spawnSync(options: { cmd: string[]; stdout: "pipe"; stderr: "pipe"; stdin: "ignore" }): {
    exitCode: number | null;
    stdout: Uint8Array;
    stderr: Uint8Array;
  };
}

interface NodeProcess {
  env: Record<string, string | undefined>;
  argv: string[];
  platform: string;
  arch: string;
}

function bunRequire<T>(id: string): T {
  return (import.meta as unknown as { require(id: string): T }).require(id);
}

/** The Bun implementation of {@link Runtime}. */
export function bunRuntime(): Runtime {
  const ffi = bunRequire<BunFFI>("bun:ffi");
  const fs = bunRequire<{ existsSync(path: string): boolean; mkdtempSync(prefix: string): string }>("node:fs");
  const os = bunRequire<{ tmpdir(): string }>("node:os");
  const proc = (globalThis as unknown as { process: NodeProcess }).process;
  const bun = (globalThis as unknown as { Bun: BunGlobal }).Bun;
  // Captured now: the pointer functions every import and export calls must not be replaceable
  // by a caller afterwards (bun:ffi's exports are plain properties).
  const { toArrayBuffer, ptr, CString } = ffi;
  const { u8, i8, u16, i16, u32, i32, f32, f64, i64, u64 } = ffi.read;
  const reads: MemoryReads = Object.freeze({ u8, i8, u16, i16, u32, i32, f32, f64, i64, u64 });
  return {
    name: "bun",
    open<T extends SymbolTable>(path: string, table: T): OpenLibrary<T> {
      // bun:ffi binds a symbol by its own name only: each further binding of one (other parameter
      // types, or a binding of its own per JS type) comes from a handle of its own on the library.
      const defs: Record<string, { args: readonly string[]; returns: string }> = {};
      for (const [name, spec] of Object.entries(table)) {
        if (spec.symbol === undefined) defs[name] = { args: spec.args, returns: spec.returns };
      }
      const lib = ffi.dlopen(path, defs);
      const handles = [lib];
      const raw: Record<string, (...args: unknown[]) => unknown> = { ...lib.symbols };
      for (const [name, spec] of Object.entries(table)) {
        if (spec.symbol === undefined) continue;
        const alias = ffi.dlopen(path, { [spec.symbol]: { args: spec.args, returns: spec.returns } });
        handles.push(alias);
        raw[name] = alias.symbols[spec.symbol]!;
      }
      const close = () => {
        for (const handle of handles) handle.close();
      };
      return { path, symbols: bindSymbols(raw, table), close };
    },
    arrayBuffer(address: number, byteLength: number): ArrayBuffer {
      return toArrayBuffer(address, 0, byteLength);
    },
    // bun:ffi's reads are the engine's own loads, cheaper than any call.
    reads(): MemoryReads {
      return reads;
    },
    addressOf(view: ArrayBufferView): number {
      // Small arrays may move out of the GC heap the first time their buffer is touched; do it
      // before taking the address so the address stays valid.
      // The intrinsic getter: a replaced `buffer` getter would skip the move.
      typedArrayBuffer(view);
      return ptr(view);
    },
    pointerObjects: false,
    costlyOldToYoung: false,
    pointerValue(pointer: unknown): number | bigint | undefined {
      if (typeof pointer === "number" || typeof pointer === "bigint") return pointer;
      if (pointer === null) return 0;
      return undefined;
    },
    env(name: string): string | undefined {
      return proc.env[name];
    },
    exists(path: string): boolean {
      return fs.existsSync(path);
    },
    unrefTimer(timer: unknown): void {
      (timer as { unref?: () => void }).unref?.();
    },
    granted(): boolean {
      return true; // Bun has no permission system
    },
    request(): boolean {
      return true;
    },
    mainModule(): string {
      return proc.argv[1] ?? "";
    },
    embedded(path: string): boolean {
      // `bun build --compile` serves the files it embedded under this root (B:/~BUN/ on Windows).
      return path.startsWith("/$bunfs/") || /^[A-Za-z]:[\\/]~BUN[\\/]/.test(path);
    },
    makePrivateDir(parent?: string): string {
      // mkdtemp(3): a fresh name, created with mode 0700.
      return fs.mkdtempSync(`${parent ?? os.tmpdir()}/.dlpack-load-`);
    },
    gc(): boolean {
      bun.gc(true);
      return true;
    },
    runCommand(program: string, args: readonly string[]) {
      try {
        const out = bun.spawnSync({ cmd: [program, ...args], stdout: "pipe", stderr: "pipe", stdin: "ignore" });
        const text = new TextDecoder();
        return { code: out.exitCode ?? -1, stdout: text.decode(out.stdout), stderr: text.decode(out.stderr) };
      } catch {
        return undefined;
      }
    },
    cString(address: number): string {
      return `${new CString(address)}`;
    },
    mainThread: bun.isMainThread,
    unrefChannel(channel: BroadcastChannel): boolean {
      const unref = (channel as { unref?: () => void }).unref;
      if (typeof unref !== "function") return false;
      unref.call(channel);
      return true;
    },
    os: proc.platform === "win32" ? "windows" : proc.platform,
    arch: proc.arch === "x64" ? "x86_64" : proc.arch === "arm64" ? "aarch64" : proc.arch,
  };
}
