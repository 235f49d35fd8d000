/**
 * The embedded CPython: loads libpython globally (through libdlpack, since Deno and Bun open
 * libraries RTLD_LOCAL), initializes it once or reuses an interpreter another bridge started, and
 * holds the GIL around every call. `PyObject` handles hold one reference each.
 * @module
 */
import { brandPythonObject } from "../facts/brands.ts";
import { core, openLibrary, runtime } from "../../ffi/mod.ts";
import { type PythonSymbols, pythonSymbols } from "../../ffi/python_symbols.ts";
import type { Bound, PointerObject } from "../../ffi/types.ts";
import { DLPackError, shown as shownValue } from "../facts/errors.ts";
import { ObjectCheck, PythonStatus } from "../facts/abi.ts";
import { LazyBackstop } from "../native/backstop.ts";
import { toAddress } from "../native/address.ts";
import { callWith, isArray, isSafeInt, toBigInt, typedArrayLength } from "../facts/intrinsics.ts";
import { discoverPython, type PythonInstall } from "./discover.ts";
import { HELPER_SOURCE } from "./helper_source.ts";

const Py_file_input = 257;
const Py_eval_input = 258;

/** Values `call`, `set` and friends convert to Python (arrays become tuples). */
export type PyArg =
  | number
  | bigint
  | string
  | boolean
  | null
  | undefined
  | PyObject
  | { readonly handle: bigint | number | PointerObject }
  | readonly PyArg[];

/** Per-process bridge state: one interpreter, one `dlpack_ts` helper module. */
export interface BridgeState {
  readonly capi: Bound<PythonSymbols>;
  readonly install: PythonInstall;
  readonly none: number;
  readonly interfaceJson: number;
  readonly toJson: number;
  readonly initializedHere: boolean;
}

let state: BridgeState | undefined;
const encoder = new TextEncoder();
// Captured at load, like every built-in whose answer sizes memory a native call reads or writes.
const encode = TextEncoder.prototype.encode;
const parseJson = JSON.parse;
const objectKeys = Object.keys;
const ERROR_TEXT_BYTES = 4096;
const errorText = new Uint8Array(ERROR_TEXT_BYTES);

/** UTF-8 bytes of a string and their true count (never a replaceable `length` getter: the count
 * tells C how many bytes to read). */
function utf8(text: string): { bytes: Uint8Array<ArrayBuffer>; length: number } {
  const bytes = callWith(encode as never, encoder, text) as Uint8Array<ArrayBuffer>;
  return { bytes, length: typedArrayLength(bytes) };
}

/** A NUL-terminated UTF-8 copy of a string, for C. */
function cString(text: string): Uint8Array<ArrayBuffer> {
  const { bytes, length } = utf8(text);
  const out = new Uint8Array(length + 1);
  for (let i = 0; i < length; i++) out[i] = bytes[i]!;
  return out;
}

/** The pending Python exception as a DLPackError ("python"), cleared. */
export function pythonError(context: string): DLPackError {
  const n = core().dlpk_py_take_error(errorText, ERROR_TEXT_BYTES);
  const text = n < 0 ? "failed without setting an exception" : new TextDecoder().decode(errorText.subarray(0, n));
  return new DLPackError("python", `${context}: ${text}`);
}

/** Describes a caller's value for an error message. */
export function shown(value: unknown): string {
  return value === undefined ? "undefined" : shownValue(value);
}

/** Checks a string argument that goes to C as a NUL-terminated string (a NUL would cut it short
 * silently: `get("a\0b")` would read attribute "a"). */
function textArgument(value: unknown, what: string): string {
  if (typeof value !== "string") throw new DLPackError("argument", `${what} must be a string, got ${shown(value)}`);
  if (value.includes("\0")) throw new DLPackError("argument", `${what} must not contain a NUL character`);
  return value;
}

/** Whether this thread's JS holds a GIL burst (see {@link holdGil}). */
let bursting = false;
const enqueueMicrotask = queueMicrotask;

/**
 * Keeps the GIL from this bridge call to the end of the current synchronous run of JS (a
 * microtask ends it): the calls in between nest in it instead of taking and dropping the GIL each
 * time (about 0.1 us per call). Python threads and other JS threads that need the GIL wait until
 * this thread's JS yields (an `await`, the end of a task); a thread that exits in a burst (a
 * terminated Worker) lets go of it natively.
 */
export function holdGil(): void {
  if (bursting) return;
  if (core().dlpk_py_burst() !== 1) return;
  bursting = true;
  enqueueMicrotask(endBurst);
}

function endBurst(): void {
  bursting = false;
  core().dlpk_py_burst_end();
}

/** Runs `fn` holding the GIL. */
export function withGil<T>(s: { readonly capi: Bound<PythonSymbols> }, fn: () => T): T {
  holdGil();
  const gil = s.capi.PyGILState_Ensure();
  try {
    return fn();
  } finally {
    s.capi.PyGILState_Release(gil);
  }
}

/** Throws the pending exception when a C API call returned NULL. */
export function check(result: number, context: string): number {
  if (result === 0) throw pythonError(context);
  return result;
}

function start(library: string | undefined): BridgeState {
  const install = discoverPython(library);
  const lib = core();
  if (lib.dlpk_py_load(cString(install.library)) !== 0) {
    const n = lib.dlpk_py_load_error(errorText, ERROR_TEXT_BYTES);
    const reason = new TextDecoder().decode(errorText.subarray(0, n));
    throw new DLPackError("python", `could not load ${install.library} (found through ${install.source}): ${reason}`);
  }
  const capi = openLibrary(install.library, pythonSymbols).symbols;
  let initializedHere = false;
  if (capi.Py_IsInitialized() === 0) {
    capi.Py_InitializeEx(0); // 0: leave signal handling to the JS runtime
    capi.PyEval_SaveThread(); // release the GIL; every call takes it with PyGILState_Ensure
    initializedHere = true;
  }
  // A lasting thread state for this thread: without one (an interpreter started on another thread,
  // as in a Worker or a second isolate), each PyGILState_Release would drop the thread state and
  // any exception pending between two calls.
  lib.dlpk_py_attach_thread();
  const partial = { capi, install, none: lib.dlpk_py_none(), initializedHere };
  return withGil(partial, (): BridgeState => {
    const bootstrap = [
      "import sys as _s, types as _t",
      "if 'dlpack_ts' not in _s.modules:",
      "    _m = _t.ModuleType('dlpack_ts')",
      `    exec(${JSON.stringify(HELPER_SOURCE)}, _m.__dict__)`,
      "    _s.modules['dlpack_ts'] = _m",
    ].join("\n");
    // A private globals dict, so the bootstrap's names do not land in __main__ (CPython adds
    // __builtins__ to it).
    const scratch = check(capi.PyDict_New(), "dict");
    const ran = capi.PyRun_StringFlags(cString(bootstrap), Py_file_input, scratch, scratch, 0);
    capi.Py_DecRef(scratch);
    capi.Py_DecRef(check(ran, "starting the dlpack_ts helper module"));
    const module = check(capi.PyImport_ImportModule(cString("dlpack_ts")), "import dlpack_ts");
    const attr = (name: string) => check(capi.PyObject_GetAttrString(module, cString(name)), name);
    const s: BridgeState = {
      ...partial,
      interfaceJson: attr("_interface_json"),
      toJson: attr("_to_json"),
    };
    // DLPackTensor (a type written in C) and the natives, on the helper module.
    if (lib.dlpk_py_install(module) !== 0) throw pythonError("installing dlpack_ts");
    const extend = attr("_extend_path");
    const args = toPythonTuple(s, [install.path, install.executable ?? null]);
    capi.Py_DecRef(check(capi.PyObject_Call(extend, args, 0), "dlpack_ts._extend_path"));
    capi.Py_DecRef(args);
    capi.Py_DecRef(extend);
    capi.Py_DecRef(module);
    return s;
  });
}

/** The bridge state, or an error saying `openPython()` comes first. */
export function bridge(): BridgeState {
  if (state === undefined) throw new DLPackError("python", "no Python bridge is open: call openPython() first");
  return state;
}

/** How deep `call`/`set` arguments may nest (a deeper array is most likely a cycle). */
const MAX_DEPTH = 256;

/** A new reference to the Python value of `value`. */
function toPython(s: BridgeState, value: PyArg, depth = 0): number {
  const c = s.capi;
  if (value === null || value === undefined) {
    c.Py_IncRef(s.none);
    return s.none;
  }
  if (isPyObject(value)) {
    const h = handleOf(value);
    c.Py_IncRef(h);
    return h;
  }
  switch (typeof value) {
    case "boolean":
      return c.PyBool_FromLong(value ? 1 : 0);
    case "number":
      return check(
        // Integral numbers become ints (shapes, indices); -0 stays a float to keep its sign.
        isSafeInt(value) && !(value === 0 && 1 / value < 0) ? c.PyLong_FromDouble(value) : c.PyFloat_FromDouble(value),
        "number",
      );
    case "bigint":
      return check(c.PyLong_FromString(cString(`${value}`), 0, 10), "int");
    case "string": {
      const { bytes, length } = utf8(value);
      return check(c.PyUnicode_FromStringAndSize(length === 0 ? new Uint8Array(1) : bytes, length), "str");
    }
  }
  if (isArray(value)) {
    if (depth >= MAX_DEPTH) {
      throw new DLPackError("argument", `arrays passed to Python nest more than ${MAX_DEPTH} deep (a cycle?)`);
    }
    return toPythonTuple(s, value as readonly PyArg[], depth + 1);
  }
  if (typeof value === "object" && "handle" in value) {
    const h = foreignHandle(value, "a { handle } argument");
    c.Py_IncRef(h);
    return h;
  }
  throw new DLPackError(
    "argument",
    `cannot pass ${
      shown(value)
    } to Python (numbers, bigints, strings, booleans, null, arrays, PyObjects and { handle } objects can be passed)`,
  );
}

/** The `PyObject*` of a `{ handle }` object of another bridge: read once, checked to be an address. */
export function foreignHandle(value: unknown, what: string): number {
  if (value instanceof PyObject) {
    // PyObject.prototype with no PyObject behind it (Object.create, a replaced prototype).
    throw new DLPackError(
      "argument",
      `${what} is not a PyObject made by the bridge, only something inheriting from one`,
    );
  }
  if (typeof value !== "object" || value === null) {
    throw new DLPackError("argument", `${what} must be a PyObject or a { handle } object, got ${shown(value)}`);
  }
  const raw = (value as { handle?: unknown }).handle;
  if (raw === undefined || raw === null) {
    throw new DLPackError(
      "argument",
      `${what} must be a PyObject or a { handle } object, got ${
        isArray(value) ? shown(value) : "an object without a handle"
      }`,
    );
  }
  let h: number;
  try {
    h = toAddress(raw, `${what}'s handle`);
  } catch (error) {
    // Not an address at all: the argument is wrong, whatever code the address check uses.
    if (error instanceof DLPackError) throw new DLPackError("argument", error.message);
    throw error;
  }
  if (h === 0) throw new DLPackError("argument", `${what}'s handle must not be NULL`);
  // Checked natively before anything dereferences it: the header, the type and its metatypes must
  // lie in readable memory (the mappings table the imports use).
  const checked = core().dlpk_py_check_object(h);
  if (checked !== 0) throw foreignRefusal(checked, h, what);
  return h;
}

/** The refusal of a `{ handle }` that is not a readable Python object. */
function foreignRefusal(checked: number, h: number, what: string): DLPackError {
  if (checked === PythonStatus.notLoaded) {
    return new DLPackError("python", "no Python bridge is open: call openPython() first");
  }
  const part = checked === ObjectCheck.header
    ? "its object header"
    : checked === ObjectCheck.typeObject
    ? "its type object"
    : checked === ObjectCheck.metatype
    ? "the type of its type"
    : "the handle";
  return new DLPackError(
    "argument",
    `${what}'s handle 0x${h.toString(16)} is not a Python object: ${part} is not in readable memory`,
  );
}

/** A new tuple of converted values. */
export function toPythonTuple(s: BridgeState, values: readonly PyArg[], depth = 0): number {
  // One read of the length: a Proxy must not make the loop run past the tuple.
  const n = values.length;
  const tuple = check(s.capi.PyTuple_New(n), "tuple");
  for (let i = 0; i < n; i++) {
    let item: number;
    try {
      item = toPython(s, values[i], depth);
    } catch (error) {
      s.capi.Py_DecRef(tuple);
      throw error;
    }
    s.capi.PyTuple_SetItem(tuple, i, item); // steals `item`
  }
  return tuple;
}

/** Whether `value` is a real PyObject (a brand check: a faked prototype does not pass). */
export let isPyObject: (value: unknown) => value is PyObject;
/** Whether `value` is a real Python handle. */
export let isPython: (value: unknown) => value is Python;
// The internal accessors: the public getters (`handleNumber`, `python`, `state`, `closed`,
// `disposed`) live on prototypes a caller can replace, so the library never reads them itself.
/** @internal A real PyObject's handle, checked alive and its bridge open. */
export let handleOf: (obj: PyObject) => number;
/** @internal The bridge a real PyObject belongs to. */
export let pythonOf: (obj: PyObject) => Python;
/** @internal A real Python handle's state, checked open. */
export let stateOf: (py: Python) => BridgeState;
let closedOf: (py: Python) => boolean;
let disposedOf: (obj: PyObject) => boolean;

/** Lets this package make PyObject and Python instances; the constructors refuse everyone else. */
export const INTERNAL: unique symbol = Symbol("dlpack-ts internal");

/** Drops the reference of PyObjects collected without `dispose()` (a backstop). */
const registry = new LazyBackstop<number>(
  (handle) => core().dlpk_py_decref(handle),
  (holder) => !disposedOf(holder as PyObject),
  // What a reference keeps alive is Python's to count.
  0,
);

/** A Python object: one reference, released by `dispose()` (or, as a backstop, by GC). */
export class PyObject {
  #handle: number;
  #py: Python;
  #slot: number;

  /** @ignore (library-internal) Takes over a new reference (only the bridge makes these). */
  constructor(handle: number, py: Python, key: typeof INTERNAL) {
    if (key !== INTERNAL) {
      throw new DLPackError("argument", "PyObjects are made by the Python bridge (py.eval, py.import, obj.get, ...)");
    }
    this.#handle = handle;
    this.#py = py;
    brandPythonObject(this);
    // Last: once the backstop holds the object nothing here may throw, or the caller, which drops
    // the reference of an object it could not make, and the backstop would both release it.
    this.#slot = registry.add(this, handle);
  }

  /** Whether `dispose()` ran. */
  get disposed(): boolean {
    return this.#handle === 0;
  }

  /** The `PyObject*` (pass `{ handle }` objects of other bridges the same way). */
  get handle(): bigint {
    return toBigInt(this.#live());
  }

  /** @ignore (library-internal) The handle as a number, checked alive. */
  get handleNumber(): number {
    return this.#live();
  }

  /** The bridge this object belongs to. */
  get python(): Python {
    return this.#py;
  }

  /** `getattr(obj, name)`. */
  get(name: string): PyObject {
    const attr = textArgument(name, "PyObject.get() attribute name");
    const h = this.#live();
    const s = stateOf(this.#py);
    return withGil(
      s,
      () =>
        new PyObject(check(s.capi.PyObject_GetAttrString(h, cString(attr)), `getattr(${attr})`), this.#py, INTERNAL),
    );
  }

  /** `obj(*args)`. */
  call(...args: PyArg[]): PyObject {
    const first = args[0];
    if (args.length === 1 && isPyObject(first)) {
      // The common `f(obj)`: one native call (it takes the GIL itself).
      const h = this.#live();
      holdGil();
      const result = core().dlpk_py_call1(h, handleOf(first));
      if (result === 0) throw pythonError("call");
      return new PyObject(result, this.#py, INTERNAL);
    }
    return this.callWith(args);
  }

  /** `obj(*args, **kwargs)`. */
  callWith(args: readonly PyArg[], kwargs?: Readonly<Record<string, PyArg>> | null): PyObject {
    if (!isArray(args)) {
      throw new DLPackError("argument", `PyObject.callWith() args must be an array, got ${shown(args)}`);
    }
    const names: string[] = [];
    const values: PyArg[] = [];
    if (kwargs !== undefined && kwargs !== null) {
      if (typeof kwargs !== "object" || isArray(kwargs)) {
        throw new DLPackError("argument", `PyObject.callWith() kwargs must be an object, got ${shown(kwargs)}`);
      }
      // Names and values read once each, before the GIL is taken.
      for (const name of objectKeys(kwargs)) {
        names.push(textArgument(name, "a keyword argument's name"));
        values.push(kwargs[name]);
      }
    }
    this.#live(); // "disposed" before anything is converted
    const s = stateOf(this.#py);
    return withGil(s, () => {
      const tuple = toPythonTuple(s, args);
      let dict = 0;
      try {
        if (names.length > 0) {
          dict = check(s.capi.PyDict_New(), "dict");
          for (let i = 0; i < names.length; i++) {
            const name = names[i]!;
            const v = toPython(s, values[i]);
            const status = s.capi.PyDict_SetItemString(dict, cString(name), v);
            s.capi.Py_DecRef(v);
            if (status !== 0) throw pythonError(`keyword ${name}`);
          }
        }
        // Again: converting the arguments ran the caller's getters, which may have disposed this.
        const callee = this.#live();
        return new PyObject(check(s.capi.PyObject_Call(callee, tuple, dict), "call"), this.#py, INTERNAL);
      } finally {
        s.capi.Py_DecRef(tuple);
        if (dict !== 0) s.capi.Py_DecRef(dict);
      }
    });
  }

  /** The value as JSON-compatible JS (numbers, strings, booleans, null, arrays, objects; numpy
   * arrays and scalars through `tolist()`; NaN and infinities kept). `T` types the result at the
   * call site (`obj.toJS<number[]>()`); it is the caller's claim, not checked. */
  toJS<T = unknown>(): T {
    this.#live();
    const s = stateOf(this.#py);
    const text = withGil(s, () => {
      const args = toPythonTuple(s, [this]);
      const json = check(s.capi.PyObject_Call(s.toJson, args, 0), "to JSON");
      s.capi.Py_DecRef(args);
      try {
        const utf8 = check(s.capi.PyUnicode_AsUTF8AndSize(json, 0), "utf-8");
        return runtime().cString(utf8);
      } finally {
        s.capi.Py_DecRef(json);
      }
    });
    return parseJson(text, (_key, value) => {
      if (value !== null && typeof value === "object" && "$float" in value) {
        const repr = (value as { $float: string }).$float;
        return repr === "nan" ? NaN : repr === "inf" ? Infinity : -Infinity;
      }
      return value;
    }) as T;
  }

  /** Releases the reference. Idempotent. */
  dispose(): void {
    const h = this.#handle;
    if (h === 0) return;
    this.#handle = 0;
    registry.remove(this, this.#slot);
    // Releasing a reference stays allowed after close(): the interpreter is still running.
    holdGil();
    core().dlpk_py_decref(h);
  }

  /** Same as {@link PyObject.dispose}, for `using`. */
  [Symbol.dispose](): void {
    this.dispose();
  }

  #live(): number {
    if (this.#handle === 0) throw new DLPackError("disposed", "this Python object was disposed");
    if (closedOf(this.#py)) throw new DLPackError("disposed", "the Python bridge this object belongs to was closed");
    return this.#handle;
  }

  static {
    isPyObject = (value: unknown): value is PyObject => typeof value === "object" && value !== null && #handle in value;
    handleOf = (obj) => obj.#live();
    pythonOf = (obj) => obj.#py;
    disposedOf = (obj) => obj.#handle === 0;
  }
}

/** Options of {@link openPython}. */
export interface OpenPythonOptions {
  /** Path of the libpython shared library (else `DLPACK_PYTHON`, else `python3` on PATH). */
  readonly library?: string | undefined;
}

/** A handle on the embedded interpreter. Several handles share one interpreter. */
export class Python {
  #state: BridgeState;
  #closed = false;

  /** @ignore (library-internal) Use {@link openPython}. */
  constructor(s: BridgeState, key: typeof INTERNAL) {
    if (key !== INTERNAL) throw new DLPackError("argument", "Python handles are made by openPython()");
    this.#state = s;
  }

  /** @ignore (library-internal) The shared state, checked open. */
  get state(): BridgeState {
    return stateOf(this);
  }

  /** Whether `close()` ran. */
  get closed(): boolean {
    return this.#closed;
  }

  /** The libpython this bridge loaded. */
  get library(): string {
    return this.#state.install.library;
  }

  /** Runs statements in `__main__`. */
  exec(code: string): void {
    const source = textArgument(code, "py.exec() code");
    const s = stateOf(this);
    withGil(s, () => {
      const globals = this.#mainDict();
      s.capi.Py_DecRef(check(s.capi.PyRun_StringFlags(cString(source), Py_file_input, globals, globals, 0), "exec"));
    });
  }

  /** Evaluates an expression in `__main__`. */
  eval(expression: string): PyObject {
    const source = textArgument(expression, "py.eval() expression");
    const s = stateOf(this);
    return withGil(s, () => {
      const globals = this.#mainDict();
      return new PyObject(
        check(s.capi.PyRun_StringFlags(cString(source), Py_eval_input, globals, globals, 0), "eval"),
        this,
        INTERNAL,
      );
    });
  }

  /** `import name` (the module object). */
  import(name: string): PyObject {
    const module = textArgument(name, "py.import() module name");
    const s = stateOf(this);
    return withGil(
      s,
      () => new PyObject(check(s.capi.PyImport_ImportModule(cString(module)), `import ${module}`), this, INTERNAL),
    );
  }

  /** Binds `name` in `__main__` to a converted value (PyObjects pass as themselves). */
  set(name: string, value: PyArg): void {
    const key = textArgument(name, "py.set() name");
    const s = stateOf(this);
    withGil(s, () => {
      const v = toPython(s, value);
      const status = s.capi.PyDict_SetItemString(this.#mainDict(), cString(key), v);
      s.capi.Py_DecRef(v);
      if (status !== 0) throw pythonError(`set ${key}`);
    });
  }

  /** The object bound to `name` in `__main__` (what `set` bound, or `exec` defined); throws
   * `DLPackError` ("python") when there is none. */
  get(name: string): PyObject {
    const key = textArgument(name, "py.get() name");
    const s = stateOf(this);
    return withGil(s, () => {
      const main = check(s.capi.PyImport_AddModule(cString("__main__")), "__main__");
      return new PyObject(check(s.capi.PyObject_GetAttrString(main, cString(key)), `get ${key}`), this, INTERNAL);
    });
  }

  /** Wraps an object of another bridge (anything with a `handle`) in a PyObject of this one. */
  wrap(foreign: { readonly handle: bigint | number | PointerObject }): PyObject {
    const s = stateOf(this);
    if (isPyObject(foreign)) return wrapIn(this, foreign);
    const h = foreignHandle(foreign, "py.wrap()");
    return withGil(s, () => {
      s.capi.Py_IncRef(h);
      return new PyObject(h, this, INTERNAL);
    });
  }

  /** Closes this handle: its objects and it refuse further calls. The interpreter stays up for the
   * process (numpy and other extensions cannot be finalized safely, and other handles may use it). */
  close(): void {
    this.#closed = true;
  }

  /** Same as {@link Python.close}, for `using`. */
  [Symbol.dispose](): void {
    this.close();
  }

  #mainDict(): number {
    const s = this.#state;
    const main = check(s.capi.PyImport_AddModule(cString("__main__")), "__main__");
    return s.capi.PyModule_GetDict(main);
  }

  static {
    isPython = (value: unknown): value is Python => typeof value === "object" && value !== null && #state in value;
    stateOf = (py) => {
      if (py.#closed) throw new DLPackError("disposed", "this Python bridge was closed");
      return py.#state;
    };
    closedOf = (py) => py.#closed;
  }
}

/** @internal `py.wrap(obj)` for a real PyObject, through nothing a caller can replace. */
export function wrapIn(py: Python, obj: PyObject): PyObject {
  const s = stateOf(py);
  return withGil(s, () => new PyObject(toPython(s, obj), py, INTERNAL));
}

/**
 * Opens the embedded CPython: finds libpython (`library`, `DLPACK_PYTHON`, or `python3` on PATH
 * via sysconfig), loads it globally, initializes it once (or reuses an interpreter another bridge
 * started), and returns a handle. Python exceptions become `DLPackError` with code "python".
 */
export function openPython(opts?: OpenPythonOptions | null): Python {
  let library: string | undefined;
  if (opts !== undefined && opts !== null) {
    if (typeof opts !== "object" || isArray(opts)) {
      throw new DLPackError("argument", `openPython() options must be an options object, got ${shown(opts)}`);
    }
    const value = opts.library;
    library = value === undefined ? undefined : textArgument(value, "openPython() option library");
  }
  if (state !== undefined && library !== undefined && library !== state.install.library) {
    throw new DLPackError(
      "python",
      `${state.install.library} is already embedded in this process; one process holds one interpreter (asked for ${library})`,
    );
  }
  state ??= start(library);
  return new Python(state, INTERNAL);
}
