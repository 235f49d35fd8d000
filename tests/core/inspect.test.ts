// Seeing what you have: console.log(view) in both runtimes (dtype, shape, strides, device, access,
// values numpy-style), JSON.stringify(view), and the pure formatting functions behind them.
import assert from "node:assert/strict";
import { BufferView, DLPackError, exportDLPack, importDLPack, MAX_RANK, zeros } from "../../mod.ts";
import { elementFormatter, formatValues, type InspectFacts, keptIndices } from "../../src/view/inspect.ts";
import { make } from "../support/producer.ts";
import { runtimeName, test } from "../support/harness.ts";

/** What console.log prints for `value` in this runtime (its own inspect, which console.log uses). */
function inspected(value: unknown): string {
  const g = globalThis as unknown as {
    Deno?: { inspect(v: unknown): string };
    Bun?: { inspect(v: unknown): string };
  };
  return runtimeName === "deno" ? g.Deno!.inspect(value) : g.Bun!.inspect(value);
}

function facts(shape: number[], dtype = "int32", kind = "int", bits = 32): InspectFacts {
  const strides: number[] = [];
  let s = 1;
  for (let d = shape.length - 1; d >= 0; d--) {
    strides[d] = s;
    s *= shape[d]!;
  }
  return { dtype, kind, bits, shape, strides, device: "cpu:0", access: "readwrite", disposed: false };
}

/** Reads the C-order position of `index` as the value, recording every read. */
function counting(shape: number[], reads: number[][] = []): (index: number[]) => number {
  return (index) => {
    reads.push([...index]);
    let at = 0;
    for (let d = 0; d < shape.length; d++) at = at * shape[d]! + index[d]!;
    return at;
  };
}

test("console.log(view) prints dtype, shape, strides, device, access and the values", () => {
  using v = importDLPack(exportDLPack(new Float32Array([1, 2.5, 3, 0.1, -5, 6]), { shape: [2, 3] }));
  assert.equal(
    inspected(v),
    "BufferView<float32> shape [2, 3], strides [3, 1], cpu:0, readwrite\n" +
      "[[  1, 2.5,   3],\n" +
      " [0.1,  -5,   6]]",
  );
  // Inside another object the runtime's own formatting wraps the same text.
  assert.match(inspected({ view: v }), /BufferView<float32> shape \[2, 3\]/);
});

test("printing follows strides: a read-only, reversed view prints its elements in index order", () => {
  const data = new Int32Array([0, 1, 2, 3, 4, 5]);
  using v = importDLPack(exportDLPack(data, { shape: [6], strides: [-1], offset: 5, readonly: true }));
  assert.equal(inspected(v), "BufferView<int32> shape [6], strides [-1], cpu:0, readonly\n[5, 4, 3, 2, 1, 0]");
});

test("large tensors are summarised with the first and last 3 items of each axis", () => {
  using big = zeros([40, 50], "float64");
  const a = big.array() as Float64Array;
  for (let i = 0; i < a.length; i++) a[i] = i;
  const text = inspected(big);
  const lines = text.split("\n");
  assert.equal(lines[0], "BufferView<float64> shape [40, 50], strides [50, 1], cpu:0, readwrite");
  assert.equal(lines[1], "[[   0,    1,    2, ...,   47,   48,   49],");
  assert.equal(lines[4], " ...,");
  assert.equal(lines[7], " [1950, 1951, 1952, ..., 1997, 1998, 1999]]");
  assert.equal(lines.length, 8);
  using long = zeros([2000], "uint8");
  assert.equal(inspected(long).split("\n")[1], "[0, 0, 0, ..., 0, 0, 0]");
});

test("formatValues: 3-d blocks, wrapping, 0-d and empty tensors, and only the shown elements are read", () => {
  assert.equal(
    formatValues(facts([2, 2, 2]), counting([2, 2, 2])),
    "[[[0, 1],\n  [2, 3]],\n\n [[4, 5],\n  [6, 7]]]",
  );
  assert.equal(formatValues(facts([]), () => 7), "7");
  assert.equal(formatValues(facts([0, 3]), () => assert.fail("nothing to read")), "[[]]");
  const reads: number[][] = [];
  formatValues(facts([100, 100]), counting([100, 100], reads));
  assert.equal(reads.length, 36, "6 rows of 6 items read out of 10000");
  const wrapped = formatValues(facts([40]), counting([40]), { lineWidth: 30 });
  for (const line of wrapped.split("\n")) assert.ok(line.length <= 30, line);
  assert.ok(wrapped.includes("\n"), "wrapped");
  assert.equal(wrapped.replace(/\s+/g, ""), `[${Array.from({ length: 40 }, (_, i) => i).join(",")}]`);
  assert.deepEqual(keptIndices(10, true, 3), [0, 1, 2, -1, 7, 8, 9]);
  assert.deepEqual(keptIndices(6, true, 3), [0, 1, 2, 3, 4, 5]);
});

test("elements print to their dtype's precision: float32 shortest, complex a+bj, bool, bigint", () => {
  assert.equal(elementFormatter("float", 32)(Math.fround(0.1)), "0.1");
  assert.equal(elementFormatter("float", 64)(0.1 + 0.2), "0.30000000000000004");
  assert.equal(elementFormatter("float", 32)(-0), "-0");
  assert.equal(elementFormatter("float", 32)(NaN), "NaN");
  assert.equal(elementFormatter("float", 16)(0.0999755859375), "0.099976");
  assert.equal(elementFormatter("complex", 64)([1, -2]), "1-2j");
  assert.equal(elementFormatter("complex", 128)([0.5, 3]), "0.5+3j");
  assert.equal(elementFormatter("bool", 8)(true), "true");
  assert.equal(elementFormatter("bigint", 64)(-(2n ** 63n)), "-9223372036854775808");
  using c = zeros([2], "complex64");
  (c.array() as Float32Array).set([1, 2, 3, -4]);
  assert.equal(inspected(c).split("\n")[1], "[1+2j, 3-4j]");
  using b = zeros([2], "bfloat16");
  b.set(1.5, 1);
  assert.equal(inspected(b).split("\n")[1], "[  0, 1.5]");
});

test("a disposed view prints without values; a transferred array() buffer is reported, not read", () => {
  const v = importDLPack(exportDLPack(new Float32Array([1, 2])));
  v.dispose();
  assert.equal(inspected(v), "BufferView<float32> shape [2], strides [1], cpu:0, readwrite, disposed");
  using w = zeros([2], "float32");
  (w.array().buffer as ArrayBuffer).transfer();
  assert.match(inspected(w), /^BufferView<float32> shape \[2\].*\n\(values unavailable: .*transferred/);
});

test("device memory prints its facts without reading values", () => {
  let view: BufferView;
  try {
    view = importDLPack(make({ shape: [2], device: [2, 0] }).source);
  } catch (e) {
    // With a CUDA driver present the fake claim is refused: that path is tested elsewhere.
    assert.ok(e instanceof DLPackError && e.code === "device", String(e));
    return;
  }
  using v = view;
  assert.equal(
    inspected(v),
    "BufferView<float32> shape [2], strides [1], cuda:0, readwrite\n" +
      "(device memory: values are not read; toHost() copies them)",
  );
});

test("printing uses the class's own element reader, not a replaced prototype method", () => {
  using v = importDLPack(exportDLPack(new Int32Array([1, 2])));
  const proto = BufferView.prototype as unknown as { get: unknown };
  const original = proto.get;
  proto.get = () => {
    throw new Error("hostile get");
  };
  try {
    assert.equal(inspected(v).split("\n")[1], "[1, 2]");
  } finally {
    proto.get = original;
  }
});

test("JSON.stringify(view) gives the metadata (toJSON), not the values", () => {
  using v = importDLPack(exportDLPack(new Int16Array([1, 2, 3, 4, 5, 6]), { shape: [3, 2] }), { producer: "me" });
  const json = JSON.parse(JSON.stringify(v));
  assert.deepEqual(json, {
    dtype: "int16",
    shape: [3, 2],
    strides: [2, 1],
    device: { type: "cpu", id: 0 },
    access: "readwrite",
    size: 6,
    nbytes: 12,
    address: `0x${v.address.toString(16)}`,
    owner: "external",
    producer: "me",
    version: { major: 1, minor: 3 },
    disposed: false,
  });
  const meta = v.toJSON();
  assert.ok(Object.isFrozen(meta));
  v.dispose();
  assert.equal(v.toJSON().disposed, true);
});

test("MAX_RANK is what imports, exports and allocations accept", () => {
  assert.equal(MAX_RANK, 64);
  using ok = zeros(new Array(MAX_RANK).fill(1), "uint8");
  assert.equal(ok.ndim, MAX_RANK);
  assert.throws(() => zeros(new Array(MAX_RANK + 1).fill(1), "uint8"), (e: unknown) => {
    return e instanceof DLPackError && e.code === "rank";
  });
});

test("a read-only view's array() is writable JS memory; toArray() is the copy to write instead", () => {
  const data = new Float32Array([1, 2, 3, 4]);
  using v = importDLPack(exportDLPack(data, { shape: [2, 2], strides: [1, 2], readonly: true }));
  assert.equal(v.access, "readonly");
  const copy = v.toArray() as Float32Array;
  assert.deepEqual([...copy], [1, 3, 2, 4], "C order of the F-ordered view");
  copy[0] = 100;
  assert.equal(data[0], 1, "the copy is the caller's own");
  assert.equal(v.get(0, 0), 1);
  // What the doc comment warns about: JS cannot make the zero-copy array read-only.
  const shared = v.array() as Float32Array;
  shared[0] = 7;
  assert.equal(data[0], 7);
  assert.throws(() => v.set(8, 0, 0), (e: unknown) => e instanceof DLPackError && e.code === "readonly");
});
