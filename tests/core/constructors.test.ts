// The constructors and joins given hostile arguments (Proxies, getters, NaN, huge numbers, wrong
// types, views disposed while the arguments are read): each refusal a DLPackError with a code,
// nothing left allocated; and the types a literal dtype and shape give their results.
import assert from "node:assert/strict";
import {
  arange,
  asarray,
  type BufferView,
  concat,
  emptyLike,
  fromArray,
  full,
  ones,
  onesLike,
  stack,
  type TypedView,
  zeros,
  zerosLike,
} from "../../mod.ts";
import { test } from "../support/harness.ts";
import { live, refused } from "../support/assertions.ts";

const any = (x: unknown) => x as never;
const label = (
  x: unknown,
): string => (typeof x === "symbol" ? "a symbol" : Array.isArray(x) ? `[${x.map(label)}]` : String(x));

test("ones, full and the *Like functions refuse bad shapes, dtypes and values with a code", () => {
  const before = live();
  for (const shape of [[-1], [NaN], [1.5], [2 ** 60], "abc", 5, null, [Symbol("x")], { length: 1, 0: 2 }]) {
    const code = refusedCode(shape);
    assert.notEqual(code, "none", `zeros(${label(shape)}) is refused too`);
    refused(() => ones(any(shape), "float32"), code, `ones(${label(shape)})`);
    refused(() => full(any(shape), 1, "float32"), code, `full(${label(shape)})`);
  }
  for (const dtype of ["float128", 5, Symbol("f"), null, {}, new Proxy({}, {})]) {
    refused(() => ones([2], any(dtype)), "dtype", `ones dtype ${label(dtype)}`);
    refused(() => full([2], 1, any(dtype)), "dtype", `full dtype ${label(dtype)}`);
  }
  refused(() => full([2], any("x"), "float32"), "dtype", /float32 element takes a number/);
  refused(() => full([2], NaN, "int32"), "dtype", /an int32 element/);
  refused(() => full([2], 300, "uint8"), "dtype", /a uint8 element takes an integer in 0..255/);
  refused(() => full([2], 2 ** 60, "int64"), "dtype", /bigint/);
  refused(() => full([2], any(Symbol("v"))), "dtype");
  refused(() => full([2], any({})), "dtype");
  const lying = new Proxy([1, 2], { get: (t, k) => (k === "length" ? 2 : k === "0" ? "re" : Reflect.get(t, k)) });
  refused(() => full([2], any(lying), "complex64"), "dtype", /\[real, imaginary\]/);
  refused(() => ones([2], "float32", any({ device: { type: "vulkan" } })), "device");
  refused(() => ones([2], "float32", any(5)), "argument");
  refused(() => zerosLike(any({ shape: [2], dtype: "float32" })), "argument", /takes a BufferView/);
  refused(() => onesLike(any(new Float32Array(2))), "argument");
  const gone = zeros([2], "float32");
  gone.dispose();
  refused(() => emptyLike(gone), "disposed");
  {
    using v = zeros([2], "float32");
    refused(() => zerosLike(v, any("nope")), "dtype");
  }
  assert.deepEqual(live(), before);
});

/** The code checkShape gives a malformed extent (the shape rules are the allocation's). */
function refusedCode(shape: unknown): string {
  try {
    zeros(any(shape), "float32").dispose();
  } catch (error) {
    return (error as { code: string }).code;
  }
  return "none";
}

test("arange refuses NaN, infinities, a zero step, wrong types and results too long to hold", () => {
  const before = live();
  for (
    const [args, code] of [
      [[NaN], "argument"],
      [[0, Infinity], "argument"],
      [[0, 5, 0], "argument"],
      [[0n, 5n, 0n], "argument"],
      [["5"], "argument"],
      [[0, "x" as never, 1], "dtype"],
      [[Symbol("s")], "argument"],
      [[{ valueOf: () => 3 }], "argument"],
      [[0, 1e300, 1], "overflow"],
      [[0, 2 ** 40, 1e-9], "overflow"],
      [[0, 5, 0.5, "int32"], "dtype"],
      [[0, 5, 1, "bool"], "dtype"],
      [[0n, 5.5], "argument"],
      [[0, 300, 1, "uint8"], "dtype"],
      [[0, 5, 1, "float128"], "dtype"],
    ] as const
  ) {
    refused(() => (arange as (...a: unknown[]) => BufferView)(...args), code, `arange(${args.map(label)})`);
  }
  assert.deepEqual(live(), before);
});

test("asarray refuses ragged, cyclic and mistyped nesting, and conversions it cannot make zero-copy", () => {
  const before = live();
  refused(() => asarray([[1, 2], [3]]), "shape", /ragged nesting: at depth 1, an array of 1 where the first has 2/);
  refused(() => asarray([[1, 2], 3]), "shape", /ragged/);
  refused(() => asarray([1, [2]]), "shape", /ragged/);
  refused(() => asarray([[[1]], [[]]]), "shape", /ragged/);
  const cyclic: unknown[] = [];
  cyclic.push(cyclic);
  refused(() => asarray(cyclic), "rank", /deeper than 64/);
  refused(() => asarray(["a", "b"]), "dtype", /value 0 is string "a"/);
  refused(() => asarray([[1, 2], [3, undefined]]), "dtype", /value 3 is undefined/);
  refused(() => asarray([1, true]), "dtype", /booleans mixed with numbers/);
  refused(() => asarray([[1, 2, 3]], "complex64"), "shape", /pairs/);
  refused(() => asarray([1.5], "int32"), "dtype", /an int32 element/);
  refused(() => asarray(new DataView(new ArrayBuffer(4))), "argument", /nested arrays, a TypedArray or a BufferView/);
  refused(() => asarray({ length: 2, 0: 1, 1: 2 }), "argument");
  refused(() => asarray(new Float32Array(2), "float64"), "dtype", /keeps its dtype \(float32\).*astype\("float64"\)/);
  {
    using v = zeros([2], "int8");
    refused(() => asarray(v, "int16"), "dtype", /a view is zero-copy/);
  }
  // A Proxy whose length changes between reads, and one whose element getter lies: read once.
  let reads = 0;
  const shifty = new Proxy([1, 2, 3], {
    get: (t, k) => (k === "length" ? (reads++ === 0 ? 3 : 1000) : Reflect.get(t, k)),
  });
  {
    using once = asarray(shifty, "float32");
    assert.deepEqual(once.toNested(), [1, 2, 3]);
  }
  assert.equal(reads, 1, "the length was read once");
  const hostileLength = new Proxy([1], { get: (t, k) => (k === "length" ? 2 ** 40 : Reflect.get(t, k)) });
  refused(() => asarray(hostileLength), "overflow");
  const nanLength = new Proxy([1], { get: (t, k) => (k === "length" ? NaN : Reflect.get(t, k)) });
  refused(() => asarray(nanLength), "argument", /length number NaN/);
  const boom = new Proxy([1], {
    get: (t, k) => {
      if (k === "0") throw new RangeError("caller's getter");
      return Reflect.get(t, k);
    },
  });
  assert.throws(() => asarray(boom), /caller's getter/, "a caller's getter's own error reaches the caller");
  assert.deepEqual(live(), before);
});

test("concat and stack refuse empty lists, non-views, mismatches and bad axes, saying what differs", () => {
  const before = live();
  {
    using a = zeros([2, 3], "float32");
    using b = zeros([2, 4], "float32");
    using c = zeros([2, 3], "int32");
    refused(() => concat([]), "argument", /at least one view/);
    refused(() => stack([]), "argument", /at least one view/);
    refused(() => concat(any(a)), "argument", /array of views/);
    refused(() => concat(any([a, new Float32Array(6)])), "argument", /element 1 is a Float32Array/);
    refused(() => concat(any([a, { dtype: "float32" }])), "argument", /element 1/);
    refused(() => concat([a, c]), "dtype", /view 1 is int32, view 0 is float32/);
    refused(() => concat([a, b]), "shape", /view 1 has shape \[2, 4\], view 0 \[2, 3\]; only axis 0 may differ/);
    refused(() => stack([a, b], 1), "shape", /stack\(\) needs equal shapes/);
    using row = zeros([3], "float32");
    refused(() => concat([a, row]), "shape", /view 1 has shape \[3\]/);
    using scalar = zeros([] as number[], "float32");
    refused(() => concat([scalar]), "shape", /0-d views have none/);
    for (const axis of [2, -3, 1.5, NaN, "0", 2 ** 60, {}, Symbol("a")]) {
      refused(() => concat([a, a], any(axis)), Number.isSafeInteger(axis) ? "shape" : "argument");
      refused(
        () => stack([a, a], any(axis === 2 ? 3 : axis === -3 ? -4 : axis)),
        Number.isSafeInteger(axis) ? "shape" : "argument",
      );
    }
    const lengthy = new Proxy([a], { get: (t, k) => (k === "length" ? 2 ** 40 : Reflect.get(t, k)) });
    refused(() => concat(lengthy), "argument", /up to/);
    // A getter that disposes a view already read: every element is read before any state is taken.
    using victim = zeros([2, 3], "float32");
    const sneaky = new Proxy([victim, a], {
      get: (t, k) => {
        if (k === "1") victim.dispose();
        return Reflect.get(t, k);
      },
    });
    refused(() => concat(sneaky), "disposed");
  }
  assert.deepEqual(live(), before);
});

test("a disposed input or one over freed memory is refused before anything is copied", () => {
  const before = live();
  using a = zeros([2], "float32");
  const b = zeros([2], "float32");
  b.dispose();
  refused(() => concat([a, b]), "disposed");
  refused(() => stack([b]), "disposed");
  const data = new Float32Array([1, 2]);
  using view = fromArray(data);
  using joined = concat([view, view]);
  assert.deepEqual(joined.toNested(), [1, 2, 1, 2]);
  assert.equal(joined.owner, "dlpack-ts", "a new allocation, not the TypedArray");
  // `a` and the join are allocations; the view of the TypedArray pins it.
  assert.deepEqual(live(), { ...before, allocations: before.allocations + 2, pinned: before.pinned + 1 });
});

test("asarray of a TypedArray and of a view is zero-copy: the same memory, a new handle", () => {
  const data = new Float32Array([1, 2, 3]);
  using v = asarray(data);
  v.set(9, 0);
  assert.equal(data[0], 9, "a write through the view lands in the TypedArray");
  using again = asarray(v);
  assert.notEqual(again, v);
  assert.equal(again.address, v.address);
  v.dispose();
  assert.deepEqual(again.toNested(), [9, 2, 3], "the new handle holds its own share");
  using same = asarray(again, "float32");
  assert.equal(same.address, again.address);
});

test("literal dtypes and shapes type the results (compile-time checks, with values)", () => {
  using o = ones([2, 3], "float32");
  const typed: TypedView<"float32", 2> = o;
  using f = full([4], 2n, "int64");
  const big: TypedView<"int64", 1> = f;
  using r = arange(0, 4, "int16");
  const range: TypedView<"int16", 1> = r;
  using s = stack([o, o]);
  const three: TypedView<"float32", 3> = s;
  using j = concat([o, o], 1);
  const two: TypedView<"float32", 2> = j;
  using z = zerosLike(o, "uint8");
  const like: TypedView<"uint8", 2> = z;
  using e = emptyLike(o);
  const same: TypedView<"float32", 2> = e;
  using t = asarray(new Int16Array([1, 2]));
  const arr: TypedView<"int16", 1> = t;
  assert.deepEqual(
    [typed.shape, big.toNested(), range.toNested(), three.shape, two.shape, like.dtype, same.dtype, arr.toNested()],
    [[2, 3], [2n, 2n, 2n, 2n], [0, 1, 2, 3], [2, 2, 3], [2, 6], "uint8", "float32", [1, 2]],
  );
  const f32: Float32Array = typed.array();
  assert.equal(f32.length, 6);
});
