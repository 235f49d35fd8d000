// ONNX Runtime (onnxruntime-node, pinned in tools/integrations/) on numpy memory without copies:
// examples/integrations/onnx.ts, and the committed model is what its generator writes.
import assert from "node:assert/strict";
import { readFileSync } from "node:fs";
import { loadPackage } from "../../examples/integrations/packages.ts";
import { MODEL_PATH, mulAddModel } from "../../examples/integrations/onnx_model.ts";
import { type Ort, runOnNumpy } from "../../examples/integrations/onnx.ts";
import { exportDLPack, importDLPack } from "../../mod.ts";
import { noPython, python } from "../support/python.ts";
import { settledLive } from "../support/assertions.ts";
import { test } from "../support/harness.ts";

const loaded = loadPackage<Ort>("onnxruntime-node");
const noOrt = "missing" in loaded ? loaded.missing : false;

test("the committed y_mul_add.onnx is what examples/integrations/onnx_model.ts writes", () => {
  const committed = readFileSync(MODEL_PATH);
  assert.deepEqual(new Uint8Array(committed), mulAddModel());
  assert.ok(committed.length < 400, `${committed.length} bytes`);
});

test("ONNX Runtime runs on numpy arrays imported zero-copy and writes into a numpy array", async () => {
  const ort = (loaded as { module: Ort }).module;
  const before = await settledLive();
  const result = await runOnNumpy(ort, python());
  assert.deepEqual(result.y, [0, 3, 6, 9, 12, 15, 18, 21, 24, 27, 30, 33]);
  assert.equal(result.inputsZeroCopy, true, "the input Float32Arrays are numpy's memory");
  assert.equal(result.outputZeroCopy, true, "numpy reads ONNX Runtime's own output in place");
  assert.equal(result.numpyAgrees, true);
  assert.deepEqual(await settledLive(), before, "every view, export and pin released");
}, { skip: noOrt || noPython });

test("ONNX Runtime takes a strided view's values after toArray() (it reads C order only)", async () => {
  const ort = (loaded as { module: Ort }).module;
  const session = await ort.InferenceSession.create(MODEL_PATH);
  // The transpose of a 3x4 matrix: F order, so array() is not the [4, 3] C-order data ORT expects.
  const data = Float32Array.from({ length: 12 }, (_, i) => i);
  using t = importDLPack(exportDLPack(data, { shape: [4, 3], strides: [1, 4] }));
  assert.equal(t.cContiguous, false);
  const a = new ort.Tensor("float32", t.toArray() as Float32Array, t.shape);
  const ones = new ort.Tensor("float32", new Float32Array(12).fill(1), [4, 3]);
  const out = (await session.run({ A: a, B: ones })).Y;
  assert.ok(out !== undefined, "the model's output Y");
  const y = out.data;
  for (let i = 0; i < 4; i++) for (let j = 0; j < 3; j++) assert.equal(y[i * 3 + j], 2 * (t.get(i, j) as number));
  await session.release();
}, { skip: noOrt });
