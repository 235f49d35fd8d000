// scijs ndarray (pinned in tools/integrations/) over views: examples/integrations/ndarray.ts.
import assert from "node:assert/strict";
import { loadPackage } from "../../examples/integrations/packages.ts";
import { type NdArrayFn, toNdarray } from "../../examples/integrations/ndarray.ts";
import { type BufferView, exportDLPack, importDLPack, zeros } from "../../mod.ts";
import { fromPython } from "../../python.ts";
import { noPython, python } from "../support/python.ts";
import { test } from "../support/harness.ts";

const loaded = loadPackage<NdArrayFn>("ndarray");
const noNdarray = "missing" in loaded ? loaded.missing : false;

/** Every element of the ndarray equals the view's, and a write through the ndarray lands in the view. */
function agrees(view: BufferView): void {
  const nd = toNdarray((loaded as { module: NdArrayFn }).module, view);
  const [rows, cols] = view.shape;
  if (rows === undefined || cols === undefined) throw new Error(`agrees() takes a 2-d view, got ${view.ndim}-d`);
  for (let i = 0; i < rows; i++) for (let j = 0; j < cols; j++) assert.equal(nd.get(i, j), view.get(i, j), `${i},${j}`);
  if (view.writable) {
    nd.set(rows - 1, 0, -1);
    assert.equal(view.get(rows - 1, 0), -1);
  }
}

test("ndarray(view.array(), shape, strides, spanOffset): C, F and negative strides", () => {
  const data = () => Float64Array.from({ length: 12 }, (_, i) => i);
  using c = importDLPack(exportDLPack(data(), { shape: [3, 4] }));
  agrees(c);
  using f = importDLPack(exportDLPack(data(), { shape: [3, 4], strides: [1, 3] }));
  agrees(f);
  // Both axes reversed: element 0 is the last one in memory.
  using both = importDLPack(exportDLPack(data(), { shape: [3, 4], strides: [-4, -1], offset: 11 }));
  assert.equal(both.spanOffset, 11);
  agrees(both);
  // Every other column, rows reversed.
  using gaps = importDLPack(exportDLPack(data(), { shape: [3, 2], strides: [-4, 2], offset: 8 }));
  agrees(gaps);
  using ints = zeros([2, 3], "int16");
  agrees(ints);
}, { skip: noNdarray });

test("ndarray over a reversed numpy array, and refused for complex dtypes", () => {
  const py = python();
  py.exec("import numpy as np\nrev = np.arange(12.0).reshape(3, 4)[::-1, ::2]");
  using view = fromPython(py.eval("rev"));
  assert.deepEqual(view.strides, [-4, 2]);
  agrees(view);
  assert.equal(py.eval("float(rev[2, 0])").toJS(), -1, "numpy sees the ndarray's write");
  using cx = zeros([2, 2], "complex64");
  assert.throws(() => toNdarray((loaded as { module: NdArrayFn }).module, cx), /complex64/);
  py.exec("del rev");
}, { skip: noNdarray || noPython });
