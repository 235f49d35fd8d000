// Element values of every dtype, read and written through get/set and array(), against an
// independent encoding of the same bytes (DataView, hand-computed bit patterns).
import assert from "node:assert/strict";
import { DLPackError, type DType, importDLPack, type MiniFloatDType } from "../../mod.ts";
import { decodeMiniFloat, encodeMiniFloat } from "../../src/facts/scalars.ts";
import { make } from "../support/producer.ts";
import { test } from "../support/harness.ts";

type Writer = (dv: DataView, k: number, value: number) => void;
const LE = true;
const writers: Partial<Record<DType, [Writer, number[]]>> = {
  int8: [(dv, k, v) => dv.setInt8(k, v), [-128, -1, 0, 127]],
  int16: [(dv, k, v) => dv.setInt16(2 * k, v, LE), [-32768, -2, 3, 32767]],
  int32: [(dv, k, v) => dv.setInt32(4 * k, v, LE), [-(2 ** 31), -5, 6, 2 ** 31 - 1]],
  uint8: [(dv, k, v) => dv.setUint8(k, v), [0, 1, 200, 255]],
  uint16: [(dv, k, v) => dv.setUint16(2 * k, v, LE), [0, 1, 40000, 65535]],
  uint32: [(dv, k, v) => dv.setUint32(4 * k, v, LE), [0, 1, 3e9, 2 ** 32 - 1]],
  float16: [(dv, k, v) => dv.setFloat16(2 * k, v, LE), [-2.5, 0.0999755859375, 65504, -0]],
  float32: [(dv, k, v) => dv.setFloat32(4 * k, v, LE), [-1.5, 3.25, 2 ** 100, -0]],
  float64: [(dv, k, v) => dv.setFloat64(8 * k, v, LE), [Math.PI, -1e300, 5e-324, Infinity]],
};

for (const versioned of [true, false]) {
  const gen = versioned ? "versioned" : "legacy";
  for (const [dtype, [write, values]] of Object.entries(writers) as Array<[DType, [Writer, number[]]]>) {
    test(`${dtype} values through get and array() (${gen})`, () => {
      const made = make({ versioned, dtype, shape: [4] });
      const bytes = made.bytes(64);
      const dv = new DataView(bytes.buffer);
      values.forEach((v, k) => write(dv, k, v));
      using view = importDLPack(made.source);
      values.forEach((v, k) => assert.ok(Object.is(view.get(k), v), `${dtype}[${k}]: ${view.get(k)} vs ${v}`));
      assert.deepEqual(Array.from(view.array() as ArrayLike<number>), values);
    });
  }
}

test("int64 and uint64 read and write bigints", () => {
  for (const dtype of ["int64", "uint64"] as const) {
    const made = make({ dtype, shape: [3] });
    const dv = new DataView(made.bytes(24).buffer);
    const values: [bigint, bigint, bigint] = dtype === "int64"
      ? [-(2n ** 63n), -1n, 2n ** 63n - 1n]
      : [0n, 2n ** 63n, 2n ** 64n - 1n];
    values.forEach((v, k) => (dtype === "int64" ? dv.setBigInt64(8 * k, v, LE) : dv.setBigUint64(8 * k, v, LE)));
    using view = importDLPack(made.source);
    assert.deepEqual([0, 1, 2].map((k) => view.get(k)), values);
    view.set(values[0] + 1n, 2);
    assert.equal(view.get(2), values[0] + 1n);
    assert.throws(() => view.set(1, 0), (e: unknown) => e instanceof DLPackError && e.code === "dtype");
  }
});

test("bool reads booleans and writes only booleans", () => {
  const made = make({ dtype: "bool", shape: [3] });
  made.bytes(3).set([0, 1, 0]);
  using view = importDLPack(made.source);
  assert.deepEqual([0, 1, 2].map((k) => view.get(k)), [false, true, false]);
  view.set(true, 2);
  assert.equal(made.bytes(3)[2], 1);
  assert.throws(() => view.set(1, 0), (e: unknown) => e instanceof DLPackError && e.code === "dtype");
  assert.ok(view.array() instanceof Uint8Array);
});

test("bfloat16: bits in array(), numbers through get/set with round-to-nearest-even", () => {
  const made = make({ dtype: "bfloat16", shape: [4] });
  const u16 = new Uint16Array(made.bytes(8).buffer);
  u16.set([0x3f80, 0xc000, 0x3fc0, 0x7f80]); // 1, -2, 1.5, +inf
  using view = importDLPack(made.source);
  assert.deepEqual([0, 1, 2, 3].map((k) => view.get(k)), [1, -2, 1.5, Infinity]);
  view.set(1 + 2 ** -8, 0); // exactly halfway between 1 and 1 + 2^-7: ties to even (1)
  assert.equal(u16[0], 0x3f80);
  view.set(1 + 3 * 2 ** -8, 0); // halfway between 1+2^-7 (odd) and 1+2^-6 (even)
  assert.equal(u16[0], 0x3f82);
  view.set(NaN, 1);
  assert.ok(Number.isNaN(view.get(1) as number));
  assert.ok(view.array() instanceof Uint16Array);
});

test("complex64, complex128 and complex32 interleave [re, im]", () => {
  const cases = [["complex64", Float32Array, 8], ["complex128", Float64Array, 16], [
    "complex32",
    Float16Array,
    4,
  ]] as const;
  for (const [dtype, Ctor, size] of cases) {
    const made = make({ dtype, shape: [2] });
    const parts = new Ctor(made.bytes(2 * size).buffer);
    parts.set([1, -2, 0.5, 4]);
    using view = importDLPack(made.source);
    assert.deepEqual(view.get(0), [1, -2]);
    assert.deepEqual(view.get(1), [0.5, 4]);
    view.set([3, 5], 0);
    assert.deepEqual(Array.from(parts), [3, 5, 0.5, 4]);
    assert.ok(view.array() instanceof Ctor);
    assert.equal(view.array().length, 4);
    assert.throws(() => view.set(3, 0), (e: unknown) => e instanceof DLPackError && e.code === "dtype");
  }
});

// Known encodings (from the format definitions: sign, exponent, mantissa, bias).
const knownBits: Array<[MiniFloatDType, number, number]> = [
  ["float8_e4m3fn", 0x38, 1],
  ["float8_e4m3fn", 0xc0, -2],
  ["float8_e4m3fn", 0x7e, 448],
  ["float8_e4m3fn", 0x01, 2 ** -9],
  ["float8_e4m3fn", 0x7f, NaN],
  ["float8_e4m3", 0x78, Infinity],
  ["float8_e4m3", 0x77, 240],
  ["float8_e5m2", 0x3c, 1],
  ["float8_e5m2", 0x7c, Infinity],
  ["float8_e5m2", 0x7b, 57344],
  ["float8_e5m2", 0xfc, -Infinity],
  ["float8_e5m2fnuz", 0x40, 1],
  ["float8_e5m2fnuz", 0x80, NaN],
  ["float8_e4m3fnuz", 0x40, 1],
  ["float8_e4m3fnuz", 0x7f, 240],
  ["float8_e4m3b11fnuz", 0x58, 1],
  ["float8_e4m3b11fnuz", 0x80, NaN],
  ["float8_e3m4", 0x30, 1],
  ["float8_e3m4", 0x70, Infinity],
  ["float8_e8m0fnu", 0x7f, 1],
  ["float8_e8m0fnu", 0x80, 2],
  ["float8_e8m0fnu", 0x00, 2 ** -127],
  ["float8_e8m0fnu", 0xff, NaN],
  ["float6_e2m3fn", 0x08, 1],
  ["float6_e2m3fn", 0x1f, 7.5],
  ["float6_e2m3fn", 0x21, -0.125],
  ["float6_e3m2fn", 0x0c, 1],
  ["float6_e3m2fn", 0x1f, 28],
  ["float4_e2m1fn", 0x2, 1],
  ["float4_e2m1fn", 0x7, 6],
  ["float4_e2m1fn", 0xf, -6],
  ["float4_e2m1fn", 0x1, 0.5],
];

test("small float formats decode their known bit patterns", () => {
  for (const [dtype, bits, value] of knownBits) {
    assert.ok(Object.is(decodeMiniFloat(dtype, bits), value), `${dtype} 0x${bits.toString(16)} -> ${value}`);
    if (!Number.isNaN(value)) {
      assert.equal(encodeMiniFloat(dtype, value), bits, `${dtype} ${value} -> 0x${bits.toString(16)}`);
    }
  }
});

test("small float formats: every code round-trips through its value", () => {
  const formats: Array<[MiniFloatDType, number]> = [
    ["float8_e3m4", 256],
    ["float8_e4m3", 256],
    ["float8_e4m3b11fnuz", 256],
    ["float8_e4m3fn", 256],
    ["float8_e4m3fnuz", 256],
    ["float8_e5m2", 256],
    ["float8_e5m2fnuz", 256],
    ["float8_e8m0fnu", 256],
    ["float6_e2m3fn", 64],
    ["float6_e3m2fn", 64],
    ["float4_e2m1fn", 16],
  ];
  for (const [dtype, count] of formats) {
    for (let code = 0; code < count; code++) {
      const value = decodeMiniFloat(dtype, code);
      if (Number.isNaN(value)) continue;
      assert.equal(encodeMiniFloat(dtype, value), code, `${dtype} code ${code} (${value})`);
    }
  }
  // Rounding: halfway between 1 and 1.125 in e4m3fn goes to the even code (1); overflow to NaN.
  assert.equal(encodeMiniFloat("float8_e4m3fn", 1.0625), 0x38);
  assert.ok(Number.isNaN(decodeMiniFloat("float8_e4m3fn", encodeMiniFloat("float8_e4m3fn", 1e6))));
  assert.equal(encodeMiniFloat("float8_e5m2", 1e6), 0x7c);
  assert.equal(encodeMiniFloat("float4_e2m1fn", 100), 0x7, "formats without inf/NaN saturate");
  assert.throws(() => encodeMiniFloat("float4_e2m1fn", NaN), DLPackError);
  assert.ok(
    Number.isNaN(decodeMiniFloat("float8_e8m0fnu", encodeMiniFloat("float8_e8m0fnu", -1))),
    "e8m0 has no negatives",
  );
  assert.ok(Number.isNaN(decodeMiniFloat("float8_e8m0fnu", encodeMiniFloat("float8_e8m0fnu", 0))), "nor zero");
  assert.equal(encodeMiniFloat("float8_e8m0fnu", 3), 0x81, "ties round up without a mantissa");
});

test("fp8 through a view: Uint8Array bits, numbers through get/set", () => {
  const made = make({ dtype: "float8_e4m3fn", shape: [3] });
  made.bytes(3).set([0x38, 0xc0, 0x00]);
  using view = importDLPack(made.source);
  assert.deepEqual([0, 1, 2].map((k) => view.get(k)), [1, -2, 0]);
  view.set(448, 2);
  assert.equal(made.bytes(3)[2], 0x7e);
  assert.ok(view.array() instanceof Uint8Array);
});

test("packed fp4: two elements per byte, low nibble first, strides in elements", () => {
  const made = make({ dtype: "float4_e2m1fn", shape: [5] });
  made.bytes(3).set([0x72, 0x1f, 0x02]); // elements: 2 (1.0), 7 (6.0), f (-6), 1 (0.5), 2 (1.0)
  using view = importDLPack(made.source);
  assert.equal(view.nbytes, 3);
  assert.deepEqual([0, 1, 2, 3, 4].map((k) => view.get(k)), [1, 6, -6, 0.5, 1]);
  view.set(-0.5, 3);
  assert.equal(made.bytes(3)[1], 0x9f);
  assert.deepEqual(Array.from(view.toArray() as Uint8Array), [2, 7, 0xf, 9, 2]);

  // Every other element, backwards.
  using back = importDLPack(
    make({ dtype: "float4_e2m1fn", shape: [2], strides: [-2], byteOffset: 1, dataBytes: 2 }).source,
  );
  assert.equal(back.size, 2);
});

test("packed fp6: elements straddle byte boundaries", () => {
  const made = make({ dtype: "float6_e2m3fn", shape: [4] });
  // 4 x 6 bits = 24 bits: codes 0x08 (1), 0x1f (7.5), 0x21 (-0.125), 0x00.
  const bits = 0x08 | (0x1f << 6) | (0x21 << 12);
  made.bytes(3).set([bits & 0xff, (bits >> 8) & 0xff, (bits >> 16) & 0xff]);
  using view = importDLPack(made.source);
  assert.deepEqual([0, 1, 2, 3].map((k) => view.get(k)), [1, 7.5, -0.125, 0]);
  view.set(7.5, 3);
  assert.equal(view.get(3), 7.5);
  assert.equal(view.get(2), -0.125, "neighbours untouched");
});

test("padded fp4 (IS_SUBBYTE_TYPE_PADDED): one element per byte", () => {
  const made = make({ dtype: "float4_e2m1fn", shape: [3], flags: 4 });
  made.bytes(3).set([0x2, 0x7, 0xf]);
  using view = importDLPack(made.source);
  assert.equal(view.nbytes, 3);
  assert.ok(view.flags.subbytePadded);
  assert.deepEqual([0, 1, 2].map((k) => view.get(k)), [1, 6, -6]);
});
