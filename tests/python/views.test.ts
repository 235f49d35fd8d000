// Derived views across the bridge: a slice and a transposed view arrive in numpy zero-copy with
// the right values and strides; py.get next to py.set; toJS<T>(); fromPython with `require`.
import assert from "node:assert/strict";
import { fromArray, type TypedView, zeros } from "../../mod.ts";
import { fromPython, toPython } from "../../python.ts";
import { noPython, python } from "../support/python.ts";
import { test } from "../support/harness.ts";
import { refused } from "../support/assertions.ts";

const skip = { skip: noPython };

test("a reversed slice and a transposed view arrive in numpy with their values and strides", () => {
  const py = python();
  using m = zeros([3, 4], "float32");
  m.copyFrom([[0, 1, 2, 3], [4, 5, 6, 7], [8, 9, 10, 11]]);
  using s = m.slice("::-1", "1::2");
  using a = toPython(s, py);
  py.set("a", a);
  py.exec("import numpy as np\na = np.from_dlpack(a)");
  assert.deepEqual(py.eval("a.tolist()").toJS(), [[9, 11], [5, 7], [1, 3]]);
  assert.deepEqual(py.eval("a.strides").toJS(), [-16, 8], "byte strides, negative for the reversed axis");
  assert.equal(py.eval("a.ctypes.data").toJS(), Number(s.address), "zero-copy: element 0 is the same address");
  using t = m.transpose();
  py.set("t", toPython(t, py));
  py.exec("t = np.from_dlpack(t)");
  assert.deepEqual(py.eval("t.shape").toJS(), [4, 3]);
  assert.deepEqual(py.eval("t.strides").toJS(), [4, 16]);
  assert.equal(py.eval("bool(t.flags.f_contiguous)").toJS(), true);
  py.exec("t[1, 2] = -1");
  assert.equal(m.get(2, 1), -1, "numpy writes through the transposed view into the same memory");
  using b = fromArray(new Float64Array([1, 2])).broadcastTo([3, 2]);
  py.set("b", toPython(b, py));
  py.exec("b = np.from_dlpack(b)");
  assert.deepEqual(py.eval("(b.strides, b.flags.writeable, b.tolist())").toJS(), [[0, 8], false, [[1, 2], [1, 2], [
    1,
    2,
  ]]]);
  py.exec("del a, t, b");
}, skip);

test("py.get(name) next to py.set; toJS<T>() typed at the call site", () => {
  const py = python();
  py.set("answer", 42);
  using got = py.get("answer");
  const n = got.toJS<number>();
  assert.equal(n, 42);
  py.exec("import numpy as np\narr = np.arange(6, dtype=np.int16).reshape(2, 3)");
  using arr = py.get("arr");
  const rows = arr.toJS<number[][]>();
  assert.deepEqual(rows[1], [3, 4, 5]);
  refused(() => py.get("no_such_name_here"), "python", /AttributeError/);
  refused(() => py.get(5 as never), "argument");
}, skip);

test("fromPython with require: typed view, refused (and released) when the tensor does not fit", () => {
  const py = python();
  py.exec("import numpy as np\nm = np.ones((2, 3), dtype=np.float64)");
  using m = py.get("m");
  using v = fromPython(m, { require: { dtype: "float64", ndim: 2 } });
  const typed: TypedView<"float64", 2> = v;
  const a: Float64Array = typed.array();
  assert.equal(a[5], 1);
  const e = refused(() => fromPython(m, { require: { dtype: "float32" } }), "requirements", /from Python/);
  assert.deepEqual(e.refusals, ["dtype: required float32, got float64"]);
  refused(() => fromPython(m, { require: { ndim: -1 } }), "requirements", /ndim/);
  py.exec("import sys\nrc = sys.getrefcount(m)");
  assert.ok((py.eval("sys.getrefcount(m)").toJS<number>()) <= (py.get("rc").toJS<number>()), "nothing kept");
}, skip);
