/**
 * Weights from a safetensors file into ONNX Runtime without a copy, and the result back to disk:
 * the file is mapped (`loadSafetensors`), the Float32Arrays ONNX Runtime gets as inputs are views
 * of the mapping itself (`view.array()`), and the output it computes is saved as a new safetensors
 * file (`saveSafetensors`, written atomically). The model is `y_mul_add.onnx` (`Y = A * B + A`,
 * shape [N, 3]); without an input file the example writes one first.
 *
 * ```sh
 * tools/npm.sh
 * deno run --allow-ffi --allow-read --allow-write --allow-env examples/integrations/safetensors_onnx.ts [in] [out]
 * bun run examples/integrations/safetensors_onnx.ts [in] [out]
 * ```
 * @module
 */
import { existsSync } from "node:fs";
import { exportDLPack, fromArray, importDLPack } from "../../mod.ts";
import { loadSafetensors, saveSafetensors } from "../../io.ts";
import { MODEL_PATH } from "./onnx_model.ts";
import type { Ort } from "./onnx.ts";
import { loadPackage } from "./packages.ts";

/** What the example saw. */
export interface SafetensorsOnnxResult {
  /** `Y` as ONNX Runtime computed it, row by row. */
  readonly y: number[];
  /** Whether the arrays ONNX Runtime was given are the mapped file's memory (same addresses). */
  readonly inputsZeroCopy: boolean;
  /** The tensors and metadata of the file written, read back. */
  readonly saved: { readonly names: string[]; readonly metadata: Record<string, string> | null; readonly y: unknown };
}

/** Writes an input file with tensors `A` and `B` (float32, [4, 3]). */
export function writeInputs(path: string): void {
  const a = Float32Array.from({ length: 12 }, (_, i) => i);
  const b = new Float32Array(12).fill(2);
  using av = fromArray(a, { shape: [4, 3] });
  using bv = fromArray(b, { shape: [4, 3] });
  saveSafetensors(path, { A: av, B: bv }, { about: "inputs of y_mul_add.onnx" });
}

/** Runs the model on the tensors `A` and `B` of the safetensors file `input`; saves `Y` to `output`. */
export async function runOnSafetensors(ort: Ort, input: string, output: string): Promise<SafetensorsOnnxResult> {
  const session = await ort.InferenceSession.create(MODEL_PATH);
  try {
    using weights = loadSafetensors(input);
    const a = weights.tensors.A!.require({ dtype: "float32", ndim: 2, shape: [null, 3], contiguous: "C" });
    const b = weights.tensors.B!.require({ dtype: "float32", ndim: 2, shape: [null, 3], contiguous: "C" });
    // A C-contiguous view's array() is exactly its elements, in the mapping: ONNX Runtime reads them there.
    const feeds = {
      A: new ort.Tensor("float32", a.array() as Float32Array, a.shape),
      B: new ort.Tensor("float32", b.array() as Float32Array, b.shape),
    };
    const inputsZeroCopy = [[feeds.A, a], [feeds.B, b]].every(([tensor, view]) => {
      using seen = importDLPack(exportDLPack((tensor as typeof feeds.A).data));
      return seen.address === (view as typeof a).address;
    });
    const y = (await session.run(feeds)).Y;
    if (y === undefined) throw new Error("the model has no output Y");
    using out = fromArray(y.data, { shape: y.dims });
    saveSafetensors(output, { Y: out }, { model: "y_mul_add.onnx", from: input });
    using saved = loadSafetensors(output);
    return {
      y: [...y.data],
      inputsZeroCopy,
      saved: { names: Object.keys(saved.tensors), metadata: saved.metadata, y: saved.tensors.Y!.toNested() },
    };
  } finally {
    await session.release();
  }
}

if (import.meta.main) {
  const loaded = loadPackage<Ort>("onnxruntime-node");
  if ("missing" in loaded) throw new Error(loaded.missing);
  const args = (globalThis as { Deno?: { args: string[] } }).Deno?.args ??
    (globalThis as unknown as { process: { argv: string[] } }).process.argv.slice(2);
  const input = args[0] ?? "inputs.safetensors";
  const output = args[1] ?? "outputs.safetensors";
  if (!existsSync(input)) writeInputs(input);
  const result = await runOnSafetensors(loaded.module, input, output);
  console.log(result);
  if (!result.inputsZeroCopy) throw new Error("ONNX Runtime did not get the mapped memory");
}
