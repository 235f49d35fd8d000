// Ranks that follow literal arguments: slice() with a tuple of integers and strings, at(), the
// iteration of a sliced view, and the new operations (astype, flip, T, ravel, flatten, item,
// varargs transpose/permute/reshape) keep what TypeScript knows. The compile-time half is checked
// by `deno check` (deno task check:types) and tsc (deno task check:tsc): every `@ts-expect-error`
// line must be an error, and every annotated binding must accept what it is given. The runtime
// half checks the values behind the types, in both runtimes.
import assert from "node:assert/strict";
import { type BufferView, type SliceRank, type TypedView, zeros } from "../../mod.ts";
import { test } from "../support/harness.ts";

/** Compile-time equality of two types (true only when each extends the other). */
type Equal<A, B> = (<T>() => T extends A ? 1 : 2) extends (<T>() => T extends B ? 1 : 2) ? true : false;
function expectType<T extends true>(_ok: T): void {}

test("slice() with literal items keeps an exact rank; iterating it yields typed views", () => {
  using img = zeros([4, 6, 3], "uint8");
  img.fill(7);
  using crop = img.slice("1:3", "::2");
  expectType<Equal<typeof crop, TypedView<"uint8", 3>>>(true);
  using row = img.slice(1);
  expectType<Equal<typeof row, TypedView<"uint8", 2>>>(true);
  using channel = img.slice("...", 0);
  expectType<Equal<typeof channel, TypedView<"uint8", 2>>>(true);
  using pixel = img.slice(1, "-1", null);
  expectType<Equal<typeof pixel, TypedView<"uint8", 1>>>(true);
  using point = img.slice(0, 0, 0);
  expectType<Equal<typeof point, TypedView<"uint8", 0>>>(true);
  using ranged = img.slice({ start: 1 }, { step: 2 }, "...");
  expectType<Equal<typeof ranged, TypedView<"uint8", 3>>>(true);
  assert.deepEqual([crop.ndim, row.ndim, channel.ndim, pixel.ndim, point.ndim, ranged.ndim], [3, 2, 2, 1, 0, 3]);
  // Iteration: 2-d views out of a 3-d one, values out of a 1-d one, without a cast.
  let total = 0;
  for (const plane of crop) {
    expectType<Equal<typeof plane, TypedView<"uint8", 2>>>(true);
    const [h, w]: readonly [number, number] = plane.shape;
    for (const line of plane) {
      const values: Uint8Array = line.array();
      assert.equal(values.length >= w, true);
      for (const value of line) {
        const n: number = value;
        total += n;
      }
    }
    assert.equal(h, 3);
    plane.dispose();
  }
  assert.equal(total, 2 * 3 * 3 * 7);
  for (const [i, item] of pixel.entries()) {
    const n: number = item;
    assert.equal(n + i - i, 7);
  }
  // at() drops axes; the result iterates typed too.
  using second = crop.at(1);
  expectType<Equal<typeof second, TypedView<"uint8", 2>>>(true);
  const v: number = crop.at(0, 1).get(2);
  assert.equal(v, 7);
  // @ts-expect-error a 1-d line needs exactly one index
  assert.throws(() => pixel.get(0, 0));
  // @ts-expect-error a 2-d plane is no 3-d view
  const wrong: TypedView<"uint8", 3> = row;
  void wrong;
});

test("slice() items whose types do not say give an unknown rank", () => {
  using m = zeros([2, 3], "float32");
  const text: string = "0:1";
  using a = m.slice(text);
  expectType<Equal<typeof a, TypedView<"float32", number>>>(true);
  const either = 0 as number | string;
  using b = m.slice(either);
  expectType<Equal<typeof b, TypedView<"float32", number>>>(true);
  // A non-literal number is still an integer index: it drops its axis.
  const i: number = 1;
  using c = m.slice(i);
  expectType<Equal<typeof c, TypedView<"float32", 1>>>(true);
  // A view of unknown rank stays unknown.
  const shape: number[] = [2, 3];
  using u = zeros(shape, "float32");
  using d = u.slice(0);
  expectType<Equal<typeof d, TypedView<"float32", number>>>(true);
  expectType<Equal<SliceRank<3, [0, "1:2", "..."]>, 2>>(true);
  expectType<Equal<SliceRank<3, []>, 3>>(true);
  expectType<Equal<SliceRank<number, [0]>, number>>(true);
  assert.deepEqual([a.ndim, b.ndim, c.ndim, d.ndim], [2, 1, 1, 1]);
  // The untyped view's slice is a BufferView.
  const plain: BufferView = m;
  using e = plain.slice(0);
  expectType<Equal<typeof e, BufferView>>(true);
});

test("astype, flip, T, ravel, flatten, item and the varargs forms are typed", () => {
  using m = zeros([2, 3, 4], "int16");
  using f = m.astype("float32");
  expectType<Equal<typeof f, TypedView<"float32", 3>>>(true);
  const fa: Float32Array = f.array();
  assert.equal(fa.length, 24);
  using c = m.astype("complex64");
  const z: readonly [number, number] = c.get(0, 0, 0);
  assert.deepEqual(z, [0, 0]);
  using big = m.astype("int64");
  const b: bigint = big.at(1, 2).get(3);
  assert.equal(b, 0n);
  using flipped = m.flip(0);
  expectType<Equal<typeof flipped, TypedView<"int16", 3>>>(true);
  using t = m.T;
  expectType<Equal<typeof t, TypedView<"int16", 3>>>(true);
  using r = m.ravel();
  expectType<Equal<typeof r, TypedView<"int16", 1>>>(true);
  using fl = m.flatten();
  expectType<Equal<typeof fl, TypedView<"int16", 1>>>(true);
  using one = m.slice(0, 0, "0:1");
  const x: number = one.item();
  assert.equal(x, 0);
  using p = m.permute(2, 0, 1);
  expectType<Equal<typeof p, TypedView<"int16", 3>>>(true);
  using q = m.transpose(2, 0, 1);
  expectType<Equal<typeof q, TypedView<"int16", 3>>>(true);
  using s = m.reshape(6, 4);
  expectType<Equal<typeof s, TypedView<"int16", 2>>>(true);
  using s2 = m.reshape([2, 12]);
  expectType<Equal<typeof s2, TypedView<"int16", 2>>>(true);
  const n: number = m.length + m.itemsize;
  assert.equal(n, 4);
  // @ts-expect-error an int64 element is a bigint, not a number
  const wrongItem: number = big.slice(0, 0, 0).item();
  void wrongItem;
  // @ts-expect-error astype takes a dtype name
  assert.throws(() => m.astype("float33"));
});

test("a 0-d view of a literal rank is a BufferView like any other, and at() past its rank is of unknown rank", () => {
  using scalar = zeros([], "float32");
  expectType<Equal<typeof scalar, TypedView<"float32", 0>>>(true);
  // Assigning it once made TypeScript give up ("excessively deep"): one rank below 0 was never.
  const general: BufferView = scalar;
  assert.equal(general.ndim, 0);
  using plane = zeros([2, 3], "uint8");
  using point = plane.slice(1, -1);
  const alsoGeneral: BufferView = point;
  assert.equal(alsoGeneral.size, 1);
  expectType<Equal<ReturnType<typeof scalar.at<[0]>>, TypedView<"float32", number>>>(true);
});
