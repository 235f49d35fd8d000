// Types that follow the data: a literal dtype (and shape) types the results of empty, zeros,
// fromArray, importDLPack / fromDLPack with `require`, and the view operations. The compile-time
// half is checked by `deno check` (deno task check:types): every `@ts-expect-error` line must be
// an error, and every annotated binding must accept what it is given. The runtime half checks the
// values behind the types, in both runtimes.
import assert from "node:assert/strict";
import {
  BufferView,
  type DType,
  empty,
  exportDLPack,
  fromArray,
  fromDLPack,
  importDLPack,
  type Nested,
  type TypedView,
  zeros,
} from "../../mod.ts";
import { test } from "../support/harness.ts";
import { refused } from "../support/assertions.ts";
import { deleted, make } from "../support/producer.ts";

/** Compile-time equality of two types (true only when each extends the other). */
type Equal<A, B> = (<T>() => T extends A ? 1 : 2) extends (<T>() => T extends B ? 1 : 2) ? true : false;
function expectType<T extends true>(_ok: T): void {}

test("zeros/empty with a literal dtype: array(), get and set typed, no as()", () => {
  using z = zeros([2], "float64");
  const a: Float64Array = z.array();
  assert.ok(a instanceof Float64Array);
  using m = empty([2, 3], "int64");
  m.fill(3n);
  const x: bigint = m.get(1, 2);
  assert.equal(x, 3n);
  const [rows, cols]: readonly [number, number] = m.shape;
  assert.equal(rows * cols, 6);
  expectType<Equal<typeof z, TypedView<"float64", 1>>>(true);
  expectType<Equal<typeof m, TypedView<"int64", 2>>>(true);
  // @ts-expect-error an int64 element is a bigint
  refused(() => m.set(1, 0, 0), "dtype");
  // @ts-expect-error two indices for a 2-d view
  refused(() => m.get(0), "shape");
  // @ts-expect-error a float64 array is no Float32Array
  const wrong: Float32Array = z.array();
  void wrong;
  // A dtype only known at run time gives the general view.
  const name: string = "uint8";
  using g = zeros([4], name as "uint8" | "float32");
  const ga: Uint8Array | Float32Array = g.array();
  assert.ok(ga instanceof Uint8Array);
  // A shape only known at run time gives an unknown rank.
  const shape: number[] = [2, 2, 2];
  using r = zeros(shape, "int8");
  expectType<Equal<typeof r, TypedView<"int8", number>>>(true);
  assert.equal(r.get(1, 1, 1), 0);
  // Typed views are still BufferViews.
  const plain: BufferView = r;
  assert.equal(plain.ndim, 3);
});

test("fromArray: the dtype of the TypedArray, the rank of the shape", () => {
  using v = fromArray(new Float32Array(6), { shape: [2, 3] });
  expectType<Equal<typeof v, TypedView<"float32", 2>>>(true);
  const a: Float32Array = v.array();
  assert.equal(a.length, 6);
  using flat = fromArray(new BigUint64Array(2));
  expectType<Equal<typeof flat, TypedView<"uint64", 1>>>(true);
  assert.equal(flat.get(0), 0n);
  using bytes = fromArray(new Uint8ClampedArray(2));
  expectType<Equal<typeof bytes, TypedView<"uint8", 1>>>(true);
  assert.equal(bytes.dtype, "uint8");
});

test("view operations keep the dtype and follow the rank", () => {
  using m = zeros([2, 3], "int32");
  m.copyFrom([[1, 2, 3], [4, 5, 6]]);
  using t = m.transpose();
  expectType<Equal<typeof t, TypedView<"int32", 2>>>(true);
  using r = m.reshape([3, 2, 1]);
  expectType<Equal<typeof r, TypedView<"int32", 3>>>(true);
  assert.equal(r.get(2, 1, 0), 6);
  using row = m.at(1);
  expectType<Equal<typeof row, TypedView<"int32", 1>>>(true);
  using e = m.expandDims(0);
  expectType<Equal<typeof e, TypedView<"int32", 3>>>(true);
  const nested: number[][] = m.toNested();
  assert.deepEqual(nested, [[1, 2, 3], [4, 5, 6]]);
  expectType<Equal<Nested<boolean, 2>, boolean[][]>>(true);
  const values: number[] = [...row];
  assert.deepEqual(values, [4, 5, 6]);
  for (const sub of m) {
    expectType<Equal<typeof sub, TypedView<"int32", 1>>>(true);
    assert.equal(sub.ndim, 1);
    sub.dispose();
  }
  // @ts-expect-error fill takes an int32 element, a number
  refused(() => m.fill(1n), "dtype");
  using s = m.slice(null, "::-1");
  const sa: Int32Array = s.array();
  assert.equal(sa.length, 6);
});

test("importDLPack / fromDLPack with require: checked, typed, released when refused", () => {
  const made = make({ shape: [2, 3], dtype: "float32" });
  using v = importDLPack(made.source, { require: { dtype: "float32", ndim: 2 } });
  expectType<Equal<typeof v, TypedView<"float32", 2>>>(true);
  const a: Float32Array = v.array();
  assert.equal(a.length, 6);
  using byShape = importDLPack(exportDLPack(v), { require: { dtype: "float32", shape: [2, null] } });
  expectType<Equal<typeof byShape, TypedView<"float32", 2>>>(true);
  const { view, owner } = fromDLPack(exportDLPack(v), { require: { dtype: "float32", ndim: 2, writable: true } });
  const x: number = view.get(1, 2);
  assert.equal(x, 0);
  owner.release();
  // Several dtypes allowed: the dtype stays open.
  using either = importDLPack(exportDLPack(v), { require: { dtype: ["float32", "float64"] } });
  expectType<Equal<typeof either, TypedView<DType, number>>>(true);
  assert.equal(either.dtype, "float32");

  const before = deleted();
  const other = make({ shape: [4], dtype: "int16" });
  const e = refused(
    () => importDLPack(other.source, { require: { dtype: "float32", ndim: 2 } }),
    "requirements",
    /does not meet/,
  );
  assert.deepEqual(e.refusals, ["dtype: required float32, got int16", "ndim: required 2, got 1"]);
  assert.equal(deleted() - before, 1, "the refused tensor went back to its producer, once");
  // A bad requirement is refused before the source is taken: the caller still owns it.
  const kept = make({ shape: [1] });
  refused(() => importDLPack(kept.source, { require: { dtype: "float33" as "float32" } }), "requirements", /unknown/);
  assert.equal(deleted() - before, 1);
  using taken = importDLPack(kept.source);
  assert.equal(taken.size, 1);
});

test("instanceof BufferView narrows to a plain view, never to a typed one; a typed view is a BufferView", () => {
  using z = zeros([2, 3], "float32");
  const x: unknown = z;
  assert.ok(x instanceof BufferView);
  if (x instanceof BufferView) {
    // @ts-expect-error what instanceof proves is a view of some dtype and rank
    const typed: TypedView<"int8", 3> = x;
    void typed;
    const plain: BufferView = x;
    assert.equal(plain.ndim, 2);
  }
  const general: BufferView = z;
  assert.equal(general.dtype, "float32");
  expectType<Equal<typeof z, BufferView<"float32", 2>>>(true);
});
