/**
 * ONNX Runtime on numpy memory, no copies on the way in or out: numpy arrays imported zero-copy
 * (`fromPython`) are the model's inputs, its output is written straight into a numpy array given
 * as a pre-allocated output, and an output ONNX Runtime allocated itself goes back to numpy
 * zero-copy (`toPython` + `np.from_dlpack`). The model is `y_mul_add.onnx` (`Y = A * B + A`,
 * written by onnx_model.ts).
 *
 * ```sh
 * tools/npm.sh && export PYTHONPATH=$(tools/python.sh numpy)
 * deno run --allow-ffi --allow-read --allow-env --allow-run examples/integrations/onnx.ts
 * bun run examples/integrations/onnx.ts
 * ```
 * @module
 */
import { exportDLPack, importDLPack } from "../../mod.ts";
import { fromPython, openPython, type Python, toPython } from "../../python.ts";
import { MODEL_PATH } from "./onnx_model.ts";
import { loadPackage } from "./packages.ts";

/** The part of `onnxruntime-node`'s API this example uses. */
export interface Ort {
  readonly Tensor: new (type: "float32", data: Float32Array, dims: readonly number[]) => OrtTensor;
  readonly InferenceSession: { create(path: string): Promise<OrtSession> };
}
/** An `ort.Tensor`. */
export interface OrtTensor {
  readonly data: Float32Array;
  readonly dims: readonly number[];
}
/** An `ort.InferenceSession`. */
export interface OrtSession {
  run(feeds: Record<string, OrtTensor>, fetches?: Record<string, OrtTensor>): Promise<Record<string, OrtTensor>>;
  release(): Promise<void>;
}

/** What the example saw: the values and where they lived. */
export interface OnnxResult {
  /** `Y` as numpy read it from the pre-allocated output (numpy's own array). */
  readonly y: number[];
  /** Whether the input Float32Arrays ONNX Runtime got were numpy's memory (same addresses). */
  readonly inputsZeroCopy: boolean;
  /** Whether numpy's view of ONNX Runtime's own output has that output's address. */
  readonly outputZeroCopy: boolean;
  /** numpy's check of the result, `np.array_equal(y, a * b + a)`, for both outputs. */
  readonly numpyAgrees: boolean;
}

/** Runs the model on numpy arrays, as described in the module comment. */
export async function runOnNumpy(ort: Ort, py: Python): Promise<OnnxResult> {
  py.exec(
    "import numpy as np\n" +
      "a = np.arange(12, dtype=np.float32).reshape(4, 3)\n" +
      "b = np.full((4, 3), 2, dtype=np.float32)\n" +
      "y = np.empty((4, 3), dtype=np.float32)",
  );
  const session = await ort.InferenceSession.create(MODEL_PATH);
  using a = fromPython(py.eval("a"));
  using b = fromPython(py.eval("b"));
  using y = fromPython(py.eval("y"));
  // A C-contiguous view's array() starts at element 0 and holds exactly its elements.
  for (const v of [a, b, y]) v.require({ dtype: "float32", contiguous: "C" });
  const tensor = (v: typeof a) => new ort.Tensor("float32", v.array() as Float32Array, v.shape);
  const inputsZeroCopy = a.address === BigInt(py.eval("a.ctypes.data").toJS() as number) &&
    b.address === BigInt(py.eval("b.ctypes.data").toJS() as number);
  // Pre-allocated output: ONNX Runtime writes Y into numpy's array y.
  await session.run({ A: tensor(a), B: tensor(b) }, { Y: tensor(y) });
  // Its own output: a JS Float32Array, handed to numpy without a copy.
  const own = (await session.run({ A: tensor(a), B: tensor(b) })).Y;
  if (own === undefined) throw new Error("the model has no output Y");
  using ownView = importDLPack(exportDLPack(own.data, { shape: own.dims }));
  using handed = toPython(own.data, py, { shape: own.dims });
  py.set("handed", handed);
  py.exec("z = np.from_dlpack(handed)");
  const outputZeroCopy = ownView.address === BigInt(py.eval("z.ctypes.data").toJS() as number);
  const numpyAgrees = py.eval("bool(np.array_equal(y, a * b + a) and np.array_equal(z, y))").toJS() === true;
  const values = py.eval("y.ravel().tolist()").toJS() as number[];
  py.exec("del z, handed");
  await session.release();
  return { y: values, inputsZeroCopy, outputZeroCopy, numpyAgrees };
}

if (import.meta.main) {
  const loaded = loadPackage<Ort>("onnxruntime-node");
  if ("missing" in loaded) throw new Error(loaded.missing);
  const result = await runOnNumpy(loaded.module, openPython());
  console.log(result);
  if (!result.inputsZeroCopy || !result.outputZeroCopy || !result.numpyAgrees) throw new Error("onnx example failed");
}
