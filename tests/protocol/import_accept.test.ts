// Every layout and dtype the core issue says must be accepted and read correctly, in both struct
// generations, with the producer's deleter counted on every path.
import assert from "node:assert/strict";
import { DLPackError, DTYPES, fromDLPack, importDLPack, stats, toDLDataType } from "../../mod.ts";
import { deleted, make, tp } from "../support/producer.ts";
import { collectGarbage, gcUnavailable, test } from "../support/harness.ts";
import { settledLive } from "../support/assertions.ts";

function f32s(made: { bytes(n: number): Uint8Array<ArrayBuffer> }, values: number[]): void {
  new Float32Array(made.bytes(values.length * 4).buffer).set(values);
}

for (const versioned of [true, false]) {
  const gen = versioned ? "versioned" : "legacy";

  test(`C-contiguous with NULL strides gets C strides (${gen})`, () => {
    const made = make({ versioned, shape: [2, 3], strides: null });
    f32s(made, [0, 1, 2, 3, 4, 5]);
    using v = importDLPack(made.source);
    assert.deepEqual(v.strides, [3, 1]);
    assert.equal(v.address, BigInt(made.data));
    assert.equal(v.get(1, 0), 3);
    assert.deepEqual([...v.array()], [0, 1, 2, 3, 4, 5]);
    assert.ok(v.cContiguous);
    assert.equal(v.access, versioned ? "readwrite" : "unknown");
    assert.deepEqual(v.version, versioned ? { major: 1, minor: 3 } : null);
    assert.equal(v.owner, "external");
  });

  test(`0-d tensor with NULL shape and strides (${gen})`, () => {
    const made = make({ versioned, shape: null, ndim: 0, strides: null, dataBytes: 4 });
    f32s(made, [42.5]);
    using v = importDLPack(made.source);
    assert.equal(v.ndim, 0);
    assert.deepEqual(v.shape, []);
    assert.equal(v.size, 1);
    assert.equal(v.nbytes, 4);
    assert.equal(v.get(), 42.5);
    assert.equal(v.array().length, 1);
  });

  test(`size-0 tensors with NULL and non-NULL data (${gen})`, () => {
    for (const data of ["null", "alloc"] as const) {
      using v = importDLPack(make({ versioned, shape: [3, 0], strides: [0, 1], data }).source);
      assert.equal(v.size, 0);
      assert.equal(v.nbytes, 0);
      assert.equal(v.array().length, 0);
      assert.deepEqual([...v.toArray()], []);
      assert.ok(v.cContiguous && v.fContiguous);
      assert.throws(() => v.get(0, 0), (e: unknown) => e instanceof DLPackError && e.code === "shape");
    }
  });

  test(`negative strides (${gen})`, () => {
    // Element 0 is the last of four floats; stride -1 walks back to the first.
    const made = make({ versioned, shape: [4], strides: [-1], byteOffset: 12, dataBytes: 16 });
    f32s(made, [10, 11, 12, 13]);
    using v = importDLPack(made.source);
    assert.equal(v.address, BigInt(made.data + 12));
    assert.deepEqual([0, 1, 2, 3].map((i) => v.get(i)), [13, 12, 11, 10]);
    assert.equal(v.spanOffset, 3);
    assert.deepEqual([...v.toArray()], [13, 12, 11, 10]);
    assert.ok(!v.cContiguous && !v.fContiguous);
  });

  test(`stride 0 broadcasts one element (${gen})`, () => {
    const made = make({ versioned, shape: [3, 2], strides: [0, 1], dataBytes: 8 });
    f32s(made, [7, 8]);
    using v = importDLPack(made.source);
    assert.deepEqual([...v.toArray()], [7, 8, 7, 8, 7, 8]);
    assert.equal(v.array().length, 2);
  });

  test(`transposed (F order) (${gen})`, () => {
    const made = make({ versioned, shape: [2, 3], strides: [1, 2] });
    f32s(made, [0, 1, 2, 3, 4, 5]);
    using v = importDLPack(made.source);
    assert.ok(v.fContiguous && !v.cContiguous);
    assert.deepEqual([...v.toArray()], [0, 2, 4, 1, 3, 5]);
  });

  test(`non-zero byte_offset folds into the address (${gen})`, () => {
    const made = make({ versioned, shape: [2], strides: [1], byteOffset: 8, dataBytes: 16 });
    f32s(made, [1, 2, 3, 4]);
    using v = importDLPack(made.source);
    assert.equal(v.address, BigInt(made.data + 8));
    assert.deepEqual([...v.array()], [3, 4]);
  });

  test(`size-1 dims with odd strides (${gen})`, () => {
    const made = make({ versioned, shape: [1, 3, 1], strides: [999, 1, -77] });
    f32s(made, [5, 6, 7]);
    using v = importDLPack(made.source);
    assert.deepEqual(v.strides, [999, 1, -77]);
    assert.ok(v.cContiguous);
    assert.deepEqual([...v.toArray()], [5, 6, 7]);
    assert.equal(v.array().length, 3);
  });

  test(`a NULL deleter is accepted and nothing is called (${gen})`, () => {
    const before = deleted();
    const made = make({ versioned, deleter: "null" });
    importDLPack(made.source).dispose();
    assert.equal(deleted(), before);
    tp.tp_free_uncounted(made.address, versioned ? 1 : 0);
  });
}

test("every dtype of the table is accepted, with its DLPack triple", () => {
  for (const dtype of DTYPES) {
    using v = importDLPack(make({ dtype, shape: [4] }).source);
    assert.equal(v.dtype, dtype);
    assert.deepEqual(v.dl, toDLDataType(dtype));
  }
});

test("deleter exactly once: success + dispose, and double dispose", () => {
  const before = deleted();
  const imports = stats().imports;
  const v = importDLPack(make().source);
  assert.equal(stats().imports, imports + 1);
  v.dispose();
  assert.equal(deleted() - before, 1);
  v.dispose();
  v[Symbol.dispose]();
  assert.equal(deleted() - before, 1);
  assert.equal(stats().imports, imports);
  assert.throws(() => v.array(), (e: unknown) => e instanceof DLPackError && e.code === "disposed");
  assert.throws(() => v.get(0), (e: unknown) => e instanceof DLPackError && e.code === "disposed");
});

test("deleter exactly once: fromDLPack owner release", () => {
  const before = deleted();
  const { view, owner } = fromDLPack(make().source);
  assert.equal(view.size, 4);
  owner.release();
  assert.ok(view.disposed);
  owner.release();
  assert.equal(deleted() - before, 1);
});

test("deleter exactly once: success + GC of an undisposed view", async () => {
  // Views an earlier test left to the collector are collected first: they would move both counts.
  await settledLive();
  const before = deleted();
  const imports = stats().imports;
  (() => {
    const v = importDLPack(make().source);
    assert.equal(v.size, 4);
  })();
  for (let i = 0; i < 20 && deleted() === before; i++) await collectGarbage();
  assert.equal(deleted() - before, 1);
  assert.equal(stats().imports, imports);
}, { skip: gcUnavailable() });

test("an array keeps its view (and the memory) alive; dispose detaches it", async () => {
  const before = deleted();
  // Only the array survives the inner scope: the view must stay alive (and the memory valid) for
  // it, and once the array goes too, the producer is released.
  await (async () => {
    const made = make({ shape: [4] });
    f32s(made, [1, 2, 3, 4]);
    const array = (() => importDLPack(made.source).array())();
    await collectGarbage();
    assert.equal(deleted(), before, "the view was kept alive by its array");
    assert.deepEqual(Array.from(array as Float32Array), [1, 2, 3, 4]);
  })();
  for (let i = 0; i < 20 && deleted() === before; i++) await collectGarbage();
  assert.equal(deleted() - before, 1, "released once the array is unreachable too");

  using v = importDLPack(make({ shape: [4] }).source);
  const a = v.array();
  v.dispose();
  assert.equal(a.length, 0, "dispose detaches arrays handed out");
}, { skip: gcUnavailable() });

test("keepAlive.retain() keeps memory alive after the view is disposed", () => {
  const before = deleted();
  const v = importDLPack(make().source);
  const share = v.keepAlive.retain();
  v.dispose();
  assert.equal(deleted(), before);
  assert.equal(share.released, false);
  share.release();
  assert.equal(deleted() - before, 1);
  assert.ok(share.released);
  assert.throws(() => v.keepAlive.retain(), (e: unknown) => e instanceof DLPackError && e.code === "disposed");
});
