/**
 * DLPack across the JS/Python boundary: `fromPython` is the consumer side of the protocol as
 * numpy implements it, `toPython` wraps JS memory in a Python object that numpy, JAX and PyTorch
 * import without a copy.
 * @module
 */
import { core, runtime } from "../../ffi/mod.ts";
import { DLPackError } from "../errors.ts";
import { I32, refusalError, scratch, U32 } from "../description.ts";
import { type ArrayInterface, importArrayInterface } from "../array_interface.ts";
import { type Exportable, exportDLPack, type ExportOptions } from "../export.ts";
import { deviceCode, type DeviceType } from "../devices.ts";
import { isCudaFamily, setProducerStream } from "../cuda.ts";
import { fromDLDataType } from "../dtypes.ts";
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
  const maxVersion = opts.maxVersion === undefined ? [1, 3] : opts.maxVersion;
  const device = opts.device ? [deviceCode(opts.device.type), opts.device.id ?? 0] : null;
  const args: PyArg[] = [obj as PyArg, maxVersion, opts.copy ?? null, device, opts.stream ?? null];
  let iface: (ArrayInterface & { masked?: boolean }) | undefined;
  let producer = "";
  const view = withGil(s, () => {
    const tuple = toPythonTuple(s, args);
    const result = s.capi.PyObject_Call(s.capsuleOf, tuple, 0);
    s.capi.Py_DecRef(tuple);
    if (result === 0) throw pythonError("__dlpack__");
    try {
      const capsule = s.capi.PyTuple_GetItem(result, 0);
      producer = runtime().cString(
        check(s.capi.PyUnicode_AsUTF8AndSize(s.capi.PyTuple_GetItem(result, 1), 0), "producer"),
      );
      if (capsule === s.none) {
        iface = JSON.parse(
          runtime().cString(check(s.capi.PyUnicode_AsUTF8AndSize(s.capi.PyTuple_GetItem(result, 2), 0), "iface")),
        );
        return undefined;
      }
      const status = core().dlpk_py_consume(capsule, 0, scratch.at);
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
      const flags = scratch.u32[U32.flags];
      return viewFromScratch(
        scratch,
        versioned ? ((flags & READ_ONLY) !== 0 ? "readonly" : "readwrite") : "unknown",
        producer,
        "external",
      );
    } finally {
      s.capi.Py_DecRef(result);
    }
  });
  if (view !== undefined) {
    // The producer ordered its work before our stream: later exports of this view fence on it.
    if (opts.stream !== undefined && opts.stream !== null && isCudaFamily(view.device.type)) {
      setProducerStream(view, opts.stream);
    }
    return view;
  }
  const fields = iface!;
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
  const s = py.state;
  const capsule = exportDLPack(x, opts);
  const template = capsule.takeAddress();
  try {
    const status = core().dlpk_describe(template, 1, scratch.at);
    if (status !== 0) throw refusalError(status, scratch, false);
    const ndim = scratch.i32[I32.ndim];
    const shape = Array.from(scratch.f64.subarray(15, 15 + ndim));
    const dtype = fromDLDataType({ code: scratch.u32[8], bits: scratch.u32[9], lanes: 1 }) ?? "unknown";
    const readonly = (scratch.u32[7] & READ_ONLY) !== 0;
    const device = x instanceof BufferView ? x.device : { type: "cpu" as const, id: 0 };
    return withGil(s, () => {
      const args = toPythonTuple(s, [template, deviceCode(device.type), device.id, readonly, shape, dtype]);
      const made = s.capi.PyObject_Call(s.tensorClass, args, 0);
      s.capi.Py_DecRef(args);
      return new PyObject(check(made, "DLPackTensor"), py);
    });
  } catch (error) {
    core().dlpk_managed_delete(template, 1);
    throw error;
  }
}
