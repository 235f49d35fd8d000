// Every malformed input of the core issue: a DLPackError with the right code, the producer's
// deleter called exactly once, the process alive. Each case runs for both struct generations
// where the field exists in both.
import assert from "node:assert/strict";
import { DLPackError, type ErrorCode, fromDLPack, importDLPack, stats } from "../../mod.ts";
import { deleted, make, type TensorSpec } from "../support/producer.ts";
import { test } from "../support/harness.ts";

function expectRefusal(spec: TensorSpec, code: ErrorCode, message: RegExp, strict = false): void {
  const before = deleted();
  const importsBefore = stats().imports;
  const made = make(spec);
  assert.throws(
    () => (strict ? fromDLPack(made.source) : importDLPack(made.source)),
    (e: unknown) => {
      assert.ok(e instanceof DLPackError, `expected DLPackError, got ${e}`);
      assert.equal(e.code, code, e.message);
      assert.match(e.message, message);
      return true;
    },
  );
  assert.equal(deleted() - before, 1, "deleter called exactly once");
  assert.equal(stats().imports, importsBefore, "no import left alive");
}

const generations = [true, false];

for (const versioned of generations) {
  const gen = versioned ? "versioned" : "legacy";
  const cases: Array<[string, TensorSpec, ErrorCode, RegExp]> = [
    ["unknown dtype code", { dtype: { code: 99, bits: 8, lanes: 1 } }, "dtype", /unknown dtype code 99/],
    ["fp6 (e2m3) with bits 8", { dtype: { code: 15, bits: 8, lanes: 1 } }, "dtype", /needs bits 6/],
    ["fp6 (e3m2) with bits 4", { dtype: { code: 16, bits: 4, lanes: 1 } }, "dtype", /needs bits 6/],
    ["fp4 with bits 8", { dtype: { code: 17, bits: 8, lanes: 1 } }, "dtype", /needs bits 4/],
    ["fp8 with bits 16", { dtype: { code: 10, bits: 16, lanes: 1 } }, "dtype", /float8 codes need bits 8/],
    ["Int with bits 7", { dtype: { code: 0, bits: 7, lanes: 1 } }, "dtype", /needs bits 8, 16, 32 or 64/],
    ["lanes 2", { dtype: { code: 2, bits: 32, lanes: 2 } }, "dtype", /lanes must be 1/],
    ["opaque handle", { dtype: { code: 3, bits: 64, lanes: 1 } }, "dtype", /opaque/],
    ["ndim < 0", { ndim: -1, shape: [4] }, "rank", /ndim -1 is outside 0\.\.64/],
    ["ndim > 64", { ndim: 65, shape: new Array(64).fill(1) }, "rank", /ndim 65/],
    ["negative extent", { shape: [3, -2], strides: [1, 1] }, "shape", /negative extent -2 in dimension 1/],
    ["NULL shape with ndim 2", { shape: null, ndim: 2 }, "shape", /shape is NULL/],
    ["element count overflowing 64 bits", { shape: [1n << 40n, 1n << 40n], strides: [0, 0] }, "overflow", /overflows/],
    ["element count beyond 2^53", { shape: [1n << 30n, 1n << 30n], strides: [0, 0] }, "overflow", /2\^53/],
    ["byte span overflowing 64 bits", { shape: [2, 2], strides: [(1n << 63n) - 1n, 1] }, "overflow", /overflows/],
    ["negative span past address 0", { shape: [3], strides: [-(1n << 50n)] }, "overflow", /overflows/],
    ["byte_offset overflowing the address", { byteOffset: -1n }, "overflow", /overflows/],
    [
      "NULL data with non-zero size",
      { data: "null", shape: [3] },
      "null_data",
      /data is NULL but the tensor has 3 elements/,
    ],
    ["unknown device type 99", { device: [99, 0] }, "device", /unknown device type 99/],
    ["device types 5 and 6 are unused", { device: [5, 0] }, "device", /unknown device type 5/],
    ["negative device id", { device: [2, -1] }, "device", /device id -1/],
  ];
  for (const [name, spec, code, message] of cases) {
    test(`refuses ${name} (${gen})`, () => expectRefusal({ ...spec, versioned }, code, message));
  }
  test(`fromDLPack refuses a non-zero byte_offset (${gen})`, () => {
    expectRefusal({ versioned, byteOffset: 8, dataBytes: 64 }, "byte_offset", /must be 0, got 8/, true);
  });
}

test("refuses versioned major 0 and 2, reading nothing but the deleter", () => {
  for (const major of [0, 2]) {
    // Everything after the frozen header is garbage on purpose: reading it would misreport or crash.
    expectRefusal(
      { version: [major, 0], shape: null, ndim: 9999, dtype: { code: 200, bits: 3, lanes: 9 }, data: "null" },
      "version",
      new RegExp(`major version ${major} is not supported`),
    );
  }
});

test("refuses reserved flag bits", () => {
  expectRefusal({ flags: 8 }, "flags", /reserved flag bits set: flags 0x8/);
  expectRefusal({ flags: 1n << 63n }, "flags", /0x8000000000000000/);
});

test("refuses a NULL managed pointer without calling anything", () => {
  const before = deleted();
  for (const source of [{ versioned: 0 }, { legacy: null }, { versioned: 0n }]) {
    assert.throws(() => importDLPack(source), (e: unknown) => e instanceof DLPackError && e.code === "null_data");
  }
  assert.equal(deleted(), before);
});

test("refuses a misaligned managed pointer without reading or calling anything", () => {
  const before = deleted();
  const made = make();
  for (const offset of [1, 4]) {
    assert.throws(
      () => importDLPack({ versioned: made.address + offset }),
      (e: unknown) =>
        e instanceof DLPackError && e.code === "null_data" && /cannot be a managed tensor \(misaligned/.test(e.message),
    );
  }
  assert.equal(deleted(), before);
  importDLPack(made.source).dispose();
});

test("refuses sources that are not addresses", () => {
  for (const bad of [-1, 1.5, NaN, "0x10", -1n, 1n << 64n, undefined, Infinity]) {
    assert.throws(
      () => importDLPack({ versioned: bad as unknown as number }),
      (e: unknown) => e instanceof DLPackError && e.code === "null_data" && /address/.test(e.message),
    );
  }
  assert.throws(() => importDLPack({} as never), (e: unknown) => e instanceof DLPackError);
  assert.throws(() => importDLPack(null as never), (e: unknown) => e instanceof DLPackError);
});
