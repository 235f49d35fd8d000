// fromArrayInterface: numpy's __array_interface__ fields (byte strides, typestr) through the same
// validation as DLPack imports.
import assert from "node:assert/strict";
import { DLPackError, fromArrayInterface, stats, zeros } from "../../mod.ts";
import { parseTypestr } from "../../src/api/array_interface.ts";
import { test } from "../support/harness.ts";

test("typestr: kinds, sizes and byte order", () => {
  const cases: Array<[string, string]> = [
    ["|b1", "bool"],
    ["|i1", "int8"],
    ["<i2", "int16"],
    ["<i4", "int32"],
    ["<i8", "int64"],
    ["|u1", "uint8"],
    ["<u8", "uint64"],
    ["<f2", "float16"],
    ["<f4", "float32"],
    ["=f8", "float64"],
    ["<c8", "complex64"],
    ["<c16", "complex128"],
    [">u1", "uint8"],
  ];
  for (const [typestr, dtype] of cases) assert.equal(parseTypestr(typestr), dtype, typestr);
  const bad: Array<[unknown, RegExp]> = [
    [">f4", /non-native byte order/],
    [">i8", /non-native/],
    ["<V2", /has no DLPack dtype/],
    ["|O8", /has no DLPack dtype/],
    ["<M8", /has no DLPack dtype/],
    ["<f16", /has no DLPack dtype/],
    ["f4", /must look like/],
    [42, /must look like/],
  ];
  for (const [typestr, pattern] of bad) {
    assert.throws(
      () => parseTypestr(typestr),
      (e: unknown) => e instanceof DLPackError && e.code === "dtype" && pattern.test(e.message),
    );
  }
});

test("byte strides become element strides; read-only flag becomes access", () => {
  using memory = zeros([3, 4], "int32");
  for (let i = 0; i < 12; i++) memory.set(i, Math.floor(i / 4), i % 4);
  using t = fromArrayInterface({ data: [memory.address, true], shape: [4, 3], strides: [4, 16], typestr: "<i4" });
  assert.deepEqual(t.strides, [1, 4]);
  assert.equal(t.access, "readonly");
  assert.equal(t.get(1, 2), 9);
  assert.equal(t.owner, "external");
  assert.equal(t.version?.major, 1);
  using w = fromArrayInterface({
    data: [Number(memory.address) + 4, false],
    shape: [2],
    strides: [-4],
    typestr: "<i4",
  });
  assert.equal(w.access, "readwrite");
  assert.deepEqual([w.get(0), w.get(1)], [1, 0]);
  using c = fromArrayInterface({ data: [memory.address, false], shape: [12], typestr: "<i4" });
  assert.ok(c.cContiguous);
});

test("refusals: stride divisibility, shape, mask, version, NULL data; keepAlive still released", () => {
  const before = stats().pinned;
  let released = 0;
  const keepAlive = { dispose: () => released++ };
  using memory = zeros([8], "float64");
  const base = { data: [memory.address, false] as const, typestr: "<f8" };
  const refused = (iface: Parameters<typeof fromArrayInterface>[0], code: string, pattern: RegExp) =>
    assert.throws(() => fromArrayInterface(iface, keepAlive), (e: unknown) => {
      assert.ok(e instanceof DLPackError, String(e));
      assert.equal(e.code, code, e.message);
      assert.match(e.message, pattern);
      return true;
    });
  refused(
    { ...base, shape: [2], strides: [12] },
    "strides",
    /byte stride 12 of dimension 0 is not a multiple of the 8-byte item size/,
  );
  refused({ ...base, shape: [2, 2], strides: [8] }, "strides", /must list 2 byte strides/);
  refused({ ...base, shape: [-1] }, "shape", /non-negative/);
  refused({ ...base, shape: [2], mask: {} }, "null_data", /masked/);
  refused({ ...base, shape: [2], version: 4 }, "version", /version 4/);
  refused({ ...base, shape: [2], typestr: ">f8" }, "dtype", /byte order/);
  refused({ data: [0, false], shape: [3], typestr: "<f8" }, "null_data", /data is NULL but the tensor has 3 elements/);
  refused({ ...base, shape: [1 << 30, 1 << 30], strides: [0, 0] }, "overflow", /overflows/);
  stats();
  assert.equal(released, 8, "every refusal releases keepAlive, before or after the struct was built");
  assert.equal(stats().pinned, before);
  using zero = fromArrayInterface({ data: [0, false], shape: [0], typestr: "<f8" });
  assert.equal(zero.size, 0);
});
