// The BufferView API around the data: typed promotion, access rules, index checks, requirements,
// and the dtype/device tables.
import assert from "node:assert/strict";
import {
  arrayConstructorOf,
  type BufferView,
  deviceCode,
  deviceName,
  DLPackError,
  dtypeOfArray,
  DTYPES,
  formatDevice,
  fromDLDataType,
  importDLPack,
  isHostAccessible,
  toDLDataType,
} from "../../mod.ts";
import { make } from "../support/producer.ts";
import * as cuda from "../../cuda.ts";
import { test } from "../support/harness.ts";

function matrix(versioned = true, flags = 0): BufferView {
  const made = make({ versioned, shape: [2, 3], flags });
  new Float32Array(made.bytes(24).buffer).set([0, 1, 2, 3, 4, 5]);
  return importDLPack(made.source, { producer: "testprod" });
}

test("as(dtype, ndim) gives a typed view, and refuses a mismatch", () => {
  using v = matrix();
  const typed = v.as("float32", 2);
  const a: Float32Array = typed.array();
  const x: number = typed.get(1, 2);
  const [rows, cols]: readonly [number, number] = typed.shape;
  assert.equal(x, 5);
  assert.equal(a.length, rows * cols);
  assert.strictEqual(typed, v, "the same view, only typed");
  // Wrong code fails to compile (deno check verifies these expectations):
  // @ts-expect-error two indices are needed for ndim 2
  assert.throws(() => typed.get(1));
  // @ts-expect-error a float32 element is a number, not a bigint
  const wrong: bigint = typed.get(0, 0);
  void wrong;
  // @ts-expect-error set takes a number for float32
  assert.throws(() => typed.set(1n, 0, 0));
  // @ts-expect-error "float33" is no dtype
  assert.throws(() => v.as("float33", 2));

  assert.throws(() => v.as("float64", 2), (e: unknown) => {
    assert.ok(e instanceof DLPackError && e.code === "requirements");
    assert.deepEqual(e.refusals, ["dtype: required float64, got float32"]);
    return true;
  });
  assert.throws(() => v.as("float32", 3), (e: unknown) => {
    assert.ok(e instanceof DLPackError);
    assert.deepEqual(e.refusals, ["ndim: required 3, got 2"]);
    return true;
  });
  using big = importDLPack(make({ dtype: "int64", shape: [2] }).source);
  const b: bigint = big.as("int64", 1).get(0);
  const arr: BigInt64Array = big.as("int64", 1).array();
  assert.equal(b, 0n);
  assert.equal(arr.length, 2);
});

test("array() is one array per view until dispose detaches it, an empty view's included", () => {
  const view = matrix();
  const array = view.array();
  assert.equal(view.array(), array, "the same array each call");
  assert.equal(view.get(1, 2), 5);
  array[5] = 7;
  assert.equal(view.get(1, 2), 7, "get reads through the same memory");
  view.dispose();
  assert.equal(array.length, 0, "detached at dispose");
  const empty = importDLPack(make({ shape: [0] }).source);
  const none = empty.array();
  assert.equal(none.length, 0);
  assert.equal(empty.array(), none, "the same empty array each call");
  empty.dispose();
  assert.throws(() => empty.array(), (e: unknown) => e instanceof DLPackError && e.code === "disposed");
});

test("set honours access: readwrite, readonly, unknown until assumeWritable", () => {
  using rw = matrix();
  rw.set(9, 0, 1);
  assert.equal(rw.get(0, 1), 9);

  using ro = matrix(true, 1);
  assert.equal(ro.access, "readonly");
  assert.ok(ro.flags.readOnly);
  assert.throws(() => ro.set(1, 0, 0), (e: unknown) => e instanceof DLPackError && e.code === "readonly");
  assert.throws(() => ro.assumeWritable(), (e: unknown) => e instanceof DLPackError && e.code === "readonly");

  using legacy = matrix(false);
  assert.equal(legacy.access, "unknown");
  assert.throws(
    () => legacy.set(1, 0, 0),
    (e: unknown) => e instanceof DLPackError && /assumeWritable/.test(e.message),
  );
  assert.equal(legacy.assumeWritable(), legacy);
  assert.equal(legacy.access, "readwrite");
  legacy.set(7, 1, 1);
  assert.equal(legacy.get(1, 1), 7);
});

test("indices: count, integer, range", () => {
  using v = matrix();
  const refused = (f: () => unknown, pattern: RegExp) =>
    assert.throws(f, (e: unknown) => e instanceof DLPackError && e.code === "shape" && pattern.test(e.message));
  refused(() => v.get(0), /needs 2 indices/);
  refused(() => v.get(0, 0, 0), /needs 2 indices/);
  refused(() => v.get(2, 0), /index 2 is out of range for dimension 0 of extent 2/);
  // Negative indices count from the end, as numpy's: -extent..-1.
  assert.equal(v.get(0, -1), v.get(0, 2));
  assert.equal(v.get(-2, -3), v.get(0, 0));
  refused(() => v.get(0, -4), /index -4 is out of range for dimension 1 of extent 3/);
  refused(() => v.get(0, 1.5), /index 1.5/);
  refused(() => v.get(0, NaN), /index NaN/);
  refused(() => v.set(1, 0, 3), /index 3/);
});

test("fields: producer, owner, flags, version, device, nbytes", () => {
  using v = matrix();
  assert.equal(v.producer, "testprod");
  assert.equal(v.owner, "external");
  assert.deepEqual(v.flags, { readOnly: false, isCopied: false, subbytePadded: false });
  assert.deepEqual(v.device, { type: "cpu", id: 0 });
  assert.equal(v.nbytes, 24);
  assert.equal(v.size, 6);
  assert.ok(Object.isFrozen(v.shape) && Object.isFrozen(v.strides), "shape/strides cannot be changed from outside");
  // toString() is console.log's header line.
  assert.equal(String(v), "BufferView<float32> shape [2, 3], strides [3, 1], cpu:0, readwrite");
});

test("requirements: every field, one message per failure in the exact form", () => {
  using v = matrix();
  assert.deepEqual(v.refusals({ dtype: "float32", shape: [2, null], contiguous: "C", device: { type: "cpu" } }), []);
  assert.equal(v.require({ writable: true }), v);
  assert.deepEqual(
    v.refusals({
      dtype: ["float64", "int32"],
      shape: [null, 4],
      size: 8,
      contiguous: "F",
      device: { type: "cuda", id: 0 },
      writable: false,
    }),
    [
      "dtype: required float64 or int32, got float32",
      "shape: required [*, 4], got [2, 3]",
      "size: required 8, got 6",
      "contiguous: required F, got C",
      "device: required cuda:0, got cpu:0",
      "writable: required false, got true",
    ],
  );
  assert.deepEqual(v.refusals({ ndim: 3 }), ["ndim: required 3, got 2"]);
  assert.deepEqual(v.refusals({ alignment: 1 << 20 }).length, 1);
  assert.match(v.refusals({ alignment: 1 << 20 })[0]!, /^alignment: required 1048576, got \d+$/);
  assert.throws(() => v.require({ dtype: "int8", size: 1 }), (e: unknown) => {
    assert.ok(e instanceof DLPackError && e.code === "requirements");
    assert.deepEqual(e.refusals, ["dtype: required int8, got float32", "size: required 1, got 6"]);
    return true;
  });
  for (const alignment of [3, 0, -4, 1.5]) {
    assert.throws(
      () => v.refusals({ alignment }),
      (e: unknown) => e instanceof DLPackError && /power of two/.test(e.message),
    );
  }
  using legacy = matrix(false);
  assert.deepEqual(legacy.refusals({ writable: true }), ["writable: required true, got false"]);
});

test("dtype tables both ways", () => {
  for (const dtype of DTYPES) assert.equal(fromDLDataType(toDLDataType(dtype)), dtype);
  assert.deepEqual(toDLDataType("bfloat16"), { code: 4, bits: 16, lanes: 1 });
  assert.deepEqual(toDLDataType("complex64"), { code: 5, bits: 64, lanes: 1 });
  assert.equal(fromDLDataType({ code: 2, bits: 32, lanes: 4 }), undefined);
  assert.equal(dtypeOfArray(new Float32Array(1)), "float32");
  assert.equal(dtypeOfArray(new BigUint64Array(1)), "uint64");
  assert.equal(dtypeOfArray(new Uint8ClampedArray(1)), "uint8");
  assert.equal(dtypeOfArray(new Float16Array(1)), "float16");
  assert.equal(arrayConstructorOf("bfloat16"), Uint16Array);
  assert.equal(arrayConstructorOf("complex128"), Float64Array);
  assert.throws(() => toDLDataType("float33" as never), (e: unknown) => e instanceof DLPackError && e.code === "dtype");
  assert.throws(() => dtypeOfArray(new DataView(new ArrayBuffer(1))), (e: unknown) => e instanceof DLPackError);
});

test("device names both ways", () => {
  assert.equal(deviceCode("cuda"), 2);
  assert.equal(deviceName(13), "cudaManaged");
  assert.equal(deviceName(5), undefined);
  assert.ok(isHostAccessible("cudaHost") && !isHostAccessible("cuda"));
  assert.equal(formatDevice({ type: "cuda", id: 1 }), "cuda:1");
  assert.throws(() => deviceCode("tpu" as never), (e: unknown) => e instanceof DLPackError && e.code === "device");
});

// With a CUDA driver, claims on plain host memory are checked and refused (tests/cuda*.test.ts);
// without one (CI), they import unverified, and only host-accessible claims give arrays.
const driver = cuda.available();

test("device memory imports but refuses array(); get() likewise", () => {
  using v = importDLPack(make({ device: [2, 0], shape: [4] }).source);
  assert.deepEqual(v.device, { type: "cuda", id: 0 });
  assert.equal(v.verified, false, "no driver checked the claim");
  assert.throws(
    () => v.array(),
    (e: unknown) => e instanceof DLPackError && e.code === "device" && /cuda:0/.test(e.message),
  );
  assert.throws(() => v.get(0), (e: unknown) => e instanceof DLPackError && e.code === "device");
  using pinned = importDLPack(make({ device: [3, 0], shape: [4] }).source);
  assert.equal(pinned.verified, false);
  assert.equal(pinned.array().length, 4, "cudaHost memory is host-accessible");
}, { skip: driver.available ? "a CUDA driver is present: host memory claiming cuda is refused instead" : false });
