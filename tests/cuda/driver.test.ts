// CUDA without a GPU: the library loads and works with no libcuda; CUDA calls fail with
// DLPackError "cuda" saying why; CUDA-claimed tensors import unverified. The forced cases run in
// child processes whose DLPACK_CUDA_LIB points at no file, at a fake driver whose cuInit fails,
// and at a library that is not a driver.
import assert from "node:assert/strict";
import * as cuda from "../../cuda.ts";
import { findLibrary } from "../../ffi/mod.ts";
import { importDLPack } from "../../mod.ts";
import { make } from "../support/producer.ts";
import { registerGroup } from "../support/cuda_groups.ts";
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
}, { skip: status.available ? "a CUDA driver is present (tests/cuda/gpu.test.ts covers it)" : false });

registerGroup("no driver", "missing", () => ({ DLPACK_CUDA_LIB: "/nonexistent/libcuda.so.1" }));
registerGroup("failing cuInit", "noinit", () => ({
  DLPACK_CUDA_LIB: fakeDriverPath(),
  FAKECUDA_INIT_RESULT: "100",
}));
registerGroup("not a driver", "notdriver", () => ({
  DLPACK_CUDA_LIB: findLibrary("DLPACK_TESTPROD_LIB", "dlpack_testprod"),
}));
