// The interop certification matrix: every pair this machine can exercise (numpy, JAX and pyarrow in
// the embedded CPython, and JS itself), every dtype each side supports, both DLPack generations where
// the peer offers them, and the layouts users hit. Each case checks the address (zero-copy) and
// every value, and is recorded in .scratch/matrix/<runtime>.json; tools/matrix.ts turns the latest
// run into the README's table (a cell says supported only if a case exercised it in that run).
import assert from "node:assert/strict";
import { mkdirSync, writeFileSync } from "node:fs";
import {
  type AnyTypedArray,
  type BufferView,
  type DType,
  DTYPES,
  empty,
  exportDLPack,
  exportDLPackLegacy,
  type ExportOptions,
  importDLPack,
} from "../mod.ts";
import { fromPython, toPython } from "../python.ts";
import { runtime } from "../ffi/mod.ts";
import { encodeMiniFloat, isMiniFloat } from "../src/scalars.ts";
import { missing, noPython, py } from "./support/python.ts";
import { runtimeName, test } from "./support/harness.ts";

/** One exercised cell. */
interface Result {
  pair: string;
  dtype: DType;
  generation: "versioned" | "legacy";
  layout: string;
  /** "zero-copy", "copy" (the peer copied, values checked), or "peer-refuses" (documented refusal). */
  outcome: "zero-copy" | "copy" | "peer-refuses" | "failed";
  detail: string;
}

const results: Result[] = [];

function matrixCase(
  pair: string,
  dtype: DType,
  generation: Result["generation"],
  layout: string,
  body: () => { outcome: Result["outcome"]; detail?: string },
  skip: string | false,
): void {
  test(`matrix ${pair} ${dtype} ${generation} ${layout}`, () => {
    try {
      const { outcome, detail } = body();
      results.push({ pair, dtype, generation, layout, outcome, detail: detail ?? "" });
    } catch (error) {
      results.push({ pair, dtype, generation, layout, outcome: "failed", detail: String(error).slice(0, 300) });
      throw error;
    }
  }, { skip });
}

// ---------------------------------------------------------------------------------------------
// Values: every case fills 6 (or fewer) elements with small values each dtype represents exactly.

const NUMPY_DTYPES: DType[] = [
  "bool",
  "int8",
  "int16",
  "int32",
  "int64",
  "uint8",
  "uint16",
  "uint32",
  "uint64",
  "float16",
  "float32",
  "float64",
  "complex64",
  "complex128",
];

const ML_DTYPES: DType[] = [
  "bfloat16",
  "float8_e3m4",
  "float8_e4m3",
  "float8_e4m3b11fnuz",
  "float8_e4m3fn",
  "float8_e4m3fnuz",
  "float8_e5m2",
  "float8_e5m2fnuz",
  "float8_e8m0fnu",
  "float4_e2m1fn",
];

/** Python expression for 6 exact values of a dtype (numpy or ml_dtypes name). */
function pyValues(dtype: DType): string {
  if (dtype === "bool") return "np.array([True, False, True, True, False, True])";
  if (dtype.startsWith("complex")) return `(np.arange(6) - 2 + 1j * np.arange(6)).astype(np.${dtype})`;
  if (dtype.startsWith("uint")) return `np.arange(6).astype(np.${dtype})`;
  if (dtype === "float8_e8m0fnu") return "np.array([1, 2, 4, 8, 0.5, 0.25]).astype(ml_dtypes.float8_e8m0fnu)";
  if (dtype === "float4_e2m1fn") return "np.array([0, 0.5, -1, 1.5, 2, -3]).astype(ml_dtypes.float4_e2m1fn)";
  if (ML_DTYPES.includes(dtype)) return `(np.arange(6) - 2).astype(ml_dtypes.${dtype})`;
  return `(np.arange(6) - 2).astype(np.${dtype})`;
}

/** Flattened values of a view in C order, in the form Python's tolist() gives them. */
function jsValues(view: BufferView): unknown[] {
  const out: unknown[] = [];
  const shape = view.shape;
  const index = new Array<number>(shape.length).fill(0);
  for (let k = 0; k < view.size; k++) {
    const v = view.get(...index);
    out.push(typeof v === "bigint" ? Number(v) : v);
    for (let d = shape.length - 1; d >= 0; d--) {
      if (++index[d] < shape[d]) break;
      index[d] = 0;
    }
  }
  return out;
}

/** Python's view of the same values: flattened tolist(), complex as [re, im], ml_dtypes as floats. */
function pyFlat(expr: string): unknown[] {
  const values = python().eval(`flat(${expr})`).toJS() as unknown[];
  return values;
}

function sameValues(js: unknown[], py: unknown[], what: string): void {
  assert.equal(js.length, py.length, `${what}: element count`);
  for (let i = 0; i < js.length; i++) {
    const a = js[i];
    const b = py[i];
    const equal = Array.isArray(a) ? JSON.stringify(a) === JSON.stringify(b) : Object.is(a, b) || a === b;
    assert.ok(equal, `${what}[${i}]: JS ${JSON.stringify(a)} vs Python ${JSON.stringify(b)}`);
  }
}

function python() {
  if (py === undefined) throw new Error("no python");
  return py;
}

let prepared = false;
function prepare(): void {
  if (prepared) return;
  python().exec([
    "import numpy as np, ml_dtypes",
    "def flat(a):",
    "    a = np.asarray(a)",
    "    if a.dtype.kind == 'c':",
    "        return [[float(v.real), float(v.imag)] for v in a.reshape(-1)]",
    "    if a.dtype.kind == 'V' or a.dtype.type.__module__.startswith('ml_dtypes'):",
    "        return [float(v) for v in a.reshape(-1)]",
    "    return a.reshape(-1).tolist()",
    "class LegacyOnly:",
    "    '''A producer that only speaks the pre-1.0 protocol (no max_version).'''",
    "    def __init__(self, inner): self.inner = inner",
    "    def __dlpack__(self, stream=None): return self.inner.__dlpack__()",
    "    def __dlpack_device__(self): return self.inner.__dlpack_device__()",
  ].join("\n"));
  prepared = true;
}

// ---------------------------------------------------------------------------------------------
// numpy -> JS

const NUMPY_LAYOUTS: Record<string, string> = {
  "C": "base.reshape(2, 3)",
  "F": "np.asfortranarray(base.reshape(2, 3))",
  "negative strides": "base.reshape(2, 3)[:, ::-1]",
  "sliced with offset": "np.concatenate([base, base]).reshape(3, 4)[1:, 1:3]",
  "0-d": "np.array(base[3])",
  "size 0": "base[:0].reshape(0, 3)",
  "read-only": "readonly(base.reshape(2, 3))",
};

for (const dtype of NUMPY_DTYPES) {
  for (const generation of ["versioned", "legacy"] as const) {
    for (const [layout, expr] of Object.entries(NUMPY_LAYOUTS)) {
      matrixCase("numpy → JS", dtype, generation, layout, () => {
        prepare();
        const p = python();
        p.exec(
          `base = ${
            pyValues(dtype)
          }\ndef readonly(a):\n    a = a.copy(); a.flags.writeable = False; return a\nsrc = ${expr}`,
        );
        using src = p.eval("src");
        if (layout === "read-only" && generation === "legacy") {
          // numpy refuses to export read-only data through the legacy struct (it cannot say so).
          assert.throws(() => fromPython(src, { maxVersion: null }), /BufferError/);
          return { outcome: "peer-refuses", detail: "numpy raises BufferError for legacy export of read-only data" };
        }
        using view = fromPython(src, { maxVersion: generation === "versioned" ? [1, 3] : null });
        assert.equal(view.dtype, dtype);
        assert.equal(view.version === null, generation === "legacy", "the generation numpy answered with");
        assert.deepEqual(view.shape, p.eval("list(src.shape)").toJS());
        assert.equal(view.address, BigInt(p.eval("src.ctypes.data").toJS() as number), "zero-copy");
        sameValues(jsValues(view), pyFlat("src"), `${dtype} ${layout}`);
        if (layout === "read-only") assert.equal(view.access, "readonly");
        return { outcome: "zero-copy" };
      }, noPython);
    }
  }
}

// ---------------------------------------------------------------------------------------------
// JS -> numpy (and JS -> JAX): TypedArrays with export options describing each layout.

interface JsLayout {
  readonly opts: (base: number) => ExportOptions;
  /** Element offset of element 0 from the array start (for the expected address). */
  readonly offset: number;
}

const JS_LAYOUTS: Record<string, JsLayout> = {
  "C": { opts: () => ({ shape: [2, 3] }), offset: 0 },
  "F": { opts: () => ({ shape: [2, 3], strides: [1, 2] }), offset: 0 },
  "negative strides": { opts: () => ({ shape: [2, 3], strides: [3, -1], offset: 2 }), offset: 2 },
  "sliced with offset": { opts: () => ({ shape: [2], strides: [2], offset: 1 }), offset: 1 },
  "0-d": { opts: () => ({ shape: [], offset: 4 }), offset: 4 },
  "size 0": { opts: () => ({ shape: [0, 3] }), offset: 0 },
  "read-only": { opts: () => ({ shape: [2, 3], readonly: true }), offset: 0 },
};

/** A TypedArray of 6 elements of `dtype` (reinterpreted where JS has no array type), and the
 * export dtype option it needs. */
function jsSource(dtype: DType): { array: AnyTypedArray; dtype?: DType } {
  const ints = [0, 1, 2, 3, 4, 5];
  switch (dtype) {
    case "bool":
      return { array: new Uint8Array([1, 0, 1, 1, 0, 1]), dtype };
    case "int8":
      return { array: Int8Array.from(ints, (v) => v - 2) };
    case "int16":
      return { array: Int16Array.from(ints, (v) => v - 2) };
    case "int32":
      return { array: Int32Array.from(ints, (v) => v - 2) };
    case "int64":
      return { array: BigInt64Array.from(ints, (v) => BigInt(v - 2)) };
    case "uint8":
      return { array: Uint8Array.from(ints) };
    case "uint16":
      return { array: Uint16Array.from(ints) };
    case "uint32":
      return { array: Uint32Array.from(ints) };
    case "uint64":
      return { array: BigUint64Array.from(ints, BigInt) };
    case "float16":
      return { array: Float16Array.from(ints, (v) => v - 2.5) };
    case "float32":
      return { array: Float32Array.from(ints, (v) => v - 2.5) };
    case "float64":
      return { array: Float64Array.from(ints, (v) => v / 4 - 1) };
    case "complex64":
      return { array: Float32Array.from({ length: 12 }, (_, i) => i - 3), dtype };
    case "complex128":
      return { array: Float64Array.from({ length: 12 }, (_, i) => i - 3), dtype };
    case "bfloat16":
      return { array: new Uint16Array([0x3f80, 0xc000, 0x4040, 0, 0x3f00, 0xbf80]), dtype };
    case "complex32":
      return { array: Float16Array.from({ length: 12 }, (_, i) => i - 3), dtype };
  }
  if (isMiniFloat(dtype)) {
    const values = dtype === "float8_e8m0fnu"
      ? [1, 2, 4, 8, 0.5, 0.25]
      : dtype === "float4_e2m1fn"
      ? [0, 0.5, -1, 1.5, 2, -3]
      : [-2, -1, 0, 1, 2, 3];
    const codes = values.map((v) => encodeMiniFloat(dtype, v));
    const bits = dtype.startsWith("float4") ? 4 : dtype.startsWith("float6") ? 6 : 8;
    if (bits === 8) return { array: Uint8Array.from(codes), dtype };
    // Packed, low bits first (DLPack's sub-byte layout).
    const bytes = new Uint8Array(Math.ceil((codes.length * bits) / 8) + 1);
    codes.forEach((code, k) => {
      const bit = k * bits;
      const word = code << (bit & 7);
      bytes[bit >>> 3] |= word & 0xff;
      bytes[(bit >>> 3) + 1] |= word >>> 8;
    });
    return { array: bytes, dtype };
  }
  throw new Error(`no JS source for ${dtype}`);
}

/** Layouts whose element 0 would not start on a byte boundary for packed sub-byte dtypes. */
function layoutFits(dtype: DType, spec: JsLayout): boolean {
  const bits = dtype.startsWith("float4") ? 4 : dtype.startsWith("float6") ? 6 : 8;
  return (spec.offset * bits) % 8 === 0;
}

const JS_TO_NUMPY: DType[] = NUMPY_DTYPES;
for (const dtype of JS_TO_NUMPY) {
  for (const generation of ["versioned", "legacy"] as const) {
    for (const [layout, spec] of Object.entries(JS_LAYOUTS)) {
      matrixCase("JS → numpy", dtype, generation, layout, () => {
        prepare();
        const p = python();
        const source = jsSource(dtype);
        const opts = { ...spec.opts(0), ...(source.dtype ? { dtype: source.dtype } : {}) };
        using t = toPython(source.array, p, opts);
        p.set("t", t);
        const producer = generation === "versioned" ? "t" : "LegacyOnly(t)";
        if (layout === "read-only" && generation === "legacy") {
          assert.throws(() => p.exec(`np.from_dlpack(${producer})`), /BufferError: .*read-only/);
          p.exec("del t");
          return { outcome: "peer-refuses", detail: "read-only data cannot travel as legacy DLPack (BufferError)" };
        }
        p.exec(`b = np.from_dlpack(${producer})`);
        using mirror = importDLPack(exportDLPack(source.array, opts));
        const itemBytes = mirror.dl.bits / 8;
        const expected = mirror.size === 0 ? null : runtime().addressOf(source.array) + spec.offset * itemBytes;
        if (expected !== null) assert.equal(p.eval("b.ctypes.data").toJS(), expected, "zero-copy");
        assert.deepEqual(p.eval("list(b.shape)").toJS(), mirror.shape);
        sameValues(jsValues(mirror), pyFlat("b"), `${dtype} ${layout}`);
        const writeable = p.eval("b.flags.writeable").toJS();
        // numpy marks legacy imports read-only; versioned ones follow READ_ONLY.
        assert.equal(writeable, generation === "versioned" && layout !== "read-only");
        p.exec("del b, t");
        return { outcome: "zero-copy" };
      }, noPython);
    }
  }
}

// ---------------------------------------------------------------------------------------------
// JAX <-> JS (JAX produces only legacy capsules; 64-bit types need jax_enable_x64).

const noJax = missing("jax");
const JAX_DTYPES: DType[] = [...NUMPY_DTYPES, ...ML_DTYPES];
const JAX_LAYOUTS: Record<string, string> = {
  "C": "jnp.asarray(base.reshape(2, 3))",
  "0-d": "jnp.asarray(base[3])",
  "size 0": "jnp.asarray(base[:0].reshape(0, 3))",
};

let jaxReady = false;
function prepareJax(): void {
  prepare();
  if (jaxReady) return;
  python().exec("import jax, jax.numpy as jnp\njax.config.update('jax_enable_x64', True)");
  jaxReady = true;
}

for (const dtype of JAX_DTYPES) {
  for (const [layout, expr] of Object.entries(JAX_LAYOUTS)) {
    matrixCase("JAX → JS", dtype, "legacy", layout, () => {
      prepareJax();
      const p = python();
      p.exec(`base = ${pyValues(dtype)}\nsrc = ${expr}`);
      try {
        p.exec("src.__dlpack__()");
      } catch (error) {
        return { outcome: "peer-refuses", detail: `JAX does not export it: ${String(error).slice(0, 120)}` };
      }
      using src = p.eval("src");
      using view = fromPython(src);
      assert.equal(view.dtype, dtype);
      assert.equal(view.version, null, "JAX answers with the legacy struct");
      assert.equal(view.producer, "jaxlib._jax.ArrayImpl");
      if (view.size > 0) {
        assert.equal(view.address, BigInt(p.eval("src.unsafe_buffer_pointer()").toJS() as number), "zero-copy");
      }
      sameValues(jsValues(view), pyFlat("np.asarray(src)"), `${dtype} ${layout}`);
      return { outcome: "zero-copy" };
    }, noJax);
  }
}

const JS_TO_JAX_LAYOUTS = ["C", "0-d", "size 0", "negative strides", "F", "C, 64-byte aligned"];
// jax.dlpack.from_dlpack calls __dlpack__(stream=None): it asks for the legacy struct.
for (const dtype of JAX_DTYPES) {
  for (const layout of JS_TO_JAX_LAYOUTS) {
    if (!layoutFits(dtype, JS_LAYOUTS[layout] ?? JS_LAYOUTS.C)) continue;
    matrixCase("JS → JAX", dtype, "legacy", layout, () => {
      prepareJax();
      const p = python();
      const source = jsSource(dtype);
      const aligned = layout === "C, 64-byte aligned";
      const spec = JS_LAYOUTS[aligned ? "C" : layout];
      const opts = { ...spec.opts(0), ...(source.dtype ? { dtype: source.dtype } : {}) };
      // XLA's CPU client aliases only 64-byte-aligned memory: library allocations are.
      using memory = aligned ? empty([2, 3], dtype) : undefined;
      if (memory !== undefined) {
        const bytes = memory.array();
        new Uint8Array(bytes.buffer, bytes.byteOffset, bytes.byteLength).set(
          new Uint8Array(source.array.buffer, 0, bytes.byteLength),
        );
      }
      using t = memory !== undefined ? toPython(memory, p) : toPython(source.array, p, opts);
      p.set("t", t);
      try {
        p.exec("y = jax.dlpack.from_dlpack(t)");
      } catch (error) {
        p.exec("del t");
        // XLA documents both: strides must be compact, and packed sub-byte buffers have no CPU layout.
        if ((layout === "negative strides" || layout === "F") && /UNIMPLEMENTED/.test(String(error))) {
          return { outcome: "peer-refuses", detail: `JAX refuses non-compact strides: ${String(error).slice(0, 100)}` };
        }
        if (
          dtype === "float4_e2m1fn" && /UNIMPLEMENTED: PjRt CPU buffers only support default layout/.test(String(error))
        ) {
          return { outcome: "peer-refuses", detail: `JAX cannot import packed fp4: ${String(error).slice(0, 100)}` };
        }
        throw error;
      }
      using mirror = importDLPack(exportDLPack(source.array, opts));
      sameValues(jsValues(mirror), pyFlat("np.asarray(y)"), `${dtype} ${layout}`);
      let outcome: Result["outcome"] = "copy";
      if (mirror.size > 0) {
        const start = memory !== undefined ? Number(memory.address) : runtime().addressOf(source.array);
        const expected = start + spec.offset * (mirror.dl.bits / 8);
        if (p.eval("y.unsafe_buffer_pointer()").toJS() === expected) outcome = "zero-copy";
      } else outcome = "zero-copy";
      p.exec("del y, t");
      if (aligned) assert.equal(outcome, "zero-copy", "JAX aliases 64-byte-aligned memory");
      return {
        outcome,
        detail: outcome === "copy" ? "JAX copied: XLA's CPU client aliases only 64-byte-aligned buffers" : "",
      };
    }, noJax);
  }
}

// ---------------------------------------------------------------------------------------------
// pyarrow -> JS (pyarrow exports primitive arrays without nulls, legacy struct).

const noArrow = missing("pyarrow");
const ARROW_DTYPES: DType[] = [
  "int8",
  "int16",
  "int32",
  "int64",
  "uint8",
  "uint16",
  "uint32",
  "uint64",
  "float16",
  "float32",
  "float64",
  "bool",
];
const ARROW_LAYOUTS: Record<string, string> = {
  "C": "pa.array(base)",
  "sliced with offset": "pa.array(base).slice(2, 3)",
  "size 0": "pa.array(base[:0])",
};
for (const dtype of ARROW_DTYPES) {
  for (const [layout, expr] of Object.entries(ARROW_LAYOUTS)) {
    matrixCase("pyarrow → JS", dtype, "legacy", layout, () => {
      prepare();
      const p = python();
      p.exec(`import pyarrow as pa\nbase = ${pyValues(dtype)}\nsrc = ${expr}`);
      try {
        p.exec("src.__dlpack__()");
      } catch (error) {
        return { outcome: "peer-refuses", detail: `pyarrow does not export it: ${String(error).slice(0, 120)}` };
      }
      using src = p.eval("src");
      using view = fromPython(src);
      assert.equal(view.dtype, dtype);
      if (view.size > 0) {
        const address = p.eval("src.buffers()[1].address + src.offset * src.type.byte_width").toJS();
        assert.equal(view.address, BigInt(address as number), "zero-copy");
      }
      sameValues(jsValues(view), pyFlat("src.to_numpy(zero_copy_only=False)"), `${dtype} ${layout}`);
      return { outcome: "zero-copy" };
    }, noArrow);
  }
}

// ---------------------------------------------------------------------------------------------
// JS -> JS: every dtype of the table, both generations, every layout.

for (const dtype of DTYPES) {
  for (const generation of ["versioned", "legacy"] as const) {
    for (const [layout, spec] of Object.entries(JS_LAYOUTS)) {
      if (!layoutFits(dtype, spec)) continue;
      matrixCase("JS → JS", dtype, generation, layout, () => {
        const source = jsSource(dtype);
        const opts = { ...spec.opts(0), ...(source.dtype ? { dtype: source.dtype } : {}) };
        if (generation === "legacy" && layout === "read-only") {
          assert.throws(
            () => exportDLPackLegacy(source.array, opts),
            /legacy DLManagedTensor cannot mark data read-only/,
          );
          return {
            outcome: "peer-refuses",
            detail: "legacy export of read-only data is refused (the struct cannot say so)",
          };
        }
        const capsule = generation === "versioned"
          ? exportDLPack(source.array, opts)
          : exportDLPackLegacy(source.array, opts);
        using view = importDLPack(capsule);
        using reference = importDLPack(exportDLPack(source.array, { ...opts, readonly: false }));
        if (view.size > 0) {
          assert.equal(
            Number(view.address),
            runtime().addressOf(source.array) + spec.offset * (view.dl.bits / 8),
            "zero-copy",
          );
        }
        assert.equal(view.version === null, generation === "legacy");
        sameValues(jsValues(view), jsValues(reference), `${dtype} ${layout}`);
        return { outcome: "zero-copy" };
      }, false);
    }
  }
}

// ---------------------------------------------------------------------------------------------

// PyTorch on the CPU, where installed (CI does not install it: its wheels pull gigabytes of CUDA
// libraries). CuPy needs a CUDA device: tests/gpu/ covers it on the GPU machine.
const noTorch = missing("torch");
const TORCH_DTYPES: DType[] = [
  "bool",
  "int8",
  "int16",
  "int32",
  "int64",
  "uint8",
  "float16",
  "float32",
  "float64",
  "complex64",
  "complex128",
];
for (const dtype of TORCH_DTYPES) {
  matrixCase("PyTorch → JS", dtype, "versioned", "C", () => {
    prepare();
    const p = python();
    p.exec(`import torch\nbase = ${pyValues(dtype)}\nsrc = torch.from_numpy(base.reshape(2, 3).copy())`);
    using src = p.eval("src");
    using view = fromPython(src);
    assert.equal(view.dtype, dtype);
    assert.equal(view.address, BigInt(p.eval("src.data_ptr()").toJS() as number), "zero-copy");
    sameValues(jsValues(view), pyFlat("src.numpy()"), dtype);
    return { outcome: "zero-copy" };
  }, noTorch);
  matrixCase("JS → PyTorch", dtype, "versioned", "C", () => {
    prepare();
    const p = python();
    const source = jsSource(dtype);
    const opts = { shape: [2, 3], ...(source.dtype ? { dtype: source.dtype } : {}) };
    using t = toPython(source.array, p, opts);
    p.set("t", t);
    p.exec("import torch\ny = torch.from_dlpack(t)");
    assert.equal(p.eval("y.data_ptr()").toJS(), runtime().addressOf(source.array), "zero-copy");
    using mirror = importDLPack(exportDLPack(source.array, opts));
    sameValues(jsValues(mirror), pyFlat("y.numpy()"), dtype);
    p.exec("del y, t");
    return { outcome: "zero-copy" };
  }, noTorch);
}

test("matrix CuPy exchanges", () => {}, {
  skip: "CuPy needs a CUDA device; the GPU suite (tests/gpu/) exercises it on the device machine",
});

test("matrix results are written for tools/matrix.ts", () => {
  const dir = new URL("../.scratch/matrix/", import.meta.url).pathname;
  mkdirSync(dir, { recursive: true });
  const failed = results.filter((r) => r.outcome === "failed");
  writeFileSync(
    `${dir}${runtimeName}.json`,
    JSON.stringify({ runtime: runtimeName, date: new Date().toISOString(), results }, null, 1),
  );
  assert.equal(failed.length, 0, `failed cells: ${failed.map((r) => `${r.pair} ${r.dtype} ${r.layout}`).join("; ")}`);
  assert.ok(results.length > 0);
});
