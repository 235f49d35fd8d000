// Exports: round trips through our own import (same address, same values) and through a foreign
// C consumer, for every dtype and layout, plus every bad input the export issue lists.
import assert from "node:assert/strict";
import {
  type AnyTypedArray,
  Capsule,
  type DType,
  empty,
  exportDLPack,
  exportDLPackLegacy,
  importDLPack,
  share,
  stats,
  toDLPack,
  zeros,
} from "../../mod.ts";
import { runtime } from "../../ffi/mod.ts";
import { consumerValues, inspect, make, tp } from "../support/producer.ts";
import { test } from "../support/harness.ts";
import { refused } from "../support/assertions.ts";

const addressOf = (a: AnyTypedArray) => BigInt(runtime().addressOf(a));

// Each dtype of the table as a TypedArray (reinterpreted where JS has no array of that type).
const sources: Array<[DType, () => AnyTypedArray]> = [
  ["bool", () => new Uint8Array([1, 0, 1, 1])],
  ["int8", () => new Int8Array([-1, 2, -3, 4])],
  ["int16", () => new Int16Array([-1000, 2, 3, 4])],
  ["int32", () => new Int32Array([-(2 ** 31), 2, 3, 2 ** 31 - 1])],
  ["int64", () => new BigInt64Array([-1n, 2n, 3n, 1n << 62n])],
  ["uint8", () => new Uint8Array([0, 255, 3, 4])],
  ["uint16", () => new Uint16Array([0, 65535, 3, 4])],
  ["uint32", () => new Uint32Array([0, 2 ** 32 - 1, 3, 4])],
  ["uint64", () => new BigUint64Array([0n, (1n << 64n) - 1n, 3n, 4n])],
  ["float16", () => new Float16Array([0.5, -2, 65504, 1])],
  ["float32", () => new Float32Array([0.5, -2, 1e30, 1])],
  ["float64", () => new Float64Array([Math.PI, -2, 1e300, 1])],
  ["bfloat16", () => new Uint16Array([0x3f80, 0xc000, 0x4040, 0])],
  ["complex32", () => new Float16Array([1, 2, 3, 4, 5, 6, 7, 8])],
  ["complex64", () => new Float32Array([1, 2, 3, 4, 5, 6, 7, 8])],
  ["complex128", () => new Float64Array([1, 2, 3, 4, 5, 6, 7, 8])],
  ["float8_e3m4", () => new Uint8Array([0x30, 1, 2, 3])],
  ["float8_e4m3", () => new Uint8Array([0x38, 1, 2, 3])],
  ["float8_e4m3b11fnuz", () => new Uint8Array([0x58, 1, 2, 3])],
  ["float8_e4m3fn", () => new Uint8Array([0x38, 0xc0, 0x7e, 3])],
  ["float8_e4m3fnuz", () => new Uint8Array([0x40, 1, 2, 3])],
  ["float8_e5m2", () => new Uint8Array([0x3c, 1, 2, 3])],
  ["float8_e5m2fnuz", () => new Uint8Array([0x40, 1, 2, 3])],
  ["float8_e8m0fnu", () => new Uint8Array([0x7f, 0x80, 2, 3])],
  ["float6_e2m3fn", () => new Uint8Array([0x08, 0x1f, 0x21])],
  ["float6_e3m2fn", () => new Uint8Array([0x0c, 0x1f, 0x21])],
  ["float4_e2m1fn", () => new Uint8Array([0x72, 0x1f])],
];

for (const [dtype, makeArray] of sources) {
  test(`round trip ${dtype}: TypedArray -> exportDLPack -> importDLPack, same address and values`, () => {
    const a = makeArray();
    const natural = ["bfloat16", "bool"].includes(dtype) || dtype.startsWith("float8") || dtype.startsWith("float6") ||
      dtype.startsWith("float4") || dtype.startsWith("complex");
    const capsule = exportDLPack(a, natural ? { dtype } : undefined);
    assert.ok(capsule instanceof Capsule && capsule.versioned);
    using v = importDLPack(capsule);
    assert.equal(v.dtype, dtype);
    assert.equal(v.address, addressOf(a), "zero-copy: the same memory");
    assert.equal(v.access, "readwrite");
    const bytes = new Uint8Array(a.buffer, a.byteOffset, a.byteLength);
    const back = v.array();
    assert.deepEqual(new Uint8Array(back.buffer, back.byteOffset, back.byteLength), bytes, "the same bytes");
    const expectedSize = (a.byteLength * 8) / v.dl.bits;
    assert.equal(v.size, expectedSize);
    for (let i = 0; i < v.size; i++) v.get(i); // every element decodes
  });
}

test("C, F, negative strides, 0-d and size 0, through our import and a foreign consumer", () => {
  const a = new Float32Array([0, 1, 2, 3, 4, 5]);
  const cases: Array<[string, Parameters<typeof exportDLPack>[1], number[]]> = [
    ["C", { shape: [2, 3] }, [0, 1, 2, 3, 4, 5]],
    ["F", { shape: [2, 3], strides: [1, 2] }, [0, 2, 4, 1, 3, 5]],
    ["negative", { shape: [6], strides: [-1], offset: 5 }, [5, 4, 3, 2, 1, 0]],
    ["negative 2-d", { shape: [2, 3], strides: [-3, 1], offset: 3 }, [3, 4, 5, 0, 1, 2]],
    ["0-d", { shape: [], offset: 4 }, [4]],
    ["size 0", { shape: [0, 3] }, []],
    ["broadcast", { shape: [2, 3], strides: [0, 1] }, [0, 1, 2, 0, 1, 2]],
  ];
  for (const [name, opts, expected] of cases) {
    for (const versioned of [true, false]) {
      const capsule = versioned ? exportDLPack(a, opts) : exportDLPackLegacy(a, opts);
      assert.deepEqual(consumerValues(capsule.address, versioned), expected, `${name}: foreign consumer`);
      const seen = inspect(capsule.address, versioned);
      assert.deepEqual(seen.shape, opts!.shape, `${name}: shape`);
      assert.equal(seen.byteOffset, 0n);
      using v = importDLPack(capsule);
      assert.deepEqual(Array.from(v.toArray() as Float32Array), expected, `${name}: our import`);
      assert.deepEqual(Array.from(v.copy().toArray() as Float32Array), expected, `${name}: native copy`);
    }
  }
});

test("versioned exports carry version 1.3, READ_ONLY when asked; legacy carries no flags", () => {
  const a = new Int32Array([1, 2, 3]);
  const ro = exportDLPack(a, { readonly: true });
  const seen = inspect(ro.address, true);
  assert.deepEqual(seen.version, [1, 3]);
  assert.equal(seen.flags, 1n);
  assert.deepEqual(seen.dtype, { code: 0, bits: 32, lanes: 1 });
  assert.deepEqual(seen.device, [1, 0]);
  assert.equal(seen.data, addressOf(a));
  using v = importDLPack(ro);
  assert.equal(v.access, "readonly");
  using w = importDLPack(exportDLPackLegacy(a));
  assert.equal(w.access, "unknown");
  assert.equal(share(a).versioned, true);
  assert.equal(toDLPack, exportDLPack);
});

test("exporting views: imports, allocations, read-only views, reinterpretation", () => {
  using m = zeros([2, 4], "float32");
  assert.equal(m.owner, "dlpack-ts");
  assert.equal(m.access, "readwrite");
  assert.equal(m.address % 64n, 0n, "default 64-byte alignment");
  m.set(7, 1, 3);
  const c = exportDLPack(m);
  assert.equal(inspect(c.address, true).flags, 0n, "writable source: no READ_ONLY");
  using back = importDLPack(c);
  assert.equal(back.address, m.address);
  assert.equal(back.get(1, 3), 7);

  using bytes = importDLPack(exportDLPack(m, { dtype: "uint8" }));
  assert.deepEqual(bytes.shape, [32]);
  using t = importDLPack(exportDLPack(m, { shape: [4, 2], strides: [1, 4] }));
  assert.equal(t.get(3, 1), 7);

  using ro = importDLPack(make({ flags: 1, shape: [4] }).source);
  assert.equal(inspect(exportDLPack(ro).take(), true).flags, 1n);
  refused(() => exportDLPackLegacy(ro), "readonly", /legacy DLManagedTensor cannot mark data read-only/);
  using legacy = importDLPack(make({ versioned: false, shape: [4] }).source);
  assert.equal(inspect(exportDLPack(legacy).take(), true).flags, 1n, "unknown access exports READ_ONLY");
  assert.ok(exportDLPackLegacy(legacy) instanceof Capsule, "legacy to legacy keeps the unknown access");
  assert.equal(empty([3], "int8", { align: 4096 }).address % 4096n, 0n);
});

test("bad inputs: each a clear DLPackError, nothing pinned or leaked", () => {
  const before = stats();
  const detached = new Float32Array(4);
  (detached.buffer as ArrayBuffer & { transfer(n: number): ArrayBuffer }).transfer(0);
  refused(() => exportDLPack(detached), "disposed", /detached/);
  const resizable = new Float32Array(new ArrayBuffer(16, { maxByteLength: 64 }));
  refused(() => exportDLPack(resizable), "null_data", /resizable/);
  const a = new Float32Array(6);
  refused(() => exportDLPack(a, { shape: [7] }), "shape", /reaches byte 28 of a 24-byte source/);
  refused(() => exportDLPack(a, { shape: [2, 3], strides: [3, 2] }), "shape", /reaches/);
  refused(() => exportDLPack(a, { shape: [2], strides: [-1] }), "shape", /before/);
  refused(() => exportDLPack(new Uint8Array(6), { dtype: "float32" }), "dtype", /does not divide the source's 6 bytes/);
  refused(() => exportDLPack(a, { shape: [-1] }), "shape", /non-negative integer/);
  refused(() => exportDLPack(a, { shape: [1.5] }), "shape", /non-negative integer/);
  refused(() => exportDLPack(a, { shape: [NaN] }), "shape");
  refused(() => exportDLPack(a, { shape: [2], strides: [0.5] }), "strides");
  refused(() => exportDLPack(a, { shape: [2], strides: [1, 1] }), "strides");
  refused(() => exportDLPack(a, { dtype: "float33" as DType }), "dtype");
  refused(() => exportDLPack(a, { offset: -1 }), "byte_offset");
  refused(() => exportDLPack(new DataView(new ArrayBuffer(4)) as never), "argument");
  refused(() => exportDLPack([1, 2, 3] as never), "argument");
  refused(() => zeros([2], "float32", { align: 3 }), "requirements", /power of two/);
  refused(() => zeros([2], "float32", { align: 0 }), "requirements");
  refused(() => zeros([-2], "float32"), "shape");
  refused(() => zeros([2.5], "float32"), "shape");
  refused(
    () => zeros([2], "float32", { device: { type: "rocm", id: 0 } }),
    "device",
    /cpu, cuda, cudaHost and cudaManaged/,
  );
  refused(() => exportDLPackLegacy(a, { readonly: true }), "readonly");

  const c = exportDLPack(a);
  c.take();
  refused(() => c.take(), "consumed", /already taken/);
  refused(() => importDLPack(c), "consumed");
  const d = exportDLPack(a);
  d.dispose();
  refused(() => d.take(), "consumed", /disposed/);
  const v = importDLPack(exportDLPack(a));
  v.dispose();
  refused(() => exportDLPack(v), "disposed");
  refused(() => importDLPack(v), "disposed");
  // The one taken capsule above is owned by "a consumer" that never comes: release it by hand.
  importDLPack({ versioned: c.address }).dispose();
  const after = stats();
  assert.equal(after.exports, before.exports);
  assert.equal(after.pinned, before.pinned);
  assert.equal(after.allocations, before.allocations);
});

test("an array exported again: same memory and dtype; detached since, refused; nothing leaked", () => {
  const before = stats();
  const a = new Float32Array([1, 2, 3, 4]);
  for (let i = 0; i < 3; i++) {
    using v = importDLPack(exportDLPack(a));
    assert.equal(v.dtype, "float32");
    assert.deepEqual(v.shape, [4]);
    assert.equal(v.address, addressOf(a));
    assert.equal(v.get(3), 4);
  }
  // The identity is what is known: another array, even of the same buffer, is checked afresh.
  const bytes = new Uint8Array(a.buffer);
  using u = importDLPack(exportDLPack(bytes));
  assert.equal(u.dtype, "uint8");
  assert.deepEqual(u.shape, [16]);
  // A prototype swapped after the first export changes nothing the export reads.
  Object.setPrototypeOf(a, Int32Array.prototype);
  using w = importDLPack(exportDLPack(a));
  assert.equal(w.dtype, "float32");
  Object.setPrototypeOf(a, Float32Array.prototype);
  // Detached after its exports were released: the byte length reads 0 and the export is refused.
  (a.buffer as ArrayBuffer & { transfer(n: number): ArrayBuffer }).transfer(0);
  refused(() => exportDLPack(a), "disposed", /detached/);
  refused(() => exportDLPack(a).dispose(), "disposed", /detached/);
  u[Symbol.dispose]();
  w[Symbol.dispose]();
  const after = stats();
  assert.equal(after.exports, before.exports);
  assert.equal(after.imports, before.imports);
  assert.equal(after.pinned, before.pinned);
  assert.equal(after.pinnedBytes, before.pinnedBytes);
});

test("SharedArrayBuffer exports are allowed and read-write", () => {
  const shared = new Int32Array(new SharedArrayBuffer(16));
  using v = importDLPack(exportDLPack(shared));
  assert.equal(v.access, "readwrite");
  v.set(42, 1);
  assert.equal(Atomics.load(shared, 1), 42);
});

test("the JS protocol: objects with __dlpack__, and BufferView's own __dlpack__ keywords", () => {
  using m = zeros([2, 2], "float64");
  assert.deepEqual(m.__dlpack_device__(), [1, 0]);
  const legacy = m.__dlpack__();
  assert.equal(legacy.versioned, false, "no maxVersion: legacy");
  legacy.dispose();
  const old = m.__dlpack__({ maxVersion: [0, 8] });
  assert.equal(old.versioned, false);
  old.dispose();
  const versioned = m.__dlpack__({ maxVersion: [1, 3] });
  assert.ok(versioned.versioned);
  versioned.dispose();
  const copied = m.__dlpack__({ maxVersion: [1, 3], copy: true });
  const seen = inspect(copied.address, true);
  assert.equal(seen.flags & 2n, 2n, "IS_COPIED");
  assert.notEqual(seen.data, m.address, "a copy");
  copied.dispose();
  refused(() => m.__dlpack__({ maxVersion: [1, 3], dlDevice: [2, 0] }), "device");
  refused(() => m.__dlpack__({ maxVersion: [1, 3], dlDevice: [2, 0], copy: false }), "device", /without a copy/);
  refused(() => m.__dlpack__({ maxVersion: [1, 3], stream: 1 }), "device", /stream must be None/);
  const same = m.__dlpack__({ maxVersion: [1, 3], dlDevice: [1, 0], copy: false });
  same.dispose();

  using ro = importDLPack(make({ flags: 1, shape: [2] }).source);
  refused(() => ro.__dlpack__(), "readonly", /legacy/);

  // importDLPack(view): the consumer side of the JS protocol.
  using again = importDLPack(m);
  assert.equal(again.address, m.address);
  assert.equal(again.producer, "BufferView");
  const custom = {
    __dlpack__: (o?: { maxVersion?: readonly [number, number] | null }) => {
      assert.deepEqual(o?.maxVersion, [1, 3]);
      return exportDLPack(new Float32Array([1, 2]));
    },
    __dlpack_device__: () => [1, 0] as const,
  };
  using fromCustom = importDLPack(custom, { producer: "custom" });
  assert.deepEqual(Array.from(fromCustom.array() as Float32Array), [1, 2]);
  refused(() => importDLPack({ __dlpack__: () => 42 } as never), "argument", /must return a Capsule/);
});

test("a whole TypedArray of each type, exported in one native call: the struct a C consumer reads, the pin released", () => {
  const before = stats();
  const arrays: Array<[AnyTypedArray, number, number]> = [
    [new Int8Array(3), 0, 8],
    [new Uint8Array(5), 1, 8],
    [new Uint8ClampedArray(2), 1, 8],
    [new Int16Array(4), 0, 16],
    [new Uint16Array(4), 1, 16],
    [new Float16Array(6), 2, 16],
    [new Int32Array(7), 0, 32],
    [new Uint32Array(1), 1, 32],
    [new Float32Array(9), 2, 32],
    [new Float64Array(2), 2, 64],
    [new BigInt64Array(3), 0, 64],
    [new BigUint64Array(3), 1, 64],
  ];
  for (const [a, code, bits] of arrays) {
    // Twice each: the second export takes the path of an array already known.
    for (const versioned of [true, false, true]) {
      const capsule = versioned ? exportDLPack(a) : exportDLPackLegacy(a);
      const seen = inspect(capsule.address, versioned);
      assert.equal(seen.data, addressOf(a));
      assert.deepEqual(seen.device, [1, 0]);
      assert.deepEqual(seen.dtype, { code, bits, lanes: 1 });
      assert.deepEqual(seen.shape, [a.length]);
      assert.deepEqual(seen.strides, [1]);
      assert.equal(seen.flags, 0n);
      assert.deepEqual(seen.version, versioned ? [1, 3] : null);
      assert.equal(stats().pinned, before.pinned + 1);
      capsule.dispose();
      assert.equal(stats().pinned, before.pinned);
    }
  }
  // Released by the consumer instead: the pin comes back at the next sweep.
  tp.tp_consume(exportDLPack(new Float32Array(4)).take(), 1);
  const after = stats();
  assert.equal(after.exports, before.exports);
  assert.equal(after.pinned, before.pinned);
  assert.equal(after.pinnedBytes, before.pinnedBytes);
});

test("a capsule's address as a bigint is its own struct's, however many capsules share a remembered slot", () => {
  const before = stats();
  const source = new Float32Array(8);
  // More live capsules than remembered conversions (4096): slots are taken over many times.
  const capsules = Array.from({ length: 6000 }, (_, i) => i % 2 ? exportDLPack(source) : exportDLPackLegacy(source));
  const first = capsules.map((c) => c.address);
  // The cache is direct-mapped by 16-byte units: some live addresses must share a slot for this to test eviction.
  const slots = new Set(first.map((a) => Number((a >> 4n) & 4095n)));
  assert.ok(slots.size < capsules.length, "some live capsules share a cache slot");
  // Read again in the opposite order, so each read meets a slot another address wrote last.
  for (let i = capsules.length - 1; i >= 0; i--) assert.equal(capsules[i]!.address, first[i]);
  assert.equal(new Set(first).size, capsules.length, "live capsules have distinct structs");
  for (let i = 0; i < capsules.length; i++) {
    const c = capsules[i]!;
    const big = i % 3 ? c.address : c.take();
    const address = i % 3 ? c.takeAddress() : Number(big);
    assert.equal(big, BigInt(address));
    assert.equal(inspect(big, i % 2 === 1).shape[0], 8);
    tp.tp_consume(address, i % 2);
  }
  const after = stats();
  assert.equal(after.exports, before.exports);
  assert.equal(after.pinned, before.pinned);
});
