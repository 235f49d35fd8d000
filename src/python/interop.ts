/**
 * DLPack across the JS/Python boundary: `fromPython` is the consumer side of the protocol as
 * numpy implements it, `toPython` wraps JS memory in a Python object that numpy, JAX and PyTorch
 * import without a copy.
 * @module
 */
import { core, runtime } from "../../ffi/mod.ts";
import type { PointerObject } from "../../ffi/types.ts";
import { checkDeviceId, DLPackError } from "../facts/errors.ts";
import { CUDA_DEVICE_TYPES, EXCHANGE_MARK, ImportOption, PythonStatus } from "../facts/abi.ts";
import { I32, I64, KEY_OWNER, scratch } from "../native/scratch.ts";
import { refusalError } from "../native/refusals.ts";
import { type ArrayInterface, importArrayInterface } from "../api/array_interface.ts";
import { type Exportable, exportDLPack, type ExportOptions } from "../api/export.ts";
import { checkImported, requirementsOf } from "../api/import.ts";
import type { Requirements } from "../engines/requirements.ts";
import { deviceCode, type DeviceType } from "../facts/devices.ts";
import { isCudaFamily, setProducerStream } from "../cuda/cuda.ts";
import {
  type BufferView,
  buildKeyed,
  disposeView,
  isBufferView,
  type RequiredView,
  stateOf as viewState,
} from "../view/view.ts";
import { deferredDisposalCount, deferredDisposals, releaseDeferred, retryQuietly } from "../native/journal.ts";
import { takeCapsule } from "../native/capsule.ts";
import { newPinId, pinsRecorded, realmAddress, recordPin } from "../native/pins.ts";
import { knownWholeArray } from "../engines/arrays.ts";
import { arrayRefusal, wholeArrayWord } from "../engines/exports.ts";
import type { AnyTypedArray } from "../facts/dtypes.ts";
import { callWith, isArray, isInteger, isSafeInt, typedArrayByteLength, Uint8ArrayCtor } from "../facts/intrinsics.ts";
import {
  bridge,
  type BridgeState,
  check,
  foreignHandle,
  handleOf,
  holdGil,
  INTERNAL,
  isPyObject,
  isPython,
  PyObject,
  type Python,
  pythonError,
  pythonOf,
  shown,
  stateOf,
  toPythonTuple,
  withGil,
  wrapIn,
} from "./bridge.ts";

/** Options of {@link fromPython}: the `__dlpack__` keywords, camelCased. */
export interface FromPythonOptions {
  /** The highest DLPack version to ask for (default [1, 3]); null asks for the legacy struct. */
  readonly maxVersion?: readonly [number, number] | null | undefined;
  /** true: ask the producer to copy; false: refuse if a copy would be needed. */
  readonly copy?: boolean | null | undefined;
  /** The device the data should be on. */
  readonly device?: { readonly type: DeviceType; readonly id?: number | undefined } | null | undefined;
  /** The consumer's stream, passed to the producer (CUDA; None for CPU): -1 (no synchronization)
   * or a positive handle below 2^53 (1 and 2 are CUDA's legacy and per-thread default streams). */
  readonly stream?: number | bigint | null | undefined;
  /** What the view must meet (as `view.require`); one that does not is released and
   * `DLPackError` ("requirements") thrown. A literal `dtype` and `ndim` (or `shape`) type the result. */
  readonly require?: Requirements | undefined;
}

const STATUS_CONSUMED = PythonStatus.consumed;
const STATUS_CAPSULE_NAME = PythonStatus.capsuleName;
const STATUS_INTERFACE = PythonStatus.arrayInterface;
const STATUS_RAISED = PythonStatus.raised;
const INT32_MAX = 0x7fff_ffff;
const isView = ArrayBuffer.isView;
const parseJson = JSON.parse;
const MAX_SAFE_BIGINT = 2n ** 53n - 1n;
const NumberCtor = Number;

/** The options as the native call takes them, each checked (Bun's FFI would truncate the rest). */
interface NativeFromOptions {
  readonly major: number;
  readonly minor: number;
  /** -1 None, 0 False, 1 True. */
  readonly copy: number;
  /** -1: no dl_device. */
  readonly deviceType: number;
  readonly deviceId: number;
  /** NaN: None. */
  readonly stream: number;
}

const DEFAULT_OPTIONS: NativeFromOptions = { major: 1, minor: 3, copy: -1, deviceType: -1, deviceId: 0, stream: NaN };

/** Reads every option once and checks it, naming the option in the error. */
function fromOptions(opts: FromPythonOptions): NativeFromOptions {
  if (typeof opts !== "object" || isArray(opts)) {
    throw new DLPackError("argument", `fromPython() options must be an options object, got ${shown(opts)}`);
  }
  const [major, minor] = maxVersionOption(opts.maxVersion);
  const copy = opts.copy;
  if (copy !== undefined && copy !== null && typeof copy !== "boolean") {
    throw new DLPackError("argument", `fromPython() option copy must be true, false or null, got ${shown(copy)}`);
  }
  const [deviceType, deviceId] = deviceOption(opts.device);
  return {
    major,
    minor,
    copy: copy === undefined || copy === null ? -1 : copy ? 1 : 0,
    deviceType,
    deviceId,
    stream: streamOption(opts.stream),
  };
}

function maxVersionOption(value: unknown): [number, number] {
  if (value === undefined) return [1, 3];
  if (value === null) return [-1, -1];
  const bad = (got: string) =>
    new DLPackError(
      "argument",
      `fromPython() option maxVersion must be null or [major, minor] with integers in 0..2^31-1, got ${got}`,
    );
  if (!isArray(value)) throw bad(shown(value));
  const length: unknown = value.length;
  if (length !== 2) throw bad(`an array of length ${String(length)}`);
  const major: unknown = value[0];
  const minor: unknown = value[1];
  for (const part of [major, minor]) {
    if (typeof part !== "number" || !isInteger(part) || part < 0 || part > INT32_MAX) {
      throw bad(`[${shown(major)}, ${shown(minor)}]`);
    }
  }
  return [major as number, minor as number];
}

function deviceOption(value: unknown): [number, number] {
  if (value === undefined || value === null) return [-1, 0];
  if (typeof value !== "object" || isArray(value)) {
    throw new DLPackError(
      "argument",
      `fromPython() option device must be { type, id? } (such as { type: "cpu" }), got ${shown(value)}`,
    );
  }
  const type: unknown = (value as { type?: unknown }).type;
  const id: unknown = (value as { id?: unknown }).id;
  if (typeof type !== "string") {
    throw new DLPackError(
      "argument",
      `fromPython() option device.type must be a device name such as "cpu", got ${shown(type)}`,
    );
  }
  let code: number;
  try {
    code = deviceCode(type as DeviceType);
  } catch (error) {
    if (!(error instanceof DLPackError)) throw error;
    throw new DLPackError("device", `fromPython() option device.type: ${error.message}`);
  }
  return [code, id === undefined ? 0 : checkDeviceId(id, "fromPython() option device.id")];
}

/** The stream as the native call takes it (NaN for None); 0 is not a stream in the protocol. */
function streamOption(value: unknown): number {
  if (value === undefined || value === null) return NaN;
  const n = typeof value === "bigint" && value >= -1n && value <= MAX_SAFE_BIGINT ? NumberCtor(value) : value;
  if (typeof n === "number" && isSafeInt(n) && (n === -1 || n >= 1)) return n;
  throw new DLPackError(
    "argument",
    `fromPython() option stream must be null, -1 (no synchronization) or a positive stream handle below 2^53, got ${
      shown(value)
    }${
      value === 0 || value === 0n ? " (the DLPack protocol disallows 0: use 1 for CUDA's legacy default stream)" : ""
    }`,
  );
}

/**
 * Imports a Python object as a zero-copy view. When the object's type has a DLPack C exchange
 * table (`__dlpack_c_exchange_api__`, DLPack 1.3: torch.Tensor, DLPackTensor) that certainly
 * belongs to it (see docs/python.md) and no option asks for the legacy struct, a copy, a device or
 * a stream, its `managed_tensor_from_py_object_no_sync` is called natively (no capsule, no Python
 * code; the table is cached per type) and the tensor goes through the same checks as every import;
 * CUDA data then records the producer's `current_work_stream` as the view's producer stream. A
 * BufferError from the table falls back to `__dlpack__`. A torch tensor with its conjugate or
 * negative bit set is imported as the copy torch resolves (refused for `copy: false`), one that
 * requires gradients through `__dlpack__` (which refuses it). Otherwise: calls
 * `obj.__dlpack__(max_version=(1, 3), ...)`
 * once (retrying the pre-2023 signature on TypeError), accepts a raw PyCapsule too, checks the
 * capsule name and the tensor, and only then renames the capsule to `used_*` and owns its
 * deleter. A refused capsule keeps its own destructor (nothing leaks). Objects without
 * `__dlpack__` but with `__array_interface__` are imported through it, keeping a reference to the
 * object. `view.producer` names the producer's type ("numpy.ndarray"). Every option is checked
 * before Python is called.
 */
export function fromPython<const R extends Requirements>(
  obj: PyObject | { readonly handle: bigint | number | PointerObject },
  opts: FromPythonOptions & { readonly require: R },
): RequiredView<R>;
/** Imports a Python object's tensor as a zero-copy view (see the overload above). */
export function fromPython(
  obj: PyObject | { readonly handle: bigint | number | PointerObject },
  opts?: FromPythonOptions | null,
): BufferView;
export function fromPython(
  obj: PyObject | { readonly handle: bigint | number | PointerObject },
  opts?: FromPythonOptions | null,
): BufferView {
  // Checked before Python is called, like every other option.
  const required = requirementsOf(opts, "fromPython");
  const view = importPython(obj, opts);
  return required === undefined ? view : checkImported(view, required, "the tensor from Python");
}

function importPython(
  obj: PyObject | { readonly handle: bigint | number | PointerObject },
  opts: FromPythonOptions | null | undefined,
): BufferView {
  let s: BridgeState;
  let py: Python | undefined;
  let handle: number;
  if (isPyObject(obj)) {
    handle = handleOf(obj);
    py = pythonOf(obj);
    s = stateOf(py);
  } else {
    s = bridge();
    handle = foreignHandle(obj, "fromPython()'s object");
  }
  const o = opts === undefined || opts === null ? DEFAULT_OPTIONS : fromOptions(opts);
  // Again: the options' getters may have disposed the object.
  if (isPyObject(obj)) handle = handleOf(obj);
  holdGil();
  // One native call: the negotiation in dlpack_ts._capsule_of, then the capsule checks and import.
  const status = core().dlpk_py_from(
    handle,
    o.major,
    o.minor,
    o.copy,
    o.deviceType,
    o.deviceId,
    o.stream,
    0,
    nameAt(),
    NAME_BYTES,
  );
  // Status 0: the import owns the tensor now, its owner record journaled until the view holds it
  // (an exception before that leaves it to be released). No caller code runs until then.
  const owner = status === 0 ? scratch.f64[KEY_OWNER] : 0;
  let view: BufferView | undefined;
  try {
    if (status === STATUS_RAISED) throw pythonError("__dlpack__");
    const producer = producerName();
    if (status === STATUS_INTERFACE) return fromArrayInterfaceOf(s, py, obj, producer);
    if (status === STATUS_CONSUMED) {
      throw new DLPackError(
        "consumed",
        `the capsule from ${producer} was already consumed (its name starts with used_)`,
      );
    }
    if (status === STATUS_CAPSULE_NAME) {
      throw new DLPackError(
        "python",
        `${producer} returned a capsule that is not named "dltensor" or "dltensor_versioned"`,
      );
    }
    if (status !== 0) throw refusalError(status, scratch, false);
    const versioned = scratch.i32[I32.major] >= 0;
    // CUDA data from a producer's C exchange table is ready in the order of the producer's current
    // work stream, which the native side asked for: later exports of the view fence on it.
    const exchangeStream = isCudaFamilyCode(scratch.i32[I32.deviceType]) && scratch.i64[I64.limit] === EXCHANGE_MARK
      ? scratch.i64[I64.found]
      : 0n;
    // Keyed as the imports are: the facts (and the access the flags decide) built for the native
    // generation are reused.
    view = buildKeyed(scratch, owner, versioned ? ImportOption.versioned : 0, producer);
    // The producer ordered its work before our stream: later exports of this view fence on it.
    // -1 asked for no ordering, so there is nothing to record.
    const producerStream = o.stream > 0 ? o.stream : exchangeStream !== 0n ? exchangeStream : 0;
    if (producerStream !== 0 && isCudaFamily(viewState(view).facts.device.type)) {
      setProducerStream(view, producerStream);
    }
    return view;
  } catch (error) {
    if (owner !== 0) {
      // A view made already is parked before any call (the stack may be exhausted here): its own
      // dispose, or the journal's replay, gives the tensor back exactly once.
      const made = view;
      if (made !== undefined) deferredDisposals[deferredDisposalCount[0]++] = () => disposeView(made);
      retryQuietly();
    }
    throw error;
  }
}

/** Whether a device code is one the CUDA driver manages (CUDA, CUDAHost, CUDAManaged). */
function isCudaFamilyCode(code: number): boolean {
  for (let i = 0; i < CUDA_DEVICE_TYPES.length; i++) if (CUDA_DEVICE_TYPES[i] === code) return true;
  return false;
}

const NAME_BYTES = 256;
const nameBuffer = new Uint8Array(NAME_BYTES);
let nameAddress = 0;
const decoder = new TextDecoder();
// Captured at load: the name is read while the import's owner waits for its view, when no caller
// code (a replaced prototype method among it) may run.
const decode = TextDecoder.prototype.decode as (bytes: Uint8Array) => string;
let lastName = "";
let lastNameBytes = new Uint8Array(0);
let lastNameLength = 0;

function nameAt(): number {
  return nameAddress ||= runtime().addressOf(nameBuffer);
}

/** The producer name the native call wrote (the same few names recur: reuse the last string,
 * compared byte by byte, terminator included, without allocating or searching the buffer). */
function producerName(): string {
  const last = lastNameBytes;
  const n = lastNameLength;
  let i = 0;
  while (i < n && nameBuffer[i] === last[i]) i++;
  if (i === n && (n === NAME_BYTES || nameBuffer[n] === 0)) return lastName;
  let found = 0;
  while (found < NAME_BYTES && nameBuffer[found] !== 0) found++;
  const bytes = new Uint8ArrayCtor(found);
  for (let k = 0; k < found; k++) bytes[k] = nameBuffer[k]!;
  lastNameBytes = bytes;
  lastNameLength = found;
  return lastName = callWith(decode, decoder, bytes) as string;
}

/** Objects with only `__array_interface__`: read its fields, keep the object alive. */
function fromArrayInterfaceOf(
  s: BridgeState,
  py: Python | undefined,
  obj: unknown,
  producer: string,
): BufferView {
  if (py === undefined) {
    throw new DLPackError(
      "argument",
      `objects without __dlpack__ need a PyObject of this bridge (py.wrap(obj)) to be kept alive; ${producer} came as a { handle }`,
    );
  }
  const fields = withGil(s, () => {
    const tuple = toPythonTuple(s, [obj as PyObject]);
    const json = s.capi.PyObject_Call(s.interfaceJson, tuple, 0);
    s.capi.Py_DecRef(tuple);
    if (json === 0) throw pythonError("__array_interface__");
    try {
      const utf8 = check(s.capi.PyUnicode_AsUTF8AndSize(json, 0), "__array_interface__");
      return parseJson(runtime().cString(utf8)) as ArrayInterface & { masked?: boolean };
    } finally {
      s.capi.Py_DecRef(json);
    }
  });
  if (fields.masked) throw new DLPackError("null_data", `${producer} is a masked array; masks are not supported`);
  // The view keeps the Python object alive: its memory belongs to it.
  return importArrayInterface(fields, wrapIn(py, obj as PyObject), producer);
}

/** Options of {@link toPython}: the export options (shape, strides, dtype, offset, readonly), and
 * `as`, a Python type with a DLPack C exchange table (`__dlpack_c_exchange_api__`, such as
 * `torch.Tensor`): the result is then that type's tensor, made by its
 * `managed_tensor_to_py_object_no_sync` without running Python code. Read-only data is refused
 * there (torch 2.15 ignores the READ_ONLY flag on that path). */
export type ToPythonOptions = ExportOptions & { readonly as?: PyObject | null | undefined };

/**
 * A Python object over a view or TypedArray, without a copy: a `dlpack_ts.DLPackTensor` whose
 * `__dlpack__(*, stream=None, max_version=None, dl_device=None, copy=None)` follows the protocol
 * (legacy capsule for max_version None or < (1, 0), refused with BufferError for read-only data;
 * versioned with READ_ONLY otherwise; copy=True copies and sets IS_COPIED; wrong arguments raise
 * what numpy raises for them). Its type also has a DLPack C exchange table
 * (`__dlpack_c_exchange_api__`), through which C consumers such as tvm-ffi take the memory
 * without Python code (read-only data marked READ_ONLY). With `{ as: T }` the result is a `T` made by T's exchange
 * table instead. The JS memory stays pinned until Python has dropped the object and every array
 * made from it.
 */
export function toPython(x: Exportable, py: Python, opts?: ToPythonOptions): PyObject {
  if (!isPython(py)) {
    throw new DLPackError(
      "argument",
      `toPython(x, py) needs the bridge that openPython() returned as its second argument, got ${shown(py)}`,
    );
  }
  stateOf(py); // refuses a closed bridge before anything is exported
  // TypedArrays first: ArrayBuffer.isView is one cheap builtin, while the view's brand check costs
  // a private-field lookup that misses on every TypedArray.
  const typed = isView(x);
  if (typed && opts === undefined) {
    const made = wrapWholeArray(x as AnyTypedArray, py);
    if (made !== undefined) return made;
  }
  const view = !typed && isBufferView(x);
  if (!view && !typed) {
    throw new DLPackError("argument", `toPython(x, py) takes a BufferView or a TypedArray, got ${shown(x)}`);
  }
  // The native side also honours the export's READ_ONLY flag, whatever a getter says here.
  const readonly = (view && viewState(x as BufferView).access !== "readwrite") ||
    (typeof opts === "object" && opts !== null && opts.readonly === true);
  const asValue: unknown = typeof opts === "object" && opts !== null ? opts.as : undefined;
  const target = asOption(asValue, readonly);
  const capsule = exportDLPack(x, opts);
  const template = takeCapsule(capsule);
  let made = 0;
  holdGil();
  try {
    // One native call makes the DLPackTensor, or the `as` type's tensor (it takes the GIL
    // itself); from then on the Python object owns the template. The `as` type is looked up
    // again: the export ran the options' getters, which may have disposed it.
    made = target === 0
      ? core().dlpk_py_wrap(template, readonly ? 1 : 0)
      : core().dlpk_py_wrap_as(template, handleOf(asValue as PyObject));
  } finally {
    if (made === 0) core().dlpk_managed_delete(template, 1);
  }
  if (made === 0) throw pythonError(target === 0 ? "DLPackTensor" : "toPython() option as");
  return holdPython(made, py);
}

/**
 * `toPython` of a TypedArray exported before as a whole (no options): the export and its
 * DLPackTensor in one native call. undefined for an array this path does not take.
 */
function wrapWholeArray(x: AnyTypedArray, py: Python): PyObject | undefined {
  const known = knownWholeArray(x);
  if (known === undefined) return undefined;
  const byteLength = typedArrayByteLength(x);
  if (byteLength <= 0) return undefined;
  releaseDeferred();
  const id = newPinId();
  const realm = realmAddress();
  holdGil();
  const made = core().dlpk_py_wrap_array(x, realm, id, byteLength, wholeArrayWord(known, 0, true));
  if (made < 0) throw arrayRefusal(made, byteLength);
  // The export was deleted natively: its pin comes back through the queue, never recorded.
  if (made === 0) throw pythonError("DLPackTensor");
  try {
    // The pin keeps the TypedArray reachable until Python releases the export.
    recordPin(id, x);
    const obj = new PyObject(made, py, INTERNAL);
    pinsRecorded();
    return obj;
  } catch (error) {
    // Releases the export too, and with it the pin (recorded or not).
    core().dlpk_py_decref(made);
    throw error;
  }
}

/** A PyObject holding the new reference `made`; the reference is dropped if that throws. */
function holdPython(made: number, py: Python): PyObject {
  try {
    return new PyObject(made, py, INTERNAL);
  } catch (error) {
    core().dlpk_py_decref(made);
    throw error;
  }
}

/** The `as` option read once: 0 (none) or the handle of a PyObject of this bridge. */
function asOption(value: unknown, readonly: boolean): number {
  if (value === undefined || value === null) return 0;
  if (!isPyObject(value)) {
    throw new DLPackError(
      "argument",
      `toPython() option as must be a PyObject (a Python type such as torch.Tensor), got ${shown(value)}`,
    );
  }
  if (readonly) {
    throw new DLPackError(
      "readonly",
      "toPython() option as cannot take read-only data: managed_tensor_to_py_object_no_sync may ignore " +
        "the READ_ONLY flag (torch 2.15 does); leave `as` out to get a DLPackTensor, whose __dlpack__ keeps it",
    );
  }
  return handleOf(value);
}
