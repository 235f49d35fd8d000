// Packed sub-byte elements past bit 2^32: a float4 view of more than 512 MiB holds more than 2^30
// elements, and every element access (get, set, fill, copyFrom, toArray, toNested, copy) must
// reach the element it names, not one 2^32 bits lower. The views are `empty` library memory: only
// the pages written are ever touched.
import assert from "node:assert/strict";
import { type BufferView, empty, exportDLPack, importDLPack } from "../../mod.ts";
import { test } from "../support/harness.ts";

/** Elements of the big float4 view: 2^30 + 64, in 512 MiB + 32 bytes. */
const N = 2 ** 30 + 64;
/** An element whose bit position, 4 * (2^30 + 1), is past 2^32: with 32-bit arithmetic it aliases
 * element 1. */
const FAR = 2 ** 30 + 1;

/** Zeroes the elements at `indices` of a 1-d view. */
function clear(view: BufferView, indices: readonly number[]): void {
  for (const i of indices) view.set(0, i);
}

test("float4 elements past bit 2^32: get and set reach the element they name", () => {
  using big = empty([N], "float4_e2m1fn");
  clear(big, [0, 1, FAR - 1, FAR]);
  big.set(6, FAR);
  assert.equal(big.get(1), 0, "element 1 is untouched");
  assert.equal(big.get(FAR), 6);
  big.set(3, 1);
  assert.equal(big.get(FAR), 6, "writing element 1 leaves the far one alone");
  assert.equal(big.get(1), 3);
  const bytes = big.array() as Uint8Array;
  assert.equal(bytes[0], 0x50, "element 1's code (3: 0b0101) in the high nibble of byte 0");
  assert.equal(bytes[2 ** 29], 0x70, "the far element's code (6: 0b0111) in the high nibble of byte 2^29");
});

test("float4 elements past bit 2^32: a view of two far-apart elements reads, fills and copies them", () => {
  using big = empty([N], "float4_e2m1fn");
  clear(big, [0, 1, FAR - 1, FAR]);
  big.set(6, FAR);
  // Elements 0 and FAR of the big view: its span, and so the bit positions, pass 2^32.
  using pair = importDLPack(exportDLPack(big, { shape: [2], strides: [FAR] }));
  assert.equal(pair.get(1), 6);
  assert.deepEqual(Array.from(pair.toArray() as Uint8Array), [0, 7], "codes of 0 and 6");
  assert.deepEqual(pair.toNested(), [0, 6]);
  using copied = pair.copy();
  assert.deepEqual(copied.toNested(), [0, 6]);
  pair.fill(4);
  assert.deepEqual([big.get(0), big.get(1), big.get(FAR - 1), big.get(FAR)], [4, 0, 0, 4]);
  pair.copyFrom([1.5, 2]);
  assert.deepEqual([big.get(0), big.get(1), big.get(FAR)], [1.5, 0, 2]);
  pair.copyFrom(new Uint8Array([0b0010, 0b0110]));
  assert.deepEqual([big.get(0), big.get(1), big.get(FAR)], [1, 0, 4]);
});

test("float6 elements past bit 2^32 keep their neighbours' bits", () => {
  // 6 bits each: element 715,827,885 starts at bit 4,294,967,310, past 2^32, and straddles the
  // boundary of bytes 536,870,913 and 536,870,914.
  const far = 715_827_885;
  using big = empty([far + 64], "float6_e2m3fn");
  clear(big, [1, 2, 3, 4, far - 1, far, far + 1]);
  big.set(7.5, far);
  big.set(-1, far - 1);
  big.set(0.5, far + 1);
  assert.deepEqual([big.get(far - 1), big.get(far), big.get(far + 1)], [-1, 7.5, 0.5]);
  assert.deepEqual([big.get(1), big.get(2), big.get(3), big.get(4)], [0, 0, 0, 0], "nothing aliased near the start");
});
