// examples/integrations/safetensors_onnx.ts: ONNX Runtime reads its inputs straight from a mapped
// safetensors file and its output is saved as one; the file written loads in the reference
// reader (safetensors.numpy) with the same values, and every mapping is released afterwards.
import assert from "node:assert/strict";
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { loadPackage } from "../../examples/integrations/packages.ts";
import type { Ort } from "../../examples/integrations/onnx.ts";
import { runOnSafetensors, writeInputs } from "../../examples/integrations/safetensors_onnx.ts";
import { python } from "../support/python.ts";
import { settledLive } from "../support/assertions.ts";
import { test } from "../support/harness.ts";
import { noSafetensors, nothingLeft } from "../support/io_files.ts";

const loaded = loadPackage<Ort>("onnxruntime-node");
const noOrt = "missing" in loaded ? loaded.missing : false;
const expected = [0, 3, 6, 9, 12, 15, 18, 21, 24, 27, 30, 33];

test("ONNX Runtime runs on tensors mapped from a safetensors file, zero-copy, and its output is saved", async () => {
  const ort = (loaded as { module: Ort }).module;
  const dir = mkdtempSync(`${tmpdir()}/dlpack-ort-st-`);
  try {
    const before = await settledLive();
    writeInputs(`${dir}/in.safetensors`);
    const result = await runOnSafetensors(ort, `${dir}/in.safetensors`, `${dir}/out.safetensors`);
    assert.deepEqual(result.y, expected);
    assert.equal(result.inputsZeroCopy, true, "ONNX Runtime's input arrays are the mapped file's memory");
    assert.deepEqual(result.saved.names, ["Y"]);
    assert.deepEqual({ ...result.saved.metadata }, { model: "y_mul_add.onnx", from: `${dir}/in.safetensors` });
    assert.deepEqual(result.saved.y, [[0, 3, 6], [9, 12, 15], [18, 21, 24], [27, 30, 33]]);
    assert.deepEqual(await settledLive(), before, "every view, export and pin released");
    nothingLeft(dir);
    if (!noSafetensors) {
      const py = python();
      py.exec(
        `from safetensors.numpy import load_file\nout = load_file(${JSON.stringify(`${dir}/out.safetensors`)})["Y"]`,
      );
      using values = py.eval("[out.dtype.str, out.ravel().tolist()]");
      assert.deepEqual(values.toJS(), ["<f4", expected]);
    }
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
}, { skip: noOrt });
