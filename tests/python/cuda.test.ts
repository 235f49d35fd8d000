// FAKE-DRIVER tests through the embedded Python: CUDA views crossing toPython/fromPython go
// through the same driver check as every import (tests/native/fakecuda.zig, in a child process).
// Skipped with the reason where Python with numpy is not available.
import assert from "node:assert/strict";
import * as cuda from "../../cuda.ts";
import { empty } from "../../mod.ts";
import { fromPython, openPython, toPython } from "../../python.ts";
import { CUDA0, type CudaCase, fakeOf, fill, registerGroup, valuesOf } from "../support/cuda_groups.ts";
import { fakeDriverPath } from "../support/fakecuda.ts";
import { noPython } from "../support/python.ts";

const CASES: readonly CudaCase[] = [
  // -------------------------------------------------------------------------------------------
  // Import verification
  {
    name: "through the Python bridge: a device view crosses toPython -> fromPython zero-copy and verified",
    groups: ["fakepython"],
    run() {
      using d = empty([4], "float32", { device: CUDA0 });
      fill(d, [1, 2, 3, 4]);
      const py = openPython();
      const obj = toPython(d, py);
      assert.deepEqual(obj.get("__dlpack_device__").call().toJS(), [2, 0]);
      using v = fromPython(obj);
      assert.equal(v.verified, true, "the capsule's claim went through the driver check");
      assert.equal(v.address, d.address);
      assert.deepEqual(v.device, CUDA0);
      assert.deepEqual(valuesOf(v), [1, 2, 3, 4]);
      obj.dispose();
    },
  },
  {
    name: "through the Python bridge: __dlpack__(stream=...) makes the consumer's stream wait on the producer's",
    groups: ["fakepython"],
    run(ctx) {
      const fake = fakeOf(ctx);
      using d = empty([4], "float32", { device: CUDA0 });
      const producer = cuda.createStream();
      const consumer = cuda.createStream();
      cuda.setProducerStream(d, producer);
      const py = openPython();
      const obj = toPython(d, py);
      py.set("t", obj);
      py.exec(`c = t.__dlpack__(max_version=(1, 0), stream=${consumer})`);
      const wait = fake.lastWait();
      assert.equal(wait.stream, consumer, "the consumer's stream waits");
      assert.equal(wait.recordedOn, producer, "on an event recorded on the producer's stream");
      assert.throws(
        () => py.exec("t.__dlpack__(max_version=(1, 0), stream=0)"),
        /BufferError: .*stream 0 is not allowed/,
      );
      py.exec("del c, t");
      obj.dispose();
      cuda.destroyStream(producer);
      cuda.destroyStream(consumer);
    },
  },
];

registerGroup(
  import.meta.url,
  "fake driver, Python",
  "fakepython",
  CASES,
  () => ({ DLPACK_CUDA_LIB: fakeDriverPath(), FAKECUDA_DEVICES: "2" }),
  () => noPython,
);
