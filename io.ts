/**
 * Tensors on disk: safetensors, .npy and .npz files as zero-copy views over one memory mapping of the
 * file, shared with numpy, PyTorch or ONNX Runtime through DLPack like any other view, and views
 * written back to such files atomically.
 *
 * ```ts
 * import { ready, zeros } from "@dlpack-ts/dlpack"; // Bun: "dlpack-ts", "dlpack-ts/io"
 * import { loadSafetensors, saveNpy, saveSafetensors } from "@dlpack-ts/dlpack/io";
 * import { mkdtempSync, rmSync } from "node:fs";
 * import { tmpdir } from "node:os";
 *
 * await ready();
 * const dir = mkdtempSync(`${tmpdir()}/weights-`);
 * using w = zeros([2, 3], "float32");
 * w.fill(0.5);
 * saveSafetensors(`${dir}/model.safetensors`, { "encoder.weight": w }, { format: "pt" }); // written atomically
 * using model = loadSafetensors(`${dir}/model.safetensors`); // mapped, read-only, nothing copied
 * const weight = model.tensors["encoder.weight"]!;
 * console.log(weight.dtype, weight.shape, model.metadata); // float32 [2, 3] { format: "pt" }
 * saveNpy(`${dir}/weight_t.npy`, weight.transpose()); // np.load reads the transpose (Fortran order, as np.save)
 * rmSync(dir, { recursive: true }); // the views keep reading the mapped file until they are disposed
 * ```
 *
 * A file that is not what its format says is refused with `DLPackError` ("file") before any view
 * exists. A mapped file truncated by another process while mapped raises SIGBUS when the lost
 * pages are read: `{ copy: true }` reads the file into memory instead (docs/io.md,
 * docs/reliability.md).
 * @module
 */
export {
  loadNpy,
  loadNpz,
  type LoadOptions,
  loadSafetensors,
  type NpzContents,
  openSafetensors,
  type SafetensorsContents,
  SafetensorsFile,
  type TensorInfo,
} from "./src/io/load.ts";
export { type NpzOptions, saveNpy, saveNpz, saveSafetensors } from "./src/io/save.ts";
export { type Writable } from "./src/io/views.ts";
export { NPY_DTYPES } from "./src/io/npy.ts";
export { SAFETENSORS_DTYPES } from "./src/io/safetensors.ts";
