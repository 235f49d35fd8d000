// The native strided copy behind copy() and copyFrom(), byte for byte against an element-by-element
// reference written here: every item size (1, 2, 4, 8, 16 bytes), ranks 1-4, permuted, gapped and
// flipped layouts, ragged edges around the transpose kernel's tiles, and transposes, contiguous and
// every-other copies on both sides of the size from which it streams its output.
import assert from "node:assert/strict";
import { type BufferView, type DType, exportDLPack, importDLPack, zeros } from "../../mod.ts";
import { live } from "../support/assertions.ts";
import { test } from "../support/harness.ts";

const DTYPES: ReadonlyArray<[DType, number]> = [
  ["uint8", 1],
  ["int16", 2],
  ["float32", 4],
  ["float64", 8],
  ["complex128", 16],
];

/** A small deterministic generator (xorshift32), so a failure reproduces. */
function generator(seed: number): () => number {
  let s = seed >>> 0 || 1;
  return () => {
    s ^= s << 13;
    s >>>= 0;
    s ^= s >>> 17;
    s ^= s << 5;
    s >>>= 0;
    return s;
  };
}

interface Layout {
  shape: number[];
  strides: number[];
  /** Elements from the buffer's start to element 0. */
  offset: number;
  /** Elements the buffer holds. */
  elements: number;
}

/** A view of `shape` over a C-contiguous buffer: dims in `order` (innermost last), each stepping
 * `steps[d]` buffer elements, the dims in `flips` reversed. */
function layoutOf(shape: number[], order: number[], steps: number[], flips: boolean[]): Layout {
  const strides = shape.map(() => 0);
  let pitch = 1;
  // `order` is a permutation of the dims; steps, flips and strides have one entry per dim.
  for (let k = order.length - 1; k >= 0; k--) {
    const d = order[k]!;
    strides[d] = pitch * steps[d]!;
    pitch *= shape[d]! * steps[d]!;
  }
  let offset = 0;
  for (let d = 0; d < shape.length; d++) {
    if (!flips[d]) continue;
    offset += (shape[d]! - 1) * strides[d]!;
    strides[d] = -strides[d]!;
  }
  return { shape, strides, offset, elements: pitch };
}

function randomLayout(next: () => number): Layout {
  const ndim = 1 + next() % 4;
  const shape: number[] = [];
  const steps: number[] = [];
  const flips: boolean[] = [];
  let count = 1;
  for (let d = 0; d < ndim; d++) {
    // Now and then an extent past a 1-byte tile's 64 items, a few thousand elements in all.
    const big = count < 200 && next() % 3 === 0;
    shape.push(big ? 60 + next() % 91 : 1 + next() % 9);
    count *= shape[d]!;
    steps.push(next() % 4 === 0 ? 2 : 1);
    flips.push(next() % 2 === 0);
  }
  const order = shape.map((_, d) => d);
  for (let k = ndim - 1; k > 0; k--) {
    const j = next() % (k + 1);
    [order[k], order[j]] = [order[j]!, order[k]!];
  }
  return layoutOf(shape, order, steps, flips);
}

/** The bytes of every element of `layout` over `buffer`, in C order, one at a time. */
function reference(buffer: Uint8Array, layout: Layout, itemsize: number): Uint8Array {
  const { shape, strides } = layout;
  const count = shape.reduce((a, b) => a * b, 1);
  const out = new Uint8Array(count * itemsize);
  const index = shape.map(() => 0);
  for (let k = 0; k < count; k++) {
    let element = layout.offset;
    for (let d = 0; d < shape.length; d++) element += index[d]! * strides[d]!;
    out.set(buffer.subarray(element * itemsize, (element + 1) * itemsize), k * itemsize);
    for (let d = shape.length - 1; d >= 0; d--) {
      if (++index[d]! < shape[d]!) break;
      index[d] = 0;
    }
  }
  return out;
}

function bytesOf(view: BufferView): Uint8Array {
  const a = view.array();
  return new Uint8Array(a.buffer, a.byteOffset, a.byteLength);
}

/** The view of `layout` over random bytes, its copy() and a copyFrom() into a touched array, each
 * checked against the reference. */
function checkLayout(dtype: DType, itemsize: number, layout: Layout, next: () => number): void {
  const buffer = new Uint8Array(layout.elements * itemsize);
  for (let k = 0; k < buffer.length; k++) buffer[k] = next() & 0xff;
  const want = reference(buffer, layout, itemsize);
  using view = importDLPack(
    exportDLPack(buffer, { dtype, shape: layout.shape, strides: layout.strides, offset: layout.offset }),
  );
  const what = `${dtype} shape [${layout.shape}] strides [${layout.strides}]`;
  {
    using copied = view.copy();
    assert.ok(copied.cContiguous, what);
    assert.deepEqual(bytesOf(copied), want, `copy() of ${what}`);
  }
  using into = zeros(layout.shape, dtype);
  bytesOf(into).fill(0x5a); // touched, and not what the copy writes
  into.copyFrom(view);
  assert.deepEqual(bytesOf(into), want, `copyFrom() of ${what}`);
}

for (const [dtype, itemsize] of DTYPES) {
  test(`copy() and copyFrom() of random rank 1-4 layouts match the reference (${dtype})`, () => {
    const before = live();
    const next = generator(0x9e3779b9 ^ itemsize);
    for (let round = 0; round < 60; round++) checkLayout(dtype, itemsize, randomLayout(next), next);
    assert.deepEqual(live(), before);
  });

  test(`transposes around the kernel's tiles: whole tiles, ragged edges, flipped (${dtype})`, () => {
    const next = generator(0x51ed ^ itemsize);
    for (const [rows, cols] of [[64, 64], [128, 192], [67, 130], [1, 200], [300, 5], [257, 63]] as const) {
      for (const flip of [false, true]) {
        // The source is contiguous down the output's columns: `a.T` of a rows x cols C array.
        checkLayout(dtype, itemsize, layoutOf([rows, cols], [1, 0], [1, 1], [false, flip]), next);
        // With gaps between the source's rows: the portable gather.
        checkLayout(dtype, itemsize, layoutOf([rows, cols], [1, 0], [2, 1], [flip, false]), next);
      }
    }
  });
}

test("transposes on both sides of the streaming threshold, aligned and not", () => {
  const next = generator(0xbeef);
  checkLayout("float32", 4, layoutOf([1024, 1024], [1, 0], [1, 1], [false, false]), next);
  checkLayout("float32", 4, layoutOf([1030, 1030], [1, 0], [1, 1], [false, true]), next);
  checkLayout("uint8", 1, layoutOf([2048, 2048], [1, 0], [1, 1], [true, false]), next);
  checkLayout("float64", 8, layoutOf([768, 768], [1, 0], [1, 1], [false, false]), next);
  // 3328 x 3328 float32 is 44 MiB, over the size from which the kernel streams its output:
  // into a fresh copy(), into a touched array, and into one that does not start on a cache line
  // (a TypedArray 4 bytes into its buffer), which cannot stream.
  const n = 3328;
  const source = new Float32Array(n * n);
  for (let k = 0; k < source.length; k++) source[k] = k;
  using src = importDLPack(exportDLPack(source, { shape: [n, n], strides: [1, n] }));
  const expectTransposed = (out: Float32Array, at: number, what: string) => {
    for (let i = 0; i < n; i++) {
      for (let j = 0; j < n; j++) {
        if (out[at + i * n + j] !== j * n + i) assert.fail(`${what}: element (${i}, ${j})`);
      }
    }
  };
  {
    using copied = src.copy();
    expectTransposed(copied.array() as Float32Array, 0, "copy()");
  }
  {
    using into = zeros([n, n], "float32");
    into.copyFrom(src);
    expectTransposed(into.array() as Float32Array, 0, "copyFrom() into a touched array");
  }
  const backing = new Float32Array(n * n + 2);
  using shifted = importDLPack(exportDLPack(backing.subarray(1, 1 + n * n), { shape: [n, n] }));
  shifted.copyFrom(src);
  assert.equal(backing[0], 0);
  assert.equal(backing[1 + n * n], 0);
  expectTransposed(backing, 1, "copyFrom() into an unaligned array");
});

test("contiguous and every-other copies on both sides of the streaming threshold, aligned and not", () => {
  // From 8 MiB of output the native copy streams it past the caches, whole cache lines at a time
  // and the partial lines at either end plainly: a destination 4 bytes into its buffer starts and
  // ends mid-line.
  for (const elements of [(8 << 20) / 4 - 5, (8 << 20) / 4 + 21]) {
    const source = new Float32Array(2 * elements);
    for (let k = 0; k < source.length; k++) source[k] = k;
    using contiguous = importDLPack(exportDLPack(source.subarray(0, elements)));
    using everyOther = importDLPack(exportDLPack(source, { shape: [elements], strides: [2] }));
    {
      using copied = contiguous.copy();
      assert.deepEqual(copied.array(), source.subarray(0, elements), `copy() of ${elements} float32`);
    }
    for (const [view, step] of [[contiguous, 1], [everyOther, 2]] as const) {
      const backing = new Float32Array(elements + 2);
      using into = importDLPack(exportDLPack(backing.subarray(1, 1 + elements)));
      into.copyFrom(view);
      assert.equal(backing[0], 0);
      assert.equal(backing[1 + elements], 0);
      for (let k = 0; k < elements; k++) {
        if (backing[1 + k] !== k * step) assert.fail(`copyFrom() of ${elements} float32, step ${step}: element ${k}`);
      }
      using aligned = zeros([elements], "float32");
      aligned.copyFrom(view);
      const got = aligned.array() as Float32Array;
      for (let k = 0; k < elements; k++) {
        if (got[k] !== k * step) assert.fail(`copyFrom() into a fresh array, step ${step}: element ${k}`);
      }
    }
  }
});
