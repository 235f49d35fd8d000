/**
 * The neutral description of a native symbol table. Both runtime bindings translate the same
 * table, so the Deno and Bun paths cannot drift apart.
 * @module
 */

/**
 * A pointer object of Deno's FFI (`Deno.PointerObject`), read off the type of the global `Deno`
 * where Deno's declarations are loaded; where they are not (Bun, whose FFI hands out addresses as
 * numbers), there is no such object. So the module checks with and without Deno's types.
 */
export type PointerObject = typeof globalThis extends
  { readonly Deno: { readonly UnsafePointer: { value(pointer: infer P): unknown } } } ? NonNullable<P> : never;

/** Argument and result types the bindings understand. */
export type NativeType = "u8" | "i32" | "u32" | "f64" | "usize" | "buffer" | "pointer" | "void";

/** One foreign function. */
export interface SymbolSpec {
  readonly args: readonly NativeType[];
  readonly returns: NativeType;
  /** The library may lack it (older builds, optional features). */
  readonly optional?: boolean;
  /** The native function's name when the key is a second binding of it (other parameter types). */
  readonly symbol?: string;
}

/** A whole library's symbols. */
export type SymbolTable = Readonly<Record<string, SymbolSpec>>;

type ArgValue<T extends NativeType> = T extends "buffer" ? ArrayBufferView | null
  : T extends "usize" ? number | bigint
  // A pointer object of the runtime's FFI (Deno), null, or a number (Bun); the runtime checks it.
  : T extends "pointer" ? unknown
  : number;

type ResultValue<T extends NativeType> = T extends "void" ? void : number;

type ArgList<A extends readonly NativeType[]> = { [K in keyof A]: ArgValue<A[K]> };

/** The callable functions a table binds to. `usize` results come back as numbers. */
export type Bound<T extends SymbolTable> = {
  [K in keyof T]: (...args: ArgList<T[K]["args"]>) => ResultValue<T[K]["returns"]>;
};

/** An opened library: its functions and a way to close it. */
export interface OpenLibrary<T extends SymbolTable> {
  readonly path: string;
  readonly symbols: Bound<T>;
  close(): void;
}

/** The kinds of permission Deno asks for (`--allow-<kind>`). */
export type PermissionKind = "env" | "read" | "write" | "net" | "ffi";

/** Reads of one scalar of host memory in place, through the runtime's own pointer reads (nothing
 * is made over the memory): the caller guarantees the bytes at `address` are readable. Any
 * alignment; 64-bit integers come as bigints. */
export interface MemoryReads {
  u8(address: number): number;
  i8(address: number): number;
  u16(address: number): number;
  i16(address: number): number;
  u32(address: number): number;
  i32(address: number): number;
  f32(address: number): number;
  f64(address: number): number;
  i64(address: number): bigint;
  u64(address: number): bigint;
}

/** What each runtime binding provides; nothing outside ffi/ knows which runtime is running. */
export interface Runtime {
  readonly name: "deno" | "bun";
  open<T extends SymbolTable>(path: string, table: T): OpenLibrary<T>;
  /** A zero-copy ArrayBuffer over native memory. The caller guarantees the memory outlives it. */
  arrayBuffer(address: number, byteLength: number): ArrayBuffer;
  /** The scalar reads of host memory (made on first use: they may need the FFI permission), built
   * on the runtime's own pointer reads or, where those cost more, on `load` (libdlpack's
   * `dlpk_load`: the number at an address, its type a `Load` code). */
  reads(load: (address: number, kind: number) => number): MemoryReads;
  /** The address of a TypedArray's first byte (stable while the array is reachable). */
  addressOf(view: ArrayBufferView): number;
  /** Whether the runtime's FFI hands out addresses as pointer objects (Deno's `PointerObject`), which
   * a `"pointer"` parameter takes as they are; false where addresses are numbers (Bun). */
  readonly pointerObjects: boolean;
  /** Whether storing a newly made object into a long-lived one costs the engine a slow path (V8's
   * generational write barrier; perf(import+dispose)), so hot paths keep new objects in containers they
   * renew often; false where renewing a container costs more than it saves (JavaScriptCore). */
  readonly costlyOldToYoung: boolean;
  /** Normalises a pointer value of this runtime (or a number/bigint) to a number or bigint. */
  pointerValue(pointer: unknown): number | bigint | undefined;
  /** Reads an environment variable, or undefined when unset or not permitted. */
  env(name: string): string | undefined;
  /** Whether a file exists (false when reading is not permitted). */
  exists(path: string): boolean;
  /** Lets a timer run without keeping the process alive. */
  unrefTimer(timer: unknown): void;
  /** Forces a full garbage collection when the runtime allows it (tests, leak checks). */
  gc(): boolean;
  /** Runs a program to completion; undefined when it cannot be started (missing, or not permitted). */
  runCommand(program: string, args: readonly string[]): { code: number; stdout: string; stderr: string } | undefined;
  /** Reads a NUL-terminated UTF-8 string at `address`. */
  cString(address: number): string;
  /** Whether this realm runs on the process's main thread (not in a Worker). */
  readonly mainThread: boolean;
  /** Lets a channel's listener run without keeping the process alive; false where the runtime
   * cannot (the caller then closes the channel when it is not needed). */
  unrefChannel(channel: BroadcastChannel): boolean;
  /** Whether the runtime grants a permission without asking (Deno's --allow-* flags; always true
   * in Bun, which has none). `target`: the variable, path or host it is needed for; for "ffi"
   * without a target, whether FFI is allowed unscoped. Never prompts. */
  granted(kind: PermissionKind, target?: string): boolean;
  /** Like {@link granted}, but where Deno can prompt (its standard input and error are a terminal,
   * and prompts are not turned off) asks the user through Deno's own prompt. Always true in Bun. */
  request(kind: PermissionKind, target?: string): boolean;
  /** The program's entry as a path (or a URL when it is no file), for a run line in an error. */
  mainModule(): string;
  /** Whether `path` lies in the file system embedded in a single executable (Bun's `/$bunfs/`),
   * which only the runtime's own `readFileSync` and `dlopen` understand. */
  embedded(path: string): boolean;
  /** Creates a fresh folder only this user can enter (mode 0700 where modes exist) inside `parent`,
   * or inside the system's temporary folder, and returns its path. */
  makePrivateDir(parent?: string): string;
  /** OS and CPU names as Deno spells them ("linux", "darwin", "windows"; "x86_64", "aarch64"). */
  readonly os: string;
  readonly arch: string;
}
