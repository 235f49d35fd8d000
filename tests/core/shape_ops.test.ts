// The view operations: slice / at / transpose / permute / reshape / broadcastTo / squeeze /
// expandDims as zero-copy views sharing the owner, iteration, toNested, fill, copyFrom(nested),
// fromArray, and the pure shape arithmetic under them (src/facts/shape.ts).
import assert from "node:assert/strict";
import { type BufferView, empty, exportDLPack, fromArray, importDLPack, MAX_RANK, stats, zeros } from "../../mod.ts";
import { rangeOf, reshapeLayout, sliceLayout } from "../../src/facts/shape.ts";
import { deleted, make } from "../support/producer.ts";
import { test } from "../support/harness.ts";
import { live, refused } from "../support/assertions.ts";

/** 0, 1, 2, ... in a library allocation of `shape`. */
function iota(shape: number[]): BufferView {
  const v = empty(shape, "float64");
  const a = v.array();
  for (let i = 0; i < a.length; i++) a[i] = i;
  return v;
}

/** numpy's tolist() of a C-order range, computed without the library. */
function nested(shape: number[], at = 0, d = 0): unknown {
  if (d === shape.length) return at;
  const inner = shape.slice(d + 1).reduce((a, b) => a * b, 1);
  return Array.from({ length: shape[d]! }, (_, i) => nested(shape, at + i * inner, d + 1));
}

test("slice: integers, null, strings and ranges, negative steps, ellipsis, clamping", () => {
  const before = live();
  using v = iota([3, 4]);
  using row = v.slice(1);
  assert.deepEqual(row.shape, [4]);
  assert.deepEqual(row.toNested(), [4, 5, 6, 7]);
  using col = v.slice(null, -1);
  assert.deepEqual(col.toNested(), [3, 7, 11]);
  using rev = v.slice("::-1", "1:3");
  assert.deepEqual(rev.toNested(), [[9, 10], [5, 6], [1, 2]]);
  assert.deepEqual(rev.strides, [-4, 1]);
  assert.equal(rev.spanOffset, 8, "element 0 sits at the last row's start in array()");
  using stepped = v.slice({ start: -1, step: -2 }, { step: 3 });
  assert.deepEqual(stepped.toNested(), [[8, 11], [0, 3]]);
  using tail = v.slice("...", "2:");
  assert.deepEqual(tail.toNested(), [[2, 3], [6, 7], [10, 11]]);
  using clamped = v.slice("-100:100", "5:");
  assert.deepEqual(clamped.shape, [3, 0], "bounds are clamped like Python's");
  assert.equal(clamped.size, 0);
  using all = v.slice();
  assert.deepEqual(all.toNested(), v.toNested());
  assert.equal(row.address, v.address + 32n, "zero-copy: element 0 moved by one row of float64");
  row.set(-1, 0);
  assert.equal(v.get(1, 0), -1, "writes reach the base's memory");
  assert.equal(row.owner, "dlpack-ts");
  assert.deepEqual(live(), { ...before, allocations: before.allocations + 1 }, "one allocation under every view");
});

test("slice agrees with Python's slice semantics (brute force over bounds and steps)", () => {
  // The pure arithmetic: element 0 of a reversed axis is its last element.
  assert.deepEqual(sliceLayout([4, 5], [5, 1], ["::-1", 2]), { shape: [4], strides: [-5], offset: 17 });
  assert.deepEqual(sliceLayout([4, 5], [5, 1], ["...", "1:4:2"]), { shape: [4, 2], strides: [5, 2], offset: 1 });
  for (const n of [0, 1, 5]) {
    for (const step of [-3, -1, 1, 2]) {
      for (const start of [null, -7, -1, 0, 2, 6]) {
        for (const stop of [null, -7, -2, 0, 3, 9]) {
          // Python: range(*slice(start, stop, step).indices(n))
          const s = start === null ? (step > 0 ? 0 : n - 1) : start;
          const e = stop === null ? (step > 0 ? n : -1 - n) : stop;
          const norm = (x: number, hi: number) => x < 0 ? Math.max(x + n, step > 0 ? 0 : -1) : Math.min(x, hi);
          const lo = norm(s, step > 0 ? n : n - 1);
          const hi = stop === null ? (step > 0 ? n : -1) : norm(e, step > 0 ? n : n - 1);
          const expected: number[] = [];
          for (let i = lo; step > 0 ? i < hi : i > hi; i += step) expected.push(i);
          const [first, st, length] = rangeOf(start, stop, step, n);
          const got = Array.from({ length }, (_, k) => first + k * st);
          assert.deepEqual(got, expected, `n=${n} ${start}:${stop}:${step}`);
        }
      }
    }
  }
});

test("at(), transpose(), permute(), squeeze(), expandDims()", () => {
  using v = iota([2, 3, 4]);
  using a = v.at(1, -1);
  assert.deepEqual(a.toNested(), [20, 21, 22, 23]);
  using scalar = v.at(1, 2, 3);
  assert.equal(scalar.ndim, 0);
  assert.equal(scalar.toNested(), 23);
  using t = v.transpose();
  assert.deepEqual(t.shape, [4, 3, 2]);
  assert.deepEqual(t.strides, [1, 4, 12]);
  assert.equal(t.fContiguous, true);
  assert.equal(t.cContiguous, false);
  assert.equal(t.get(3, 2, 1), v.get(1, 2, 3));
  using p = v.permute([2, 0, -2]);
  assert.deepEqual(p.shape, [4, 2, 3]);
  assert.equal(p.get(3, 1, 2), v.get(1, 2, 3));
  using e = v.expandDims(1);
  assert.deepEqual(e.shape, [2, 1, 3, 4]);
  assert.equal(e.cContiguous, true, "a new extent-1 axis keeps the layout contiguous");
  using last = v.expandDims(-1);
  assert.deepEqual(last.shape, [2, 3, 4, 1]);
  using s = e.squeeze();
  assert.deepEqual(s.shape, [2, 3, 4]);
  using s1 = last.squeeze(3);
  assert.deepEqual(s1.shape, [2, 3, 4]);
  refused(() => v.squeeze(0), "shape", /extent 2, not 1/);
  refused(() => v.at(2), "shape", /out of range/);
  refused(() => v.at(0, 0, 0, 0), "shape");
  refused(() => v.permute([0, 0, 1]), "argument", /twice/);
  refused(() => v.permute([0, 1]), "shape");
  refused(() => v.permute([0, 1, 3]), "shape", /out of range/);
  refused(() => v.expandDims(5), "shape");
});

test("reshape: a view when strides allow (numpy's rule), else a DLPackError pointing to copy()", () => {
  using v = iota([2, 3, 4]);
  using r = v.reshape([6, -1]);
  assert.deepEqual(r.shape, [6, 4]);
  assert.deepEqual(r.toNested(), nested([6, 4]));
  assert.equal(r.address, v.address);
  using t = v.transpose();
  using split = t.reshape([2, 2, 3, 2, 1]); // splitting an axis of the F-ordered view needs no copy
  assert.deepEqual(split.strides.slice(0, 4), [2, 1, 4, 12]);
  assert.equal(split.get(1, 1, 2, 1, 0), t.get(3, 2, 1));
  const e = refused(() => t.reshape([24]), "strides", /copy\(\)/);
  assert.match(e.message, /reshape\(\[24\]\)/);
  using copied = t.copy();
  using flat = copied.reshape([24]);
  assert.deepEqual(flat.toNested(), Array.from(t.toArray() as Float64Array));
  using reversed = v.slice("::-1");
  using merged = reversed.reshape([2, 12]);
  assert.deepEqual(merged.strides, [-12, 1], "the trailing axes merge; the reversed one stays");
  assert.deepEqual(merged.toNested(), [nested([12], 12), nested([12])]);
  using sliced = v.slice(null, "::2");
  refused(() => sliced.reshape([4, 4]), "strides", /copy\(\)/);
  refused(() => v.reshape([5, 5]), "shape", /25 elements/);
  refused(() => v.reshape([-1, -1]), "shape", /only one/);
  refused(() => v.reshape([7, -1]), "shape", /infer/);
  using z = zeros([0, 3], "int8");
  using z2 = z.reshape([3, 0, 5]);
  assert.deepEqual(z2.shape, [3, 0, 5]);
  // The no-copy rule against brute force: a result is a view exactly when every element lands
  // where the C-order walk of the source puts it.
  for (
    const [shape, strides, target] of [
      [[2, 3], [3, 1], [3, 2]],
      [[2, 3], [1, 2], [6]],
      [[2, 1, 3], [3, 99, 1], [6]],
      [[4, 2], [4, 1], [8]],
      [[4, 2], [2, 1], [2, 2, 2]],
      [[3, 4], [-4, 1], [3, 2, 2]],
    ] as [number[], number[], number[]][]
  ) {
    const got = reshapeLayout(shape, strides, target);
    const walk = (s: number[], st: number[]) => {
      const out: number[] = [];
      const rec = (d: number, at: number) => {
        if (d === s.length) return void out.push(at);
        for (let i = 0; i < s[d]!; i++) rec(d + 1, at + i * st[d]!);
      };
      rec(0, 0);
      return out;
    };
    if (got !== undefined) assert.deepEqual(walk(target, got.strides), walk(shape, strides), `${shape}/${strides}`);
  }
  assert.equal(reshapeLayout([4, 2], [4, 1], [8]), undefined, "a gap between rows needs a copy");
});

test("broadcastTo: stride 0, read-only, numpy's rules", () => {
  using row = fromArray(new Float32Array([1, 2, 3]));
  using b = row.broadcastTo([2, 3]);
  assert.deepEqual(b.strides, [0, 1]);
  assert.deepEqual(b.toNested(), [[1, 2, 3], [1, 2, 3]]);
  assert.equal(b.access, "readonly", "one write would change many elements");
  refused(() => b.set(1, 0, 0), "readonly");
  refused(() => b.fill(0), "readonly");
  using col = row.reshape([3, 1]).broadcastTo([3, 2]);
  assert.deepEqual(col.toNested(), [[1, 1], [2, 2], [3, 3]]);
  refused(() => row.broadcastTo([2, 4]), "shape", /cannot broadcast/);
  refused(() => row.broadcastTo([]), "shape");
  refused(() => row.broadcastTo([2 ** 30, 2 ** 30, 3]), "overflow");
});

test("derived views share the owner: each disposes on its own, the deleter runs once after the last", () => {
  const before = deleted();
  const made = make({ shape: [2, 3], dtype: "float32" });
  new Float32Array(made.bytes(24).buffer).set([0, 1, 2, 3, 4, 5]);
  const v = importDLPack(made.source);
  const s = v.slice(null, "::-1");
  const t = s.transpose();
  v.dispose();
  assert.equal(deleted(), before, "the slice still holds the memory");
  assert.deepEqual(t.toNested(), [[2, 5], [1, 4], [0, 3]]);
  refused(() => v.slice(0), "disposed");
  refused(() => v.transpose(), "disposed");
  s.dispose();
  refused(() => s.at(0), "disposed");
  assert.equal(deleted(), before);
  // A derived view exports like any view: the export holds the memory too.
  const capsule = exportDLPack(t);
  t.dispose();
  assert.equal(deleted(), before, "the export holds it");
  const again = importDLPack(capsule);
  assert.deepEqual(again.strides, [-1, 3]);
  assert.deepEqual(again.toNested(), [[2, 5], [1, 4], [0, 3]]);
  again.dispose();
  assert.equal(deleted() - before, 1, "released exactly once, after the last view");
});

test("iteration, entries(), toNested() of every kind of dtype", () => {
  using v = iota([2, 3]);
  const rows = [...v] as BufferView[];
  assert.deepEqual(rows.map((r) => r.toNested()), [[0, 1, 2], [3, 4, 5]]);
  for (const r of rows) r.dispose();
  using row = v.at(1);
  assert.deepEqual([...row], [3, 4, 5], "a 1-d view yields its values");
  assert.deepEqual([...row.entries()], [[0, 3], [1, 4], [2, 5]]);
  using zero = v.at(0, 0);
  refused(() => [...zero], "shape", /0-d/);
  using c = zeros([2], "complex64");
  c.set([1, -1], 1);
  assert.deepEqual(c.toNested(), [[0, 0], [1, -1]]);
  using b = zeros([2, 2], "bool");
  b.set(true, 0, 1);
  using bt = b.transpose();
  assert.deepEqual(bt.toNested(), [[false, false], [true, false]]);
  using big = zeros([2], "int64");
  big.fill(-5n);
  assert.deepEqual([...big], [-5n, -5n]);
  using bf = zeros([3], "bfloat16");
  bf.fill(1.5);
  assert.deepEqual(bf.toNested(), [1.5, 1.5, 1.5]);
  using fp4 = zeros([4], "float4_e2m1fn");
  fp4.copyFrom([0.5, 1, -2, 6]);
  assert.deepEqual(fp4.toNested(), [0.5, 1, -2, 6]);
  using even = fp4.slice("2:");
  assert.deepEqual(even.toNested(), [-2, 6], "a packed slice starting on a byte boundary is a view");
  refused(() => fp4.slice("1:"), "byte_offset", "a packed fp4 slice starting mid-byte", /copy\(\)/);
});

test("fill() and copyFrom(nested array | TypedArray) on strided views", () => {
  using v = zeros([3, 4], "int16");
  using sub = v.slice("::2", "1::2");
  sub.fill(7);
  assert.deepEqual(v.toNested(), [[0, 7, 0, 7], [0, 0, 0, 0], [0, 7, 0, 7]]);
  using t = v.transpose();
  t.copyFrom([[1, 2, 3], [4, 5, 6], [7, 8, 9], [10, 11, 12]]);
  assert.deepEqual(v.toNested(), [[1, 4, 7, 10], [2, 5, 8, 11], [3, 6, 9, 12]]);
  t.copyFrom(new Int16Array(12));
  assert.deepEqual(v.toNested(), [[0, 0, 0, 0], [0, 0, 0, 0], [0, 0, 0, 0]]);
  refused(() => v.copyFrom([[1, 2, 3, 4]]), "shape", /depth 0/);
  refused(() => v.copyFrom([[1, 2, 3], [4], [5]]), "shape", /depth 1/);
  refused(() => v.copyFrom([[1, 2, 3, 4], [5, 6, 7, 8], [9, 10, 11, 1.5]]), "dtype");
  refused(() => v.copyFrom([1, 2, 3] as never), "shape");
  refused(() => v.fill(70000), "dtype");
  refused(() => v.fill("1" as never), "dtype");
  assert.deepEqual(v.toNested(), [[0, 0, 0, 0], [0, 0, 0, 0], [0, 0, 0, 0]], "a refused copy wrote nothing");
  using ro = importDLPack(exportDLPack(v, { readonly: true }));
  refused(() => ro.fill(1), "readonly");
  refused(() => ro.copyFrom([[0, 0, 0, 0], [0, 0, 0, 0], [0, 0, 0, 0]]), "readonly");
});

test("fromArray: a zero-copy view over JS memory, pinned while it lives, bounds checked", () => {
  const before = live();
  const data = new Int32Array([0, 1, 2, 3, 4, 5]);
  const v = fromArray(data, { shape: [2, 3] });
  assert.deepEqual(v.toNested(), [[0, 1, 2], [3, 4, 5]]);
  v.set(42, 1, 1);
  assert.equal(data[4], 42, "the view writes the array's own memory");
  assert.equal(stats().pinned, before.pinned + 1);
  using rev = fromArray(data, { shape: [3], strides: [-2], offset: 5 });
  assert.deepEqual(rev.toNested(), [5, 3, 1]);
  using ro = fromArray(data, { readonly: true });
  assert.equal(ro.access, "readonly");
  assert.deepEqual(ro.shape, [6]);
  refused(() => fromArray(data, { shape: [7] }), "shape", /reaches/);
  refused(() => fromArray(data, { shape: [2], strides: [6] }), "shape");
  refused(() => fromArray(data, { shape: [3], strides: [-2] }), "shape", /before/);
  refused(() => fromArray([1, 2, 3] as never), "argument");
  refused(() => fromArray(data, { shape: [1.5] }), "shape");
  refused(() => fromArray(data, 5 as never), "argument");
  v.dispose();
});

test("hostile arguments: Proxies, getters, non-integers, huge values, too many axes", () => {
  using v = iota([2, 3]);
  let reads = 0;
  const range = {
    get start() {
      reads++;
      return reads === 1 ? 0 : 1e9;
    },
  };
  using s = v.slice(null, range);
  assert.equal(reads, 1, "each field of a range is read once");
  assert.deepEqual(s.shape, [2, 3]);
  let lengthReads = 0;
  const shape = new Proxy([3, 2], {
    get(target, key, receiver) {
      if (key === "length") lengthReads++;
      return lengthReads > 1 && key === "0" ? 1e9 : Reflect.get(target, key, receiver);
    },
  });
  using r = v.reshape(shape);
  assert.deepEqual(r.shape, [3, 2], "the shape was read once");
  for (const bad of [1.5, NaN, Infinity, 2 ** 60, "1", 1n, {}, [], Symbol("x")]) {
    refused(() => v.at(bad as never), Number.isSafeInteger(bad) ? "shape" : "argument", String(bad));
    refused(() => v.reshape([bad, 1] as never), "argument", `reshape ${String(bad)}`);
    refused(() => v.permute([bad, 0] as never), "argument", `permute ${String(bad)}`);
  }
  for (const bad of ["1:2:0", "a:b", "1:2:3:4", "0x1", " 1", "1e3", "-", "+:"]) {
    refused(() => v.slice(bad), "argument", bad);
  }
  refused(() => v.slice({ step: 0 }), "argument");
  refused(() => v.slice("...", "..."), "argument");
  refused(() => v.slice(0, 0, 0), "shape", /3 items/);
  refused(() => v.reshape(Array(MAX_RANK + 1).fill(1)), "rank");
  // A number is the varargs form (reshape(7) is reshape([7])), checked as a shape.
  refused(() => v.reshape(7), "shape", /holds 7 elements/);
  refused(() => v.reshape({} as never), "argument");
  refused(() => v.broadcastTo(Array(MAX_RANK + 1).fill(1)), "rank");
  using deep = v.reshape([...Array(MAX_RANK - 2).fill(1), 2, 3]);
  refused(() => deep.expandDims(0), "rank");
  // A view made with Object.create cannot borrow the methods.
  const fake = Object.create(Object.getPrototypeOf(v)) as BufferView;
  assert.throws(() => fake.slice(0));
});
