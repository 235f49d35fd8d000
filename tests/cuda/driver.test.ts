// CUDA without a GPU: the library loads and works with no libcuda; CUDA calls fail with
// DLPackError "cuda" saying why; CUDA-claimed tensors import unverified. The forced cases run in
// child processes whose DLPACK_CUDA_LIB points at no file, at a fake driver whose cuInit fails,
// and at a library that is not a driver.
import assert from "node:assert/strict";
import * as cuda from "../../cuda.ts";
import { findLibrary } from "../../ffi/mod.ts";
import { empty, exportDLPack, importDLPack, zeros } from "../../mod.ts";
import { make } from "../support/producer.ts";
import { CUDA0, type CudaCase, hostView, registerGroup } from "../support/cuda_groups.ts";
import { refused } from "../support/assertions.ts";
import { fakeDriverPath } from "../support/fakecuda.ts";
import { test } from "../support/harness.ts";

const status = cuda.available();

test("cuda.available() answers without throwing, with a reason when there is no driver", () => {
  assert.equal(typeof status.available, "boolean");
  if (status.available) {
    assert.ok(status.deviceCount >= 1 && status.reason === undefined);
  } else {
    assert.equal(status.deviceCount, 0);
    assert.match(status.reason!, /could not be loaded|cuInit failed|sees no device|has no symbol/);
  }
});

test('without a driver: CUDA calls throw "cuda" with the reason, claims import unverified', () => {
  assert.throws(() => cuda.devices(), (e: unknown) => {
    assert.ok(e instanceof Error && (e as { code?: string }).code === "cuda");
    assert.ok(e.message.includes(status.reason!), e.message);
    return true;
  });
  using v = importDLPack(make({ device: [2, 0], shape: [2] }).source);
  assert.equal(v.verified, false);
}, {
  skip: status.available
    ? "a CUDA driver is present (the real GPU tests of tests/cuda/device.test.ts cover it)"
    : false,
});

const MISSING = /needs the CUDA driver, which is missing or unusable here: .*could not be loaded/;

const CASES: readonly CudaCase[] = [
  // -------------------------------------------------------------------------------------------
  // Without a driver
  {
    name: "available() is false and says why",
    groups: ["missing"],
    run() {
      const status = cuda.available();
      assert.equal(status.available, false);
      assert.equal(status.deviceCount, 0);
      assert.match(
        status.reason!,
        /^\/nonexistent\/libcuda\.so\.1 \(from DLPACK_CUDA_LIB\) could not be loaded: .*No such file/,
      );
    },
  },
  {
    name: 'every CUDA call throws DLPackError "cuda" saying the driver is missing and why',
    groups: ["missing"],
    run() {
      using unverified = importDLPack(make({ device: [2, 0], shape: [4] }).source);
      using host = empty([4], "float32");
      const calls: [string, () => unknown][] = [
        ["devices", () => cuda.devices()],
        ["pointerInfo", () => cuda.pointerInfo(host.address)],
        ["createStream", () => cuda.createStream()],
        ["synchronize", () => cuda.synchronize()],
        ["createEvent", () => cuda.createEvent()],
        ["empty cuda", () => empty([4], "float32", { device: CUDA0 })],
        ["zeros cudaHost", () => zeros([4], "float32", { device: { type: "cudaHost" } })],
        ["empty cudaManaged", () => empty([4], "float32", { device: { type: "cudaManaged" } })],
        ["toHost", () => unverified.toHost()],
        ["copyFrom into device", () => unverified.assumeWritable().copyFrom(host)],
        ["copyFrom from device", () => host.copyFrom(unverified)],
        ["copy", () => unverified.copy()],
        ["fence with a handle", () => cuda.fenceForConsumer(unverified, 0x7f00n)],
        ["__dlpack__ with a handle", () => unverified.__dlpack__({ stream: 0x7f00 })],
      ];
      for (const [what, call] of calls) {
        const e = refused(call, "cuda", MISSING);
        assert.ok(!(e instanceof cuda.CudaDriverError), what);
      }
      assert.deepEqual(cuda.cudaStats(), {
        deviceAllocations: 0,
        deviceBytes: 0,
        hostAllocations: 0,
        hostBytes: 0,
        managedAllocations: 0,
        managedBytes: 0,
        events: 0,
        freeFailures: 0,
      });
    },
  },
  {
    name: "CUDA-claimed tensors import unverified; device views refuse array(), host kinds give arrays",
    groups: ["missing"],
    run() {
      using d = importDLPack(make({ device: [2, 1], shape: [4] }).source);
      assert.equal(d.verified, false);
      assert.deepEqual(d.device, { type: "cuda", id: 1 });
      refused(() => d.array(), "device", /cuda:1/);
      d.require({ device: { type: "cuda", id: 1 } });
      const e = refused(() => d.require({ device: { type: "cuda", id: 0 } }), "requirements");
      assert.deepEqual(e.refusals, ["device: required cuda:0, got cuda:1"]);
      using p = importDLPack(make({ device: [3, 0], shape: [4] }).source);
      using m = importDLPack(make({ device: [13, 0], shape: [4] }).source);
      assert.ok(!p.verified && !m.verified);
      assert.equal(p.array().length, 4);
      assert.equal(m.array().length, 4);
      using c = importDLPack(make({ shape: [4] }).source);
      assert.equal(c.verified, true);
    },
  },
  {
    name: "stream None and -1 need no driver for CUDA data; host copies need none at all",
    groups: ["missing"],
    run() {
      using d = importDLPack(make({ device: [2, 0], shape: [4] }).source);
      d.__dlpack__({ maxVersion: [1, 3] }).dispose();
      d.__dlpack__({ maxVersion: [1, 3], stream: -1 }).dispose();
      d.__dlpack__({ maxVersion: [1, 3], stream: 1 }).dispose();
      using a = hostView([1, 2, 3, 4, 5, 6], [2, 3]);
      using b = empty([2, 3], "float32");
      b.copyFrom(a);
      assert.deepEqual(Array.from(b.array() as Float32Array), [1, 2, 3, 4, 5, 6]);
      using t = importDLPack(exportDLPack(a, { shape: [3, 2], strides: [1, 3] }));
      using c = empty([3, 2], "float32");
      c.copyFrom(t);
      assert.deepEqual(Array.from(c.array() as Float32Array), [1, 4, 2, 5, 3, 6]);
      // Overlapping views of one buffer: memmove semantics.
      using buf = hostView([0, 1, 2, 3, 4, 5, 6, 7]);
      using lo = importDLPack(exportDLPack(buf, { shape: [6] }));
      using hi = importDLPack(exportDLPack(buf, { shape: [6], offset: 2 }));
      lo.copyFrom(hi);
      assert.deepEqual(Array.from(buf.array() as Float32Array), [2, 3, 4, 5, 6, 7, 6, 7]);
      using h = a.toHost();
      assert.deepEqual(Array.from(h.array() as Float32Array), [1, 2, 3, 4, 5, 6]);
    },
  },
  {
    name: "a driver whose cuInit fails is reported with the driver's error name",
    groups: ["noinit"],
    run() {
      const status = cuda.available();
      assert.equal(status.available, false);
      assert.match(status.reason!, /^cuInit failed: CUDA_ERROR_NO_DEVICE \(100\): no CUDA-capable device is detected/);
      refused(() => empty([1], "float32", { device: CUDA0 }), "cuda", /cuInit failed: CUDA_ERROR_NO_DEVICE/);
      using d = importDLPack(make({ device: [2, 0], shape: [4] }).source);
      assert.equal(d.verified, false);
    },
  },
  {
    name: "a library that is not a CUDA driver is reported as such",
    groups: ["notdriver"],
    run() {
      const status = cuda.available();
      assert.equal(status.available, false);
      assert.match(status.reason!, /\(from DLPACK_CUDA_LIB\) has no symbol cuInit: not a CUDA driver/);
    },
  },
];

registerGroup(import.meta.url, "no driver", "missing", CASES, () => ({ DLPACK_CUDA_LIB: "/nonexistent/libcuda.so.1" }));
registerGroup(import.meta.url, "failing cuInit", "noinit", CASES, () => ({
  DLPACK_CUDA_LIB: fakeDriverPath(),
  FAKECUDA_INIT_RESULT: "100",
}));
registerGroup(import.meta.url, "not a driver", "notdriver", CASES, () => ({
  DLPACK_CUDA_LIB: findLibrary("DLPACK_TESTPROD_LIB", "dlpack_testprod"),
}));
