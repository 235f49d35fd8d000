// get() reads one element in place (the runtime's pointer reads, no ArrayBuffer) and set() writes
// one (a staged slot copied natively). Each must agree with the ArrayBuffer path (toArray(): the
// span through array(), gathered into C order and decoded element by element) and with the native
// copy, for every dtype and layout (negative strides, transposes, packed and padded sub-byte
// types), and keep every check: indices, a disposed view, device memory, an array detached under
// the view, a value whose reads dispose the view.
import assert from "node:assert/strict";
import { type BufferView, DLPackError, type DType, DTYPES, importDLPack, type Scalar } from "../../mod.ts";
import { dtypeInfo } from "../../src/facts/dtypes.ts";
import { decodeElement } from "../../src/engines/codec.ts";
import { make } from "../support/producer.ts";
import { test } from "../support/harness.ts";

const SHAPE = [3, 5];
const COUNT = 15;

/** A tensor of `dtype` (shape [3, 5], `flags`) whose bytes are a fixed pseudo-random pattern. */
function filled(dtype: DType, flags = 0): ReturnType<typeof make> {
  const made = make({ dtype, shape: SHAPE, flags });
  const info = dtypeInfo(dtype);
  const slot = info.bits < 8 && flags !== 0 ? 8 : info.bits;
  const bytes = made.bytes(Math.ceil((COUNT * slot) / 8));
  let x = 0x9e3779b9 ^ info.dl.code * 131 ^ info.bits;
  for (let i = 0; i < bytes.length; i++) {
    x = (Math.imul(x, 1103515245) + 12345) >>> 0;
    // A padded element's byte holds its code in its low bits.
    bytes[i] = slot === 8 && info.bits < 8 ? (x >>> 24) & ((1 << info.bits) - 1) : x >>> 24;
  }
  return made;
}

/** Every index of a view, in C order. */
function indices(shape: readonly number[]): number[][] {
  const out: number[][] = [[]];
  for (const extent of shape) {
    const next: number[][] = [];
    for (const prefix of out) for (let i = 0; i < extent; i++) next.push([...prefix, i]);
    out.splice(0, out.length, ...next);
  }
  return out;
}

function same(a: Scalar, b: Scalar): boolean {
  if (Array.isArray(a) && Array.isArray(b)) return Object.is(a[0], b[0]) && Object.is(a[1], b[1]);
  return Object.is(a, b);
}

/** The layouts each dtype is read through: the view itself, reversed, transposed, stepped. */
const LAYOUTS: Record<string, (v: BufferView) => BufferView> = {
  whole: (v) => v.slice(),
  reversed: (v) => v.slice("::-1", "::-1"),
  transposed: (v) => v.transpose(),
  stepped: (v) => v.slice({ start: -1, step: -2 }, { step: 2 }),
};

for (const dtype of DTYPES) {
  const subbyte = dtypeInfo(dtype).bits < 8;
  for (const flags of subbyte ? [0, 4] : [0]) {
    test(`get() in place equals the ArrayBuffer path for ${dtype}${flags ? " (padded)" : ""}`, () => {
      const made = filled(dtype, flags);
      const info = dtypeInfo(dtype);
      using base = importDLPack(made.source);
      // Packed data cannot be sliced to start inside a byte (slice() refuses it).
      const layouts = subbyte && flags === 0 ? ["whole", "transposed"] : Object.keys(LAYOUTS);
      for (const name of layouts) {
        using view = LAYOUTS[name]!(base);
        const flat = view.toArray();
        indices(view.shape).forEach((index, k) => {
          const a = view.get(...index);
          const b = decodeElement(info, flat, k);
          assert.ok(same(a, b), `${dtype} ${name} [${index}]: in place ${a}, through array() ${b}`);
        });
      }
    });
  }
}

test("get() in place returns the library's types: bigints for 64-bit ints, pairs for complex", () => {
  const made = make({ dtype: "int64", shape: [2] });
  new DataView(made.bytes(16).buffer).setBigInt64(8, -(2n ** 63n), true);
  using v = importDLPack(made.source);
  assert.equal(v.get(1), -(2n ** 63n));
  const c = make({ dtype: "complex64", shape: [1] });
  new Float32Array(c.bytes(8).buffer).set([1.5, -2]);
  using z = importDLPack(c.source);
  assert.deepEqual(z.get(0), [1.5, -2]);
  const b = make({ dtype: "bool", shape: [2] });
  b.bytes(2).set([0, 3]);
  using t = importDLPack(b.source);
  assert.deepEqual([t.get(0), t.get(1)], [false, true]);
});

test("get() in place keeps its checks: indices, disposed, device memory", () => {
  const made = filled("float32");
  const v = importDLPack(made.source);
  const code = (c: string) => (e: unknown) => e instanceof DLPackError && e.code === c;
  assert.throws(() => v.get(3, 0), code("shape"));
  assert.equal(v.get(0, -1), v.get(0, 4), "a negative index counts from the end, as numpy's");
  assert.throws(() => v.get(0, -6), code("shape"));
  assert.throws(() => v.get(0, 1.5), code("shape"));
  assert.throws(() => v.get(0), code("shape"));
  assert.throws(() => v.get(0, "1" as unknown as number), code("argument"));
  v.dispose();
  assert.throws(() => v.get(0, 0), code("disposed"));
  const device = make({ dtype: "float32", shape: [2], device: [2, 0], data: 4096 });
  using d = importDLPack(device.source, { verifyDevice: false } as never);
  assert.throws(() => d.get(0), code("device"));
});

test("get() through an array() detached by other code is refused, not read", () => {
  const made = filled("float32");
  using v = importDLPack(made.source);
  const a = v.array();
  const before = v.get(1, 1);
  assert.equal(before, a[6]);
  structuredClone(a.buffer, { transfer: [a.buffer as ArrayBuffer] });
  assert.throws(() => v.get(1, 1), (e: unknown) => e instanceof DLPackError && e.code === "disposed");
});

test("get() in place reads what set() wrote and what the producer writes later", () => {
  const made = make({ dtype: "float64", shape: [2, 2] });
  using v = importDLPack(made.source);
  v.set(2.5, 1, 0);
  assert.equal(v.get(1, 0), 2.5);
  new Float64Array(made.bytes(32).buffer)[3] = -7;
  assert.equal(v.get(1, 1), -7);
});

/** Every element of `values` (a view of a [3, 5] tensor) written into `target` by set(). */
function copyBySet(values: BufferView, target: BufferView): void {
  for (const index of indices(target.shape)) target.set(values.get(...index), ...index);
}

for (const dtype of DTYPES) {
  const subbyte = dtypeInfo(dtype).bits < 8;
  for (const flags of subbyte ? [0, 4] : [0]) {
    test(`set() in place writes each element and only it for ${dtype}${flags ? " (padded)" : ""}`, () => {
      const layouts = subbyte && flags === 0 ? ["whole", "transposed"] : Object.keys(LAYOUTS);
      for (const name of layouts) {
        const derive = LAYOUTS[name]!;
        // The values of a reversed copy of the bytes, set into a tensor; which of its elements the
        // layout reaches, marked through the same layout in a uint8 tensor.
        const target = filled(dtype, flags);
        const source = make({ dtype, shape: SHAPE, flags });
        const from = filled(dtype, flags);
        const bytes = Math.ceil((COUNT * (subbyte && flags !== 0 ? 8 : dtypeInfo(dtype).bits)) / 8);
        source.bytes(bytes).set(from.bytes(bytes).reverse());
        importDLPack(from.source).dispose();
        using values = importDLPack(source.source);
        using base = importDLPack(target.source);
        using marks = importDLPack(make({ dtype: "uint8", shape: SHAPE }).source);
        marks.fill(0);
        const before = base.toArray();
        using bySet = derive(base);
        using sourceView = derive(values);
        using marked = derive(marks);
        copyBySet(sourceView, bySet);
        for (const index of indices(marked.shape)) marked.set(1, ...index);
        for (const index of indices(bySet.shape)) {
          assert.ok(same(bySet.get(...index), sourceView.get(...index)), `${dtype} ${name} [${index}]`);
        }
        const reached = marks.toArray();
        const info = dtypeInfo(dtype);
        indices(base.shape).forEach((index, k) => {
          if (reached[k] !== 0) return;
          const kept = decodeElement(info, before, k);
          assert.ok(same(base.get(...index), kept), `${dtype} ${name}: element [${index}] not set stays ${kept}`);
        });
      }
    });
  }
}

test("set() in place refuses a value whose reads dispose the view, and writes nothing", () => {
  const made = make({ dtype: "complex128", shape: [2] });
  new Float64Array(made.bytes(32).buffer).set([1, 2, 3, 4]);
  using keep = importDLPack(made.source);
  const v = keep.slice();
  const pair = [5, 6];
  Object.defineProperty(pair, 0, { get: () => (v.dispose(), 5) });
  assert.throws(
    () => v.set(pair as unknown as [number, number], 1),
    (e: unknown) => e instanceof DLPackError && e.code === "disposed",
  );
  assert.deepEqual(keep.get(1), [3, 4]);
  const code = (c: string) => (e: unknown) => e instanceof DLPackError && e.code === c;
  using w = keep.slice();
  assert.throws(() => w.set(7 as never, 0), code("dtype"));
  assert.throws(() => w.set([1, 2], 2), code("shape"));
  assert.deepEqual([keep.get(0), keep.get(1)], [[1, 2], [3, 4]]);
});

test("set() in place is seen through an array() handed out, and refused once that array is detached", () => {
  const made = filled("int32");
  using v = importDLPack(made.source);
  const a = v.array() as Int32Array;
  v.set(-12345, 2, 4);
  assert.equal(a[14], -12345);
  a[3] = 77;
  assert.equal(v.get(0, 3), 77);
  structuredClone(a.buffer, { transfer: [a.buffer as ArrayBuffer] });
  assert.throws(() => v.set(1, 0, 0), (e: unknown) => e instanceof DLPackError && e.code === "disposed");
});

test("a padded sub-byte element reads as its low bits: the padding above them holds no part of the value", () => {
  for (const dtype of DTYPES) {
    const bits = dtypeInfo(dtype).bits;
    if (bits >= 8) continue;
    const clean = make({ dtype, shape: [4], flags: 4 });
    const dirty = make({ dtype, shape: [4], flags: 4 });
    const codes = [1, 2, (1 << bits) - 1, 3];
    clean.bytes(4).set(codes);
    dirty.bytes(4).set(codes.map((c) => c | (0xff << bits & 0xff)));
    using a = importDLPack(clean.source);
    using b = importDLPack(dirty.source);
    for (let i = 0; i < 4; i++) {
      const want = a.get(i);
      assert.ok(typeof want === "number", `${dtype}[${i}] decodes`);
      assert.ok(Object.is(b.get(i), want), `${dtype}[${i}]: padding bits set read as ${String(b.get(i))}`);
    }
    assert.deepEqual(b.toNested(), a.toNested(), `${dtype}: toNested ignores the padding too`);
  }
});
