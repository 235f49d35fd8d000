// The view operations a numpy user reaches for first, against numpy on several layouts (C order,
// transposed, reversed and stepped slices, Fortran order, empty, size 1, 0-d): flip, T, ravel,
// flatten, item, length, itemsize, varargs transpose/permute/reshape, negative get/set indices,
// astype over strided layouts; and every argument hostile.
import assert from "node:assert/strict";
import { type BufferView, BufferView as View, fromArray, zeros } from "../../mod.ts";
import { fromPython } from "../../python.ts";
import { noPython, python } from "../support/python.ts";
import { test } from "../support/harness.ts";
import { live, refused } from "../support/assertions.ts";

const skip = { skip: noPython };

/** numpy expressions over `b` (float32, 3 x 4 x 5) and the layouts they make. */
const LAYOUTS = [
  "b",
  "b.transpose(2, 0, 1)",
  "b[::-1, 1:, ::2]",
  "b[:, ::-2, :]",
  "np.asfortranarray(b)",
  "b[1]",
  "b[:, 2, 1:4]",
  "b[::-1, 3]",
  "b[:0]",
  "b[1:2, 2:3, 3:4]",
  "b[2, 1]",
];

function viewOf(expr: string): BufferView {
  const py = python();
  py.exec(`a = ${expr}`);
  return fromPython(py.eval("a"));
}

function numpy(expr: string): unknown {
  return python().eval(`(${expr}).tolist()`).toJS();
}

/** Whether `inner`'s elements lie in `outer`'s memory (a view, not a copy). */
function within(inner: BufferView, outer: BufferView): boolean {
  const item = BigInt(outer.itemsize);
  const lo = outer.address - BigInt(outer.spanOffset) * item;
  const hi = lo + BigInt(Math.max(outer.array().byteLength, 1));
  const at = inner.address;
  return at >= lo && at < hi;
}

test("flip, T, ravel, flatten, length and itemsize match numpy on every layout", () => {
  const py = python();
  py.exec("import numpy as np\nb = np.arange(60, dtype=np.float32).reshape(3, 4, 5)");
  const before = live();
  for (const expr of LAYOUTS) {
    using v = viewOf(expr);
    const ndim = v.ndim;
    assert.deepEqual(v.toNested(), numpy("a"), expr);
    using f = v.flip();
    assert.deepEqual(f.toNested(), numpy("np.flip(a)"), `${expr}: flip()`);
    assert.ok(f.size === 0 || within(f, v), `${expr}: flip() is zero-copy`);
    for (let axis = -ndim; axis < ndim; axis++) {
      using g = v.flip(axis);
      assert.deepEqual(g.toNested(), numpy(`np.flip(a, ${axis})`), `${expr}: flip(${axis})`);
    }
    if (ndim >= 2) {
      using g = v.flip([0, -1]);
      assert.deepEqual(g.toNested(), numpy("np.flip(a, (0, -1))"), `${expr}: flip([0, -1])`);
    }
    using t = v.T;
    assert.deepEqual(t.toNested(), numpy("a.T"), `${expr}: T`);
    assert.deepEqual(t.strides, [...v.strides].reverse());
    using r = v.ravel();
    assert.deepEqual(r.toNested(), numpy("a.ravel()"), `${expr}: ravel()`);
    // A view exactly where numpy's ravel is one.
    const shares = py.eval("bool(np.shares_memory(a, a.ravel()))").toJS() as boolean;
    if (v.size > 0) assert.equal(within(r, v), shares, `${expr}: ravel() is a view iff numpy's is`);
    using c = v.flatten();
    assert.deepEqual(c.toNested(), numpy("a.flatten()"), `${expr}: flatten()`);
    assert.ok(c.size === 0 || !within(c, v), `${expr}: flatten() copies`);
    assert.equal(c.ndim, 1);
    assert.equal(v.itemsize, py.eval("a.itemsize").toJS());
    if (ndim === 0) refused(() => v.length, "shape", /0-d/);
    else assert.equal(v.length, py.eval("len(a)").toJS(), `${expr}: length`);
    if (v.size === 1) assert.equal(v.item(), py.eval("a.item()").toJS(), `${expr}: item()`);
    else refused(() => v.item(), "shape", /exactly one element/);
    using i16 = v.astype("int16");
    assert.deepEqual(i16.toNested(), numpy("a.astype(np.int16)"), `${expr}: astype`);
    assert.ok(i16.cContiguous);
  }
  assert.deepEqual(live(), before);
}, skip);

test("flip writes through; flatten does not; get/set take numpy's negative indices", () => {
  const py = python();
  py.exec("import numpy as np\nb = np.arange(60, dtype=np.float32).reshape(3, 4, 5)");
  using v = viewOf("b[::-1, 1:, ::2]");
  using f = v.flip(1);
  assert.deepEqual(f.strides, [v.strides[0], -v.strides[1]!, v.strides[2]]);
  f.set(-7, 0, 0, 0);
  assert.equal(py.eval("float(a[0, -1, 0])").toJS(), -7, "flip(1)'s first row is numpy's last");
  using c = v.flatten();
  c.set(99, 0);
  assert.equal(py.eval("float(a[0, 0, 0])").toJS(), v.get(0, 0, 0));
  assert.notEqual(v.get(0, 0, 0), 99);
  // Negative indices: -n..-1 count from the end, as numpy's.
  for (const [i, j, k] of [[-1, -1, -1], [-3, 0, -3], [0, -2, 1], [-2, -3, -1]] as const) {
    assert.equal(v.get(i, j, k), py.eval(`float(a[${i}, ${j}, ${k}])`).toJS(), `get(${i}, ${j}, ${k})`);
    v.set(1000 + i + j + k, i, j, k);
    assert.equal(py.eval(`float(a[${i}, ${j}, ${k}])`).toJS(), 1000 + i + j + k, `set(_, ${i}, ${j}, ${k})`);
  }
  assert.equal(v.get(-0, 0, 0), v.get(0, 0, 0));
  refused(() => v.get(-4, 0, 0), "shape", /index -4 is out of range for dimension 0 of extent 3/);
  refused(() => v.get(3, 0, 0), "shape", /index 3 is out of range/);
  refused(() => v.set(1, 0, 0, -4), "shape", /index -4 is out of range for dimension 2 of extent 3/);
  refused(() => v.get(-Infinity, 0, 0), "shape");
  refused(() => v.get(NaN, 0, 0), "shape");
  refused(() => v.get(-(2 ** 60), 0, 0), "shape");
  refused(() => v.get(-0.5, 0, 0), "shape", /not an integer/);
  py.exec("del a");
}, skip);

test("varargs transpose, permute and reshape beside the array forms", () => {
  using v = fromArray(Float64Array.from({ length: 72 }, (_, i) => i), { shape: [2, 4, 9] });
  using a = v.transpose(2, 0, 1);
  using b = v.transpose([2, 0, 1]);
  using c = v.permute(2, 0, 1);
  using d = v.permute([2, 0, 1]);
  for (const x of [a, b, c, d]) {
    assert.deepEqual(x.shape, [9, 2, 4]);
    assert.equal(x.get(8, 1, 3), v.get(1, 3, 8));
  }
  using reversed = v.transpose();
  assert.deepEqual(reversed.shape, [9, 4, 2]);
  using r1 = v.reshape(2, 36);
  using r2 = v.reshape([2, 36]);
  using r3 = v.reshape(-1);
  using r4 = v.reshape(8, -1, 3);
  assert.deepEqual([r1.shape, r2.shape, r3.shape, r4.shape], [[2, 36], [2, 36], [72], [8, 3, 3]]);
  assert.equal(r1.get(1, 35), 71);
  refused(() => v.transpose(0, 0, 1), "argument", /twice/);
  refused(() => v.transpose(0, 1), "shape");
  refused(() => v.permute(), "shape");
  refused(() => v.reshape(), "shape");
  refused(() => v.reshape(5, 5), "shape");
  refused(() => v.reshape(2, "36" as never), "argument");
  refused(() => v.reshape([2, 36] as never, 1 as never), "argument");
  using tv = v.T;
  refused(() => tv.reshape(72), "strides", /needs a copy/);
});

test("astype: same dtype, copy: false is the same memory; a copy otherwise; typed results", () => {
  using v = fromArray(new Float32Array([1.5, -2.5, 3.5, 4.5]), { shape: [2, 2] });
  using same = v.astype("float32", { copy: false });
  assert.equal(same.address, v.address);
  same.set(9, 0, 0);
  assert.equal(v.get(0, 0), 9);
  v.dispose();
  assert.equal(same.get(0, 0), 9, "the second handle holds its own share");
  using copied = same.astype("float32");
  assert.notEqual(copied.address, same.address);
  using wide = same.astype("float64");
  const f64: Float64Array = wide.array();
  assert.deepEqual([...f64], [9, -2.5, 3.5, 4.5]);
  using narrow = same.astype("int8");
  const i8: Int8Array = narrow.array();
  assert.deepEqual([...i8], [9, -2, 3, 4]);
  refused(() => same.astype("int8", { copy: false }), "dtype", /needs a copy/);
  using reversed = same.flip();
  using flipped = reversed.astype("complex64");
  assert.deepEqual(flipped.toNested(), [[[4.5, 0], [3.5, 0]], [[-2.5, 0], [9, 0]]]);
  using b = flipped.astype("bool");
  assert.deepEqual(b.toNested(), [[true, true], [true, true]]);
  // Packed sub-byte data: astype converts from and to it; flip of packed data is refused where an
  // element would start inside a byte.
  using fp4 = same.astype("float4_e2m1fn");
  assert.deepEqual(fp4.toNested(), [[6, -2], [4, 4]]);
  using back = fp4.astype("float32");
  assert.deepEqual(back.toNested(), [[6, -2], [4, 4]]);
  refused(() => fp4.flip(1), "byte_offset");
  using none = zeros([0, 3], "int32");
  using empty = none.astype("float16");
  assert.deepEqual(empty.shape, [0, 3]);
});

test("every argument hostile: DLPackError with a code, never a crash", () => {
  using v = zeros([2, 3], "float32");
  const flips: [unknown, string][] = [
    ["0", "argument"],
    [1.5, "argument"],
    [NaN, "argument"],
    [Infinity, "argument"],
    [2 ** 60, "argument"],
    [2, "shape"],
    [-3, "shape"],
    [{}, "argument"],
    [[0, 0], "argument"],
    [[0, "1"], "argument"],
    [[99], "shape"],
  ];
  for (const [bad, code] of flips) refused(() => v.flip(bad as never), code, `flip(${String(bad)})`);
  // A caller's own exception passes through unchanged, as everywhere in the library.
  const trap = new Proxy([0], {
    get() {
      throw new Error("trap");
    },
  });
  assert.throws(() => v.flip(trap as never), /trap/);
  // A list whose length is huge: refused before anything is read.
  refused(() => v.flip({ length: 1e9 } as never), "argument");
  refused(() => v.flip(Object.assign([], { length: 100 }) as never), "rank");
  for (const bad of ["float33", "", 32, null, undefined, {}, ["float32"], new String("float32")] as never[]) {
    refused(() => v.astype(bad), "dtype", `astype(${String(bad)})`);
  }
  refused(() => v.astype("int8", { copy: "no" as never }), "argument");
  refused(() => v.astype("int8", 5 as never), "argument");
  let reads = 0;
  const disposing = {
    get copy() {
      reads++;
      v2.dispose();
      return true;
    },
  };
  const v2 = zeros([2], "float64");
  refused(() => v2.astype("int8", disposing), "disposed", "an option getter that disposes the view");
  assert.equal(reads, 1, "the option is read once");
  const throwing = new Proxy({}, {
    get() {
      throw new RangeError("hostile getter");
    },
  });
  assert.throws(() => v.astype("int8", throwing as never), RangeError, "a caller's exception passes through");
  refused(() => v.copyFrom(v, { cast: 1 as never }), "argument");
  // Methods and getters taken off the prototype.
  for (const name of ["astype", "flip", "item", "ravel", "flatten", "transpose", "permute", "reshape"] as const) {
    refused(() => (View.prototype[name] as (...a: unknown[]) => unknown).call({}, "float32"), "argument", name);
  }
  for (const name of ["T", "length", "itemsize"]) {
    const getter = Object.getOwnPropertyDescriptor(View.prototype, name)!.get!;
    refused(() => getter.call(Object.create(View.prototype)), "argument", name);
  }
  // A disposed view refuses every one of them.
  const gone = zeros([1], "int8");
  gone.dispose();
  refused(() => gone.astype("int16"), "disposed");
  refused(() => gone.flip(), "disposed");
  refused(() => gone.item(), "disposed");
  refused(() => gone.ravel(), "disposed");
  refused(() => gone.flatten(), "disposed");
  refused(() => gone.T, "disposed");
  refused(() => gone.reshape(1), "disposed");
});
