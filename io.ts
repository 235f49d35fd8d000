/**
 * Tensors on disk: safetensors and .npy files as zero-copy views over one memory mapping of the
 * file, shared with numpy, PyTorch or ONNX Runtime through DLPack like any other view, and views
 * written back to such files atomically.
 *
 * ```ts
 * import { loadSafetensors, saveNpy } from "./io.ts";
 * using model = loadSafetensors("model.safetensors"); // mapped, read-only, nothing copied
 * const w = model.tensors["encoder.weight"]!;
 * console.log(w.dtype, w.shape, model.metadata);
 * saveNpy("weight.npy", w.transpose()); // written in C order, atomically
 * ```
 *
 * A file that is not what its format says is refused with `DLPackError` ("file") before any view
 * exists. A mapped file truncated by another process while mapped raises SIGBUS when the lost
 * pages are read: `{ copy: true }` reads the file into memory instead (docs/io.md,
 * docs/reliability.md).
 * @module
 */
import "./src/ops/mod.ts"; // registers the operations BufferView methods delegate to
import "./src/cuda/copy.ts"; // registers the device paths of the copy engine
export {
  loadNpy,
  type LoadOptions,
  loadSafetensors,
  openSafetensors,
  type SafetensorsContents,
  SafetensorsFile,
  type TensorInfo,
} from "./src/io/load.ts";
export { saveNpy, saveSafetensors } from "./src/io/save.ts";
export { type Writable } from "./src/io/views.ts";
export { NPY_DTYPES } from "./src/io/npy.ts";
export { SAFETENSORS_DTYPES } from "./src/io/safetensors.ts";
