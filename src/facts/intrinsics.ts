/**
 * Every built-in the library's safety depends on, captured when this module loads: the
 * `%TypedArray%` getters and brand check, the ArrayBuffer / SharedArrayBuffer getters and
 * `transfer`, the collection methods behind the library's own tables, and the global functions it
 * schedules work with. Callers may replace prototypes, define own properties that shadow getters,
 * wrap values in Proxies or install setters on `Object.prototype` afterwards: nothing here consults
 * any of that. Getters run through the captured `Reflect.apply` (as fast as a bound `call` in V8,
 * faster in JavaScriptCore), never through the caller-replaceable `Function.prototype.call`.
 * @module
 */

const ReflectApply = Reflect.apply;
const ObjectGetOwnPropertyDescriptor = Object.getOwnPropertyDescriptor;
const ObjectDefineProperty = Object.defineProperty;
const ArrayFrom = Array.from;
const ArrayCtor = Array;
/** An arguments list for `Reflect.apply`: an own element of a module-private literal, so no
 * prototype is read (not frozen: JavaScriptCore takes a slow path for frozen argument lists). */
const ZERO_ARGS: readonly [number] = [0];

function getterOf(proto: object, key: PropertyKey): ((this: unknown) => unknown) | undefined {
  const d = ObjectGetOwnPropertyDescriptor(proto, key);
  return d === undefined ? undefined : d.get;
}

// ---------------------------------------------------------------------------------------------
// Plain functions and constants

/** `Array.isArray` (true for a Proxy around an array too: read such values once, then copy). */
export const isArray: (value: unknown) => value is unknown[] = Array.isArray;
/** `Object.getPrototypeOf`. */
const getPrototypeOf: (value: object) => object | null = Object.getPrototypeOf;
/** `Object.freeze`. */
export const freeze: <T>(value: T) => Readonly<T> = Object.freeze;
/** `Object.isExtensible`. */
export const isExtensible: (value: object) => boolean = Object.isExtensible;
/** `Object`, as found at load: `ObjectCtor(x)` is `x` for an object and a fresh wrapper for
 * anything else, so `#field in ObjectCtor(x)` is a brand check that never throws (the JIT reduces
 * the call to nothing for an object it knows). */
export const ObjectCtor: ObjectConstructor = Object;
const FunctionHasInstance = Function.prototype[Symbol.hasInstance];
const HasInstance: typeof Symbol.hasInstance = Symbol.hasInstance;

/** Fixes `x instanceof ctor` to the ordinary prototype-chain test for good: the library relies on
 * it to tell its own objects (and impostors of them) from object literals, and no caller may then
 * define a `Symbol.hasInstance` of their own on `ctor`. */
export function pinInstanceof(ctor: object): void {
  ObjectDefineProperty(ctor, HasInstance, {
    value: FunctionHasInstance,
    writable: false,
    enumerable: false,
    configurable: false,
  });
}
/** `JSON.stringify`, for messages. */
export const quote: (value: string) => string = JSON.stringify;
/** `BigInt`, as found at load. */
export const toBigInt: (value: number) => bigint = BigInt;
/** Calls `fn` with `thisArg` and one argument through the captured `Reflect.apply` (a caller's
 * method read once, called without reading it again). */
export function callWith(fn: (...args: never[]) => unknown, thisArg: unknown, arg: unknown): unknown {
  return ReflectApply(fn, thisArg, [arg]);
}
/** `Math` functions. */
export const { floor, ceil, abs, min, max, trunc, imul } = Math;
/** Constructors the library builds its own buffers with. */
export const ArrayBufferCtor: ArrayBufferConstructor = ArrayBuffer;
export const Float64ArrayCtor: Float64ArrayConstructor = Float64Array;
export const Int32ArrayCtor: Int32ArrayConstructor = Int32Array;
export const Uint8ArrayCtor: Uint8ArrayConstructor = Uint8Array;
export const Uint32ArrayCtor: Uint32ArrayConstructor = Uint32Array;
export const BigInt64ArrayCtor: BigInt64ArrayConstructor = BigInt64Array;

/** Largest integer a JS number holds exactly. */
const MAX_SAFE = 2 ** 53 - 1;

/** `Number.isSafeInteger` as operators: nothing a caller can replace, and it inlines. */
export function isSafeInt(value: unknown): value is number {
  return typeof value === "number" && value % 1 === 0 && value <= MAX_SAFE && value >= -MAX_SAFE;
}

/** A non-negative safe integer. */
export function isCount(value: unknown): value is number {
  return typeof value === "number" && value % 1 === 0 && value <= MAX_SAFE && value >= 0;
}

/** `Number.isInteger` as operators (finite and whole; any magnitude). */
export function isInteger(value: unknown): value is number {
  return typeof value === "number" && value % 1 === 0;
}

/**
 * A fresh array of `n` own elements (filled with 0). Index writes into own elements never reach a
 * setter a caller installed on `Array.prototype` or `Object.prototype`, which writes into holes
 * (`new Array(n)`, `push`) do. Ranks up to 4 come from literals (the import path); longer ones from
 * `Array.from` over a prototype-less array-like, which defines each element directly.
 */
export function slots(n: number): number[] {
  // The element is a variable, not a constant: JavaScriptCore makes literals of constants
  // copy-on-write, and the first write then copies the array (three times slower).
  const z = zero();
  switch (n) {
    case 0:
      return [];
    case 1:
      return [z];
    case 2:
      return [z, z];
    case 3:
      return [z, z, z];
    case 4:
      return [z, z, z, z];
  }
  return ReflectApply(ArrayFrom, ArrayCtor, [{ __proto__: null, length: n }, zero]) as number[];
}

/** `n` numbers read from `source` starting at `at` (the caller knows `source` holds them), as a
 * fresh array of own elements (see {@link slots}); ranks up to 4 are built directly from the reads. */
export function numbersFrom(source: Float64Array, at: number, n: number): number[] {
  switch (n) {
    case 0:
      return [];
    case 1:
      return [source[at]!];
    case 2:
      return [source[at]!, source[at + 1]!];
    case 3:
      return [source[at]!, source[at + 1]!, source[at + 2]!];
    case 4:
      return [source[at]!, source[at + 1]!, source[at + 2]!, source[at + 3]!];
  }
  const out = slots(n);
  for (let i = 0; i < n; i++) out[i] = source[at + i]!;
  return out;
}

function zero(): number {
  return 0;
}

/** Like {@link slots}, for arrays of any element type (filled with undefined). */
export function objectSlots<T>(n: number): (T | undefined)[] {
  return ReflectApply(ArrayFrom, ArrayCtor, [{ __proto__: null, length: n }]) as (T | undefined)[];
}

/** A copy of the library's own number array (no `slice`: its species and the method are replaceable). */
export function copyNumbers(source: readonly number[]): number[] {
  const n = source.length;
  const out = slots(n);
  for (let i = 0; i < n; i++) out[i] = source[i]!;
  return out;
}

// ---------------------------------------------------------------------------------------------
// TypedArrays

/** A TypedArray made long enough to hold an element at each index of `K` (a record's fields, a
 * counter at 0): reading one of those is an element, never undefined. */
export type Elements<A extends { readonly [index: number]: number | bigint }, K extends number> =
  & A
  & { [I in K]: A[number] };

const TypedArrayPrototype = getPrototypeOf(Uint8Array.prototype) as object;
const ReflectGet = Reflect.get;
const FunctionPrototypeCall = Function.prototype.call;
const FunctionPrototypeBind = Function.prototype.bind;
// perf(import+dispose, export): JavaScriptCore calls a getter fastest through Reflect.get on an
// object of our own that holds it (a third of Reflect.apply's or a bound call's cost); V8 fastest
// through a bound Function.prototype.call. Either way nothing is looked up on a prototype a caller
// can reach.
const JSC = typeof (globalThis as { Bun?: unknown }).Bun !== "undefined";

/** A function reading `getter` with any `this`, through nothing a caller can replace. */
function reader<T>(proto: object, key: PropertyKey): (target: unknown) => T {
  const getter = getterOf(proto, key);
  if (getter === undefined) throw new Error(`this runtime lacks the ${String(key)} getter`);
  if (JSC) {
    const holder = Object.freeze(Object.create(null, { value: { get: getter } }));
    return (target) => ReflectGet(holder, "value", target) as T;
  }
  return ReflectApply(FunctionPrototypeBind, FunctionPrototypeCall, [getter]) as (target: unknown) => T;
}

const taTag = reader<string | undefined>(TypedArrayPrototype, Symbol.toStringTag);
const taLength = reader<number>(TypedArrayPrototype, "length");
const taByteLength = reader<number>(TypedArrayPrototype, "byteLength");
const taByteOffset = reader<number>(TypedArrayPrototype, "byteOffset");
const taBuffer = reader<ArrayBufferLike>(TypedArrayPrototype, "buffer");

/**
 * The brand check of TypedArrays: the constructor name of the engine's own record
 * ("Float32Array"), or undefined for anything that is not a TypedArray (a Proxy around one, a
 * DataView, an object with a forged prototype). Own properties and replaced prototypes cannot
 * change it, and it never throws.
 */
export function typedArrayTag(value: unknown): string | undefined {
  return taTag(value);
}

const taSet = (TypedArrayPrototype as { set(source: ArrayLike<number>, offset?: number): void }).set;

/** Copies `source` into `target` from element `offset` (`TypedArray.prototype.set` as it was at
 * load: a caller who replaces it later changes nothing here). */
export function setElements(target: Uint8Array, source: Uint8Array, offset = 0): void {
  ReflectApply(taSet, target, [source, offset]);
}

/** The true element count (only after {@link typedArrayTag} said it is a TypedArray). */
export function typedArrayLength(array: ArrayBufferView): number {
  return taLength(array);
}

/** The true byte length (0 once the buffer is detached). */
export function typedArrayByteLength(array: ArrayBufferView): number {
  return taByteLength(array);
}

/** The true byte offset into its buffer. */
export function typedArrayByteOffset(array: ArrayBufferView): number {
  return taByteOffset(array);
}

/** The true buffer. In Bun this also moves a small array's storage out of the GC heap for good,
 * which must happen before its address is taken. */
export function typedArrayBuffer(array: ArrayBufferView): ArrayBufferLike {
  return taBuffer(array);
}

// ---------------------------------------------------------------------------------------------
// ArrayBuffer and SharedArrayBuffer

const ArrayBufferPrototype = ArrayBuffer.prototype;
const abByteLength = reader<number>(ArrayBufferPrototype, "byteLength");
const abDetached = getterOf(ArrayBufferPrototype, "detached") === undefined
  ? undefined
  : reader<boolean>(ArrayBufferPrototype, "detached");
const abResizable = getterOf(ArrayBufferPrototype, "resizable") === undefined
  ? undefined
  : reader<boolean>(ArrayBufferPrototype, "resizable");
const abTransfer = (ArrayBufferPrototype as { transfer?: (length?: number) => ArrayBuffer }).transfer;
const SharedPrototype = typeof SharedArrayBuffer === "function" ? SharedArrayBuffer.prototype : undefined;
const sabGrowable = SharedPrototype === undefined || getterOf(SharedPrototype, "growable") === undefined
  ? undefined
  : reader<boolean>(SharedPrototype, "growable");
const sabByteLength = SharedPrototype === undefined ? undefined : reader<number>(SharedPrototype, "byteLength");

/** {@link bufferState} bit: a SharedArrayBuffer. */
export const SHARED = 1;
/** {@link bufferState} bit: a resizable ArrayBuffer or growable SharedArrayBuffer. */
export const RESIZABLE = 2;

function sharedState(buffer: ArrayBufferLike): number {
  // Throws for anything that is not a SharedArrayBuffer, like the ArrayBuffer getters for those.
  sabByteLength!(buffer);
  return SHARED | (sabGrowable !== undefined && sabGrowable(buffer) === true ? RESIZABLE : 0);
}

/**
 * What a TypedArray's true buffer is, from the engine's records: {@link SHARED} and
 * {@link RESIZABLE} bits (detachment is {@link isDetached}'s). The prototype only picks which
 * getter to try first; the getters' own brand checks decide.
 */
export function bufferState(buffer: ArrayBufferLike): number {
  if (SharedPrototype !== undefined && getPrototypeOf(buffer) === SharedPrototype) {
    try {
      return sharedState(buffer);
    } catch {
      // A forged prototype: it is an ArrayBuffer after all.
    }
  }
  try {
    return abResizable !== undefined && abResizable(buffer) === true ? RESIZABLE : 0;
  } catch {
    return sharedState(buffer);
  }
}

/** Whether an ArrayBuffer is detached (transferred away, or detached on dispose). */
export function isDetached(buffer: ArrayBuffer): boolean {
  if (abDetached !== undefined) return abDetached(buffer) === true;
  // Runtimes without the getter: a detached buffer reports length 0 (and so does an empty one,
  // which holds nothing to protect).
  return abByteLength(buffer) === 0;
}

/** Detaches an ArrayBuffer the library made: every TypedArray over it reads length 0 afterwards.
 * Into an empty buffer (`transfer(0)`): a same-length `transfer()` of memory the engine does not
 * own copies it into a buffer of the engine's in Bun (350 us for 1 MiB), and costs Deno a new
 * external buffer (250-450 ns against 0-50). */
export const detach: (buffer: ArrayBuffer) => void = abTransfer !== undefined
  ? (buffer) => {
    ReflectApply(abTransfer, buffer, ZERO_ARGS);
  }
  : () => {
    throw new Error("this runtime lacks ArrayBuffer.prototype.transfer");
  };

const TO_EMPTY = [0];

/**
 * Tells the engine's collector that `bytes` more of memory outside its heap is kept by objects it
 * may collect, by making an ArrayBuffer of that size and at once moving it into an empty one (which
 * frees its memory): both engines count what ArrayBuffers allocate toward their next collection,
 * and JS has no more direct way to say it without flags. Never throws.
 */
export function hintExternalMemory(bytes: number): void {
  if (abTransfer === undefined) return;
  try {
    ReflectApply(abTransfer, new ArrayBufferCtor(bytes), TO_EMPTY);
  } catch {
    // Out of memory or stack: the hint is only a hint.
  }
}

// ---------------------------------------------------------------------------------------------
// The library's own collections: each instance carries the original methods as own properties,
// so replacing Map.prototype.set (or any other) after load changes nothing here.

function methods(proto: object, names: readonly string[], getters: readonly string[]): PropertyDescriptorMap {
  // Prototype-less descriptors: defining them never reads a "get" or "value" off Object.prototype.
  const out: PropertyDescriptorMap = { __proto__: null } as unknown as PropertyDescriptorMap;
  for (let i = 0; i < names.length; i++) {
    const name = names[i]!;
    const d = ObjectGetOwnPropertyDescriptor(proto, name)!;
    out[name] = {
      __proto__: null,
      value: d.value,
      writable: false,
      enumerable: false,
      configurable: false,
    } as PropertyDescriptor;
  }
  for (let i = 0; i < getters.length; i++) {
    const name = getters[i]!;
    const d = ObjectGetOwnPropertyDescriptor(proto, name)!;
    out[name] = { __proto__: null, get: d.get, enumerable: false, configurable: false } as PropertyDescriptor;
  }
  return out;
}

const ObjectDefineProperties = Object.defineProperties;
const WEAK_MAP = methods(WeakMap.prototype, ["get", "set", "has", "delete"], []);
const SET = methods(Set.prototype, ["add", "has", "delete"], ["size"]);
const REGISTRY = methods(FinalizationRegistry.prototype, ["register", "unregister"], []);
const WeakMapCtor = WeakMap;
const SetCtor = Set;
const RegistryCtor = FinalizationRegistry;

/** A WeakMap whose methods are the ones captured at load. */
export function newWeakMap<K extends WeakKey, V>(): WeakMap<K, V> {
  return ObjectDefineProperties(new WeakMapCtor<K, V>(), WEAK_MAP);
}

/** A Set whose methods are the ones captured at load. */
export function newSet<T>(values?: readonly T[]): Set<T> {
  const set = ObjectDefineProperties(new SetCtor<T>(), SET);
  if (values !== undefined) { for (let i = 0; i < values.length; i++) set.add(values[i]!); }
  return set;
}

/** A FinalizationRegistry whose register/unregister are the ones captured at load. */
export function newRegistry<T>(cleanup: (held: T) => void): FinalizationRegistry<T> {
  return ObjectDefineProperties(new RegistryCtor<T>(cleanup), REGISTRY);
}

// ---------------------------------------------------------------------------------------------
// Scheduling

const globals = globalThis as unknown as {
  queueMicrotask(callback: () => void): void;
  setInterval(callback: () => void, ms: number): unknown;
  clearInterval(timer: unknown): void;
  setTimeout(callback: () => void, ms: number): unknown;
};
const queueMicrotaskFn = globals.queueMicrotask;
const setIntervalFn = globals.setInterval;
const clearIntervalFn = globals.clearInterval;
const setTimeoutFn = globals.setTimeout;

/** `queueMicrotask`, as found at load. */
export function enqueueMicrotask(callback: () => void): void {
  ReflectApply(queueMicrotaskFn, globalThis, [callback]);
}

/** `setInterval`, as found at load. */
export function startInterval(callback: () => void, ms: number): unknown {
  return ReflectApply(setIntervalFn, globalThis, [callback, ms]);
}

/** `setTimeout`, as found at load. */
export function startTimeout(callback: () => void, ms: number): unknown {
  return ReflectApply(setTimeoutFn, globalThis, [callback, ms]);
}

/** `clearInterval`, as found at load. */
export function stopInterval(timer: unknown): void {
  ReflectApply(clearIntervalFn, globalThis, [timer]);
}
