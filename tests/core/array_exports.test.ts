// A TypedArray's first export checks every fact of the array and remembers its dtype on the array;
// later exports of the same array take the short way. Both must pin the memory while the export
// lives and release it exactly once, and the short way must never trust what it cannot see:
// detachment, a Proxy, a replaced prototype or own property, an array that cannot be extended.
import assert from "node:assert/strict";
import { DLPackError, exportDLPack, exportDLPackLegacy, importDLPack, stats } from "../../mod.ts";
import { consumerValues, tp } from "../support/producer.ts";
import { test } from "../support/harness.ts";
import { live } from "../support/assertions.ts";

const pinned = () => stats().pinned;
const code = (c: string) => (e: unknown) => e instanceof DLPackError && e.code === c;

test("the first and the second export of an array each pin it until released, once", () => {
  const before = live();
  const a = new Float32Array([1, 2, 3, 4]);
  const first = exportDLPack(a).take();
  assert.equal(pinned(), before.pinned + 1, "pinned while the first export lives");
  const second = exportDLPack(a).take();
  const third = exportDLPackLegacy(a).take();
  assert.equal(pinned(), before.pinned + 3, "each export its own pin");
  a[0] = 9;
  assert.deepEqual(consumerValues(first, true), [9, 2, 3, 4]);
  tp.tp_consume(first, 1);
  assert.equal(pinned(), before.pinned + 2, "the first release unpins one");
  assert.deepEqual(consumerValues(second, true), [9, 2, 3, 4], "zero-copy, the same memory");
  assert.deepEqual(consumerValues(third, false), [9, 2, 3, 4]);
  tp.tp_consume(second, 1);
  tp.tp_consume(third, 0);
  assert.deepEqual(live(), before, "every pin released, and only once");
  // Disposed without being taken: freed at once, every time.
  for (let i = 0; i < 3; i++) exportDLPack(a).dispose();
  assert.deepEqual(live(), before);
});

test("a known array's export still sees detachment, and its dtype is the array's own", () => {
  const before = live();
  const a = new Int16Array([5, -6, 7]);
  exportDLPack(a).dispose();
  // The prototype and an own property can lie; the export reads neither.
  Object.setPrototypeOf(a, Float64Array.prototype);
  Object.defineProperty(a, "byteLength", { value: 4096 });
  {
    using v = importDLPack(exportDLPack(a));
    assert.equal(v.dtype, "int16");
    assert.deepEqual([v.get(0), v.get(1), v.get(2)], [5, -6, 7]);
    assert.equal(v.nbytes, 6);
  }
  structuredClone(a.buffer, { transfer: [a.buffer as ArrayBuffer] });
  assert.throws(() => exportDLPack(a), code("disposed"));
  assert.deepEqual(live(), before);
});

test("a Proxy of an exported array is refused; an array that cannot be extended exports every time", () => {
  const before = live();
  const a = new Float32Array([1, 2]);
  exportDLPack(a).dispose();
  assert.throws(() => exportDLPack(new Proxy(a, {}) as Float32Array), code("argument"));
  const sealed = Object.preventExtensions(new Float64Array([3, 4]));
  for (let i = 0; i < 3; i++) {
    const address = exportDLPack(sealed).take();
    assert.equal(pinned(), before.pinned + 1);
    assert.deepEqual(consumerValues(address, true), [3, 4]);
    tp.tp_consume(address, 1);
  }
  assert.deepEqual(live(), before);
});

test("shared and resizable buffers are never remembered: each export checks them again", () => {
  const before = live();
  const shared = new Float32Array(new SharedArrayBuffer(8));
  for (let i = 0; i < 2; i++) {
    using v = importDLPack(exportDLPack(shared));
    assert.equal(v.access, "readwrite");
  }
  const resizable = new ArrayBuffer(8, { maxByteLength: 16 });
  const r = new Float32Array(resizable, 0, 2);
  for (let i = 0; i < 2; i++) assert.throws(() => exportDLPack(r), code("null_data"));
  assert.deepEqual(live(), before);
});
