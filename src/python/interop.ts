/**
 * DLPack across the JS/Python boundary: `fromPython` is the consumer side of the protocol as
 * numpy implements it, `toPython` wraps JS memory in a Python object that numpy, JAX and PyTorch
 * import without a copy.
 * @module
 */
import { core, runtime } from "../../ffi/mod.ts";
import { toAddress } from "../address.ts";
import { DLPackError } from "../errors.ts";
import { I32, refusalError, scratch, U32 } from "../description.ts";
import { type ArrayInterface, importArrayInterface } from "../array_interface.ts";
import { type Exportable, exportDLPack, type ExportOptions } from "../export.ts";
import { deviceCode, type DeviceType } from "../devices.ts";
import { isCudaFamily, setProducerStream } from "../cuda.ts";
import { BufferView, viewFromScratch } from "../view.ts";
import {
  bridge,
  type BridgeState,
  check,
  type PyArg,
  PyObject,
  type Python,
  pythonError,
  toPythonTuple,
  withGil,
} from "./bridge.ts";

/** Options of {@link fromPython}: the `__dlpack__` keywords, camelCased. */
export interface FromPythonOptions {
  /** The highest DLPack version to ask for (default [1, 3]); null asks for the legacy struct. */
  readonly maxVersion?: readonly [number, number] | null;
  /** true: ask the producer to copy; false: refuse if a copy would be needed. */
  readonly copy?: boolean | null;
  /** The device the data should be on. */
  readonly device?: { readonly type: DeviceType; readonly id?: number } | null;
  /** The consumer's stream, passed to the producer (CUDA; None for CPU). */
  readonly stream?: number | bigint | null;
}

const STATUS_CONSUMED = 14;
const STATUS_CAPSULE_NAME = 15;
const STATUS_INTERFACE = 20;
const STATUS_RAISED = 21;
const READ_ONLY = 1;

function stateOf(obj: unknown): { s: BridgeState; py: Python | undefined } {
  if (obj instanceof PyObject) return { s: obj.python.state, py: obj.python };
  return { s: bridge(), py: undefined };
}

/**
 * Imports a Python object as a zero-copy view: calls `obj.__dlpack__(max_version=(1, 3), ...)`
 * (retrying the pre-2023 signature on TypeError), accepts a raw PyCapsule too, checks the capsule
 * name and the tensor, and only then renames the capsule to `used_*` and owns its deleter. A
 * refused capsule keeps its own destructor (nothing leaks). Objects without `__dlpack__` but with
 * `__array_interface__` are imported through it, keeping a reference to the object.
 * `view.producer` names the producer's type ("numpy.ndarray").
 */
export function fromPython(
  obj: PyObject | { readonly handle: bigint | number | Deno.PointerObject },
  opts: FromPythonOptions = {},
): BufferView {
  const { s, py } = stateOf(obj);
  const handle = obj instanceof PyObject ? obj.handleNumber : toAddress(obj.handle, "handle");
  if (handle === 0) throw new DLPackError("python", "fromPython needs a Python object, got a NULL handle");
  const maxVersion = opts.maxVersion === undefined ? [1, 3] : opts.maxVersion;
  const stream = opts.stream === undefined || opts.stream === null ? NaN : Number(opts.stream);
  // One native call: the negotiation in dlpack_ts._capsule_of, then the capsule checks and import.
  const status = core().dlpk_py_from(
    handle,
    maxVersion === null ? -1 : maxVersion[0],
    maxVersion === null ? -1 : maxVersion[1],
    opts.copy === undefined || opts.copy === null ? -1 : opts.copy ? 1 : 0,
    opts.device ? deviceCode(opts.device.type) : -1,
    opts.device?.id ?? 0,
    stream,
    0,
    scratch.at,
    nameAt(),
    NAME_BYTES,
  );
  if (status === STATUS_RAISED) throw pythonError("__dlpack__");
  const producer = producerName();
  if (status === STATUS_INTERFACE) return fromArrayInterfaceOf(s, py, obj, producer);
  if (status === STATUS_CONSUMED) {
    throw new DLPackError("consumed", `the capsule from ${producer} was already consumed (its name starts with used_)`);
  }
  if (status === STATUS_CAPSULE_NAME) {
    throw new DLPackError(
      "python",
      `${producer} returned a capsule that is not named "dltensor" or "dltensor_versioned"`,
    );
  }
  if (status !== 0) throw refusalError(status, scratch, false);
  const versioned = scratch.i32[I32.major] >= 0;
  const flags = scratch.u32[U32.flags];
  const view = viewFromScratch(
    scratch,
    versioned ? ((flags & READ_ONLY) !== 0 ? "readonly" : "readwrite") : "unknown",
    producer,
    "external",
  );
  // The producer ordered its work before our stream: later exports of this view fence on it.
  if (opts.stream !== undefined && opts.stream !== null && isCudaFamily(view.device.type)) {
    setProducerStream(view, opts.stream);
  }
  return view;
}

const NAME_BYTES = 256;
const nameBuffer = new Uint8Array(NAME_BYTES);
let nameAddress = 0;
const decoder = new TextDecoder();
let lastName = "";
let lastNameBytes = new Uint8Array(0);

function nameAt(): number {
  return nameAddress ||= runtime().addressOf(nameBuffer);
}

/** The producer name the native call wrote (the same few names recur: reuse the last string). */
function producerName(): string {
  const end = nameBuffer.indexOf(0);
  const bytes = nameBuffer.subarray(0, end < 0 ? NAME_BYTES : end);
  if (bytes.length === lastNameBytes.length && bytes.every((b, i) => b === lastNameBytes[i])) return lastName;
  lastNameBytes = bytes.slice();
  return lastName = decoder.decode(bytes);
}

/** Objects with only `__array_interface__`: read its fields, keep the object alive. */
function fromArrayInterfaceOf(
  s: BridgeState,
  py: Python | undefined,
  obj: PyObject | { readonly handle: bigint | number | Deno.PointerObject },
  producer: string,
): BufferView {
  const fields = withGil(s, () => {
    const tuple = toPythonTuple(s, [obj as PyArg, null, null, null, null]);
    const result = s.capi.PyObject_Call(s.capsuleOf, tuple, 0);
    s.capi.Py_DecRef(tuple);
    if (result === 0) throw pythonError("__array_interface__");
    try {
      const json = check(s.capi.PyUnicode_AsUTF8AndSize(s.capi.PyTuple_GetItem(result, 2), 0), "iface");
      return JSON.parse(runtime().cString(json)) as ArrayInterface & { masked?: boolean };
    } finally {
      s.capi.Py_DecRef(result);
    }
  });
  if (fields.masked) throw new DLPackError("null_data", `${producer} is a masked array; masks are not supported`);
  // The view keeps the Python object alive: its memory belongs to it.
  const keepAlive = py !== undefined ? (obj as PyObject).python.wrap(obj as PyObject) : wrapForeign(s, obj);
  return importArrayInterface(fields, keepAlive, producer);
}

function wrapForeign(s: BridgeState, obj: unknown): PyObject {
  void s;
  throw new DLPackError(
    "python",
    `objects without __dlpack__ need a PyObject of this bridge (py.wrap(obj)) to be kept alive; got ${typeof obj}`,
  );
}

/** Options of {@link toPython}: the export options (shape, strides, dtype, offset, readonly). */
export type ToPythonOptions = ExportOptions;

/**
 * A Python object over a view or TypedArray, without a copy: a `dlpack_ts.DLPackTensor` whose
 * `__dlpack__(*, stream=None, max_version=None, dl_device=None, copy=None)` follows the protocol
 * (legacy capsule for max_version None or < (1, 0), refused with BufferError for read-only data;
 * versioned with READ_ONLY otherwise; copy=True copies and sets IS_COPIED). The JS memory stays
 * pinned until Python has dropped the object and every array made from it.
 */
export function toPython(x: Exportable, py: Python, opts: ToPythonOptions = {}): PyObject {
  void py.state; // refuses a closed bridge before anything is exported
  const capsule = exportDLPack(x, opts);
  const template = capsule.takeAddress();
  try {
    const readonly = (x instanceof BufferView && x.access !== "readwrite") || opts.readonly === true;
    // One native call makes the DLPackTensor (it takes the GIL itself).
    const made = core().dlpk_py_wrap(template, readonly ? 1 : 0);
    if (made === 0) throw pythonError("DLPackTensor");
    return new PyObject(made, py);
  } catch (error) {
    core().dlpk_managed_delete(template, 1);
    throw error;
  }
}
