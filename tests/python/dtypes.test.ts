// The small-float codecs (bfloat16, FP8, FP6, FP4) against ml_dtypes, the reference implementation
// JAX and PyTorch use: every code decodes to the same value, and rounding picks the same code.
import assert from "node:assert/strict";
import type { MiniFloatDType } from "../../mod.ts";
import { bfloat16ToNumber, decodeMiniFloat, encodeMiniFloat, numberToBfloat16 } from "../../src/facts/scalars.ts";
import { missing, python } from "../support/python.ts";
import { test } from "../support/harness.ts";

const FORMATS: Array<[MiniFloatDType, number]> = [
  ["float8_e3m4", 8],
  ["float8_e4m3", 8],
  ["float8_e4m3b11fnuz", 8],
  ["float8_e4m3fn", 8],
  ["float8_e4m3fnuz", 8],
  ["float8_e5m2", 8],
  ["float8_e5m2fnuz", 8],
  ["float8_e8m0fnu", 8],
  ["float6_e2m3fn", 6],
  ["float6_e3m2fn", 6],
  ["float4_e2m1fn", 4],
];

const skip = { skip: missing("ml_dtypes") };

function samples(): number[] {
  // Deterministic pseudo-random magnitudes over many binades, plus exact halfway and overflow cases.
  let seed = 12345;
  const next = () => ((seed = (seed * 1103515245 + 12345) % 2 ** 31) / 2 ** 31);
  const out: number[] = [
    0,
    -0,
    0.5,
    0.75,
    1.0625,
    1.125,
    3.5,
    7.75,
    1e6,
    -1e6,
    2 ** -12,
    2 ** -20,
    448,
    449,
    464,
    57344,
    61440,
  ];
  for (let i = 0; i < 2000; i++) out.push((next() - 0.5) * 2 ** Math.floor(next() * 40 - 20));
  return out;
}

test("every code of every small float decodes like ml_dtypes", () => {
  const py = python();
  py.exec("import numpy as np, ml_dtypes");
  for (const [dtype, bits] of FORMATS) {
    const count = 1 << bits;
    // Sub-byte formats: ml_dtypes stores one code per byte, in the low bits.
    const expected = py.eval(`np.arange(${count}, dtype=np.uint8).view(ml_dtypes.${dtype}).astype(np.float64).tolist()`)
      .toJS() as number[];
    for (let code = 0; code < count; code++) {
      const ours = decodeMiniFloat(dtype, code);
      const theirs = expected[code];
      assert.ok(
        Object.is(ours, theirs) || (Number.isNaN(ours) && Number.isNaN(theirs)),
        `${dtype} code ${code}: ${ours} vs ${theirs}`,
      );
    }
  }
}, skip);

test("rounding to each small float matches ml_dtypes (nearest, ties to even, overflow)", () => {
  const py = python();
  const values = samples();
  py.set("values", values);
  py.exec("import numpy as np, ml_dtypes\nvals = np.array(values, dtype=np.float64)");
  for (const [dtype] of FORMATS) {
    const inputs = values;
    const expected = py.eval(`vals.astype(ml_dtypes.${dtype}).view(np.uint8).tolist()`).toJS() as number[];
    let mismatches = 0;
    const examples: string[] = [];
    inputs.forEach((v, i) => {
      let ours: number;
      try {
        ours = encodeMiniFloat(dtype, v);
      } catch {
        ours = -1;
      }
      const theirs = expected[i]!;
      const same = ours === theirs ||
        (Number.isNaN(decodeMiniFloat(dtype, ours)) && Number.isNaN(decodeMiniFloat(dtype, theirs)));
      if (!same) {
        mismatches++;
        if (examples.length < 5) {
          examples.push(`${v} -> ours 0x${ours.toString(16)}, ml_dtypes 0x${theirs.toString(16)}`);
        }
      }
    });
    assert.equal(mismatches, 0, `${dtype}: ${mismatches} of ${inputs.length} differ: ${examples.join("; ")}`);
  }
}, skip);

test("bfloat16 and float16 round like ml_dtypes and numpy", () => {
  const py = python();
  const values = samples();
  py.set("values", values);
  py.exec("import numpy as np, ml_dtypes\nvals = np.array(values, dtype=np.float64)");
  const bf = py.eval("vals.astype(np.float32).astype(ml_dtypes.bfloat16).view(np.uint16).tolist()").toJS() as number[];
  values.forEach((v, i) => assert.equal(numberToBfloat16(v), bf[i], `bfloat16(${v})`));
  for (const bits of bf) {
    assert.ok(Object.is(bfloat16ToNumber(bits), bfloat16ToNumber(numberToBfloat16(bfloat16ToNumber(bits)))));
  }
  const half = py.eval("vals.astype(np.float16).astype(np.float64).tolist()").toJS() as number[];
  const ours = Float16Array.from(values);
  values.forEach((v, i) => assert.ok(Object.is(ours[i], half[i]), `float16(${v}): ${ours[i]} vs ${half[i]}`));
}, skip);
