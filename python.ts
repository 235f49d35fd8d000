/**
 * Exchange with the Python array world in-process: an embedded CPython (numpy, JAX, PyTorch,
 * pyarrow...) sharing memory with Deno and Bun through DLPack, without copies.
 *
 * ```ts
 * import { openPython, fromPython, toPython } from "./python.ts";
 * const py = openPython();
 * const np = py.import("numpy");
 * const view = fromPython(np.get("arange").call(6)); // zero-copy
 * const obj = toPython(new Float32Array([1, 2, 3]), py); // np.from_dlpack(obj) shares the memory
 * ```
 * @module
 */
import "./src/ops/mod.ts"; // registers the operations BufferView methods delegate to
import "./src/cuda/copy.ts"; // registers the device paths of the copy engine
export { openPython, type OpenPythonOptions, type PyArg, PyObject, Python } from "./src/python/bridge.ts";
export { fromPython, type FromPythonOptions, toPython, type ToPythonOptions } from "./src/python/interop.ts";
export { type PointerObject } from "./src/native/address.ts";
