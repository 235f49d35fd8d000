// FAKE-DRIVER tests through the embedded Python: CUDA views crossing toPython/fromPython go
// through the same driver check as every import (tests/native/fakecuda.zig, in a child process).
// Skipped with the reason where Python with numpy is not available.
import { registerGroup } from "../support/cuda_groups.ts";
import { fakeDriverPath } from "../support/fakecuda.ts";
import { noPython } from "../support/python.ts";

registerGroup(
  "fake driver, Python",
  "fakepython",
  () => ({ DLPACK_CUDA_LIB: fakeDriverPath(), FAKECUDA_DEVICES: "2" }),
  noPython,
);
