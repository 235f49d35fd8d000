/**
 * Exchange with the Python array world in-process: an embedded CPython (numpy, JAX, PyTorch,
 * pyarrow...) sharing memory with Deno and Bun through DLPack, without copies.
 *
 * ```ts
 * import { ready } from "@dlpack-ts/dlpack";
 * import { fromPython, openPython, toPython } from "@dlpack-ts/dlpack/python";
 *
 * await ready();
 * const py = openPython(); // the python3 on PATH, with its numpy
 * const np = py.import("numpy");
 * using view = fromPython(np.get("arange").call(6)); // zero-copy: numpy's memory
 * const data = new Float32Array([1, 2, 3]);
 * using obj = toPython(data, py); // np.from_dlpack(obj) shares data's memory
 * ```
 * @module
 */
import "./src/ops/mod.ts"; // registers the operations BufferView methods delegate to
import "./src/cuda/copy.ts"; // registers the device paths of the copy engine
export { openPython, type OpenPythonOptions, type PyArg, PyObject, Python } from "./src/python/bridge.ts";
export { fromPython, type FromPythonOptions, toPython, type ToPythonOptions } from "./src/python/interop.ts";
export { type PointerObject } from "./src/native/address.ts";
