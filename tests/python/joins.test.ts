// concat and stack against numpy's concatenate and stack in the embedded CPython: inputs of every
// layout the copy engine reads (C order, transposed, reversed and stepped slices, broadcasts,
// permuted 3-d views), every axis (negative ones included), several dtypes; values byte for byte.
import assert from "node:assert/strict";
import { arange, asarray, type BufferView, concat, type DType, stack } from "../../mod.ts";
import { fromPython, toPython } from "../../python.ts";
import { noPython, python } from "../support/python.ts";
import { test } from "../support/harness.ts";
import { live } from "../support/assertions.ts";

const skip = { skip: noPython };

function bytesOf(view: BufferView): number[] {
  const a = view.toArray();
  return Array.from(new Uint8Array(a.buffer, a.byteOffset, a.byteLength));
}

/** Asserts `ours` equals numpy's `call` (a function of the list `xs` of the inputs, handed to numpy
 * zero-copy) in dtype, shape and bytes, and is C-contiguous. */
function assertNumpy(ours: BufferView, inputs: readonly BufferView[], call: string, what: string): void {
  const py = python();
  py.exec("xs = []");
  for (const v of inputs) {
    using obj = toPython(v, py);
    py.set("x", obj);
    py.exec("xs.append(np.from_dlpack(x))");
  }
  using result = py.eval(`np.ascontiguousarray(${call})`);
  using theirs = fromPython(result);
  assert.equal(ours.dtype, theirs.dtype, `${what}: dtype`);
  assert.deepEqual(ours.shape, theirs.shape, `${what}: shape`);
  assert.deepEqual(bytesOf(ours), bytesOf(theirs), `${what}: values`);
  assert.ok(ours.ndim === 0 || ours.size <= 1 || ours.strides.at(-1) === 1, `${what}: C order`);
  py.exec("del xs, x");
}

/** A 2x3 matrix of `dtype` (values from `from`) in several layouts, each with its label; `made`
 * collects every view made, to be disposed. */
function layouts2d(dtype: DType, from: number, made: BufferView[]): [string, BufferView][] {
  const keep = (v: BufferView) => {
    made.push(v);
    return v;
  };
  const base = keep(keep(arange(from, from + 6, dtype)).reshape([2, 3]));
  const wide = keep(keep(arange(from, from + 12, dtype)).reshape([2, 6]));
  const tall = keep(keep(arange(from, from + 6, dtype)).reshape([3, 2]));
  const row = keep(arange(from, from + 3, dtype));
  return [
    ["C order", base],
    ["transposed", keep(tall.transpose())],
    ["stepped columns", keep(wide.slice(null, "::2"))],
    ["reversed rows", keep(base.slice("::-1"))],
    ["reversed both", keep(base.slice("::-1", "::-1"))],
    ["broadcast row", keep(row.broadcastTo([2, 3]))],
  ];
}

test("concat: numpy's concatenate of 2-d inputs of every layout along every axis", () => {
  const py = python();
  py.exec("import numpy as np");
  const before = live();
  for (const dtype of ["float32", "int16", "uint8", "float64", "complex64", "float16"] as const) {
    const made: BufferView[] = [];
    const left = layouts2d(dtype, 1, made);
    const right = layouts2d(dtype, 20, made);
    for (const [a, x] of left) {
      for (const [b, y] of right) {
        for (const axis of [0, 1, -1, -2]) {
          using out = concat([x, y, x], axis);
          assertNumpy(out, [x, y, x], `np.concatenate(xs, axis=${axis})`, `${dtype} ${a} + ${b}, axis ${axis}`);
        }
      }
    }
    for (const v of made) v.dispose();
  }
  assert.deepEqual(live(), before, "every input and result was released");
}, skip);

test("stack: numpy's stack of 2-d inputs of every layout along every new axis", () => {
  const py = python();
  py.exec("import numpy as np");
  for (const dtype of ["float32", "int64", "uint16"] as const) {
    const made: BufferView[] = [];
    const left = layouts2d(dtype, 1, made);
    const right = layouts2d(dtype, 7, made);
    for (const [a, x] of left) {
      for (const [b, y] of right) {
        for (const axis of [0, 1, 2, -1, -3]) {
          using out = stack([x, y], axis);
          assertNumpy(out, [x, y], `np.stack(xs, axis=${axis})`, `${dtype} ${a} + ${b}, axis ${axis}`);
        }
      }
    }
    for (const v of made) v.dispose();
  }
  using flags = asarray([[true, false, true], [false, false, true]]);
  using flagsT = flags.transpose();
  using flagsOut = stack([flagsT, flagsT.slice("::-1")], 1);
  assertNumpy(flagsOut, [flagsT, flagsT.slice("::-1")], "np.stack(xs, axis=1)", "bool");
  using t = arange(0, 6, "int32").reshape([2, 3]);
  using f = t.transpose();
  using f0 = f.at(0);
  using f1 = f.at(1);
  using one = stack([f0, f1], -1);
  assertNumpy(one, [f0, f1], "np.stack(xs, axis=-1)", "1-d rows of a transposed view");
}, skip);

test("concat and stack of permuted and sliced 3-d views, and of extent-0 inputs", () => {
  const py = python();
  py.exec("import numpy as np");
  using base = arange(0, 24, "float32").reshape([2, 3, 4]);
  using p = base.permute([2, 0, 1]); // 4x2x3
  using q = base.slice(null, "::-1").permute([2, 0, 1]);
  using r = base.slice("1:").permute([2, 0, 1]); // 4x1x3
  for (const axis of [0, 1, 2, -1]) {
    using out = concat([p, q], axis);
    assertNumpy(out, [p, q], `np.concatenate(xs, axis=${axis})`, `permuted 3-d, axis ${axis}`);
    using s = stack([p, q], axis);
    assertNumpy(s, [p, q], `np.stack(xs, axis=${axis})`, `stack permuted 3-d, axis ${axis}`);
  }
  using mixed = concat([p, r, q], 1);
  assertNumpy(mixed, [p, r, q], "np.concatenate(xs, axis=1)", "different extents along the axis");
  using none = base.slice("0:0");
  using withEmpty = concat([none, base, none]);
  assertNumpy(withEmpty, [none, base, none], "np.concatenate(xs)", "extent-0 inputs");
  using allEmpty = concat([none, none], 2);
  assert.deepEqual(allEmpty.shape, [0, 3, 8]);
}, skip);
