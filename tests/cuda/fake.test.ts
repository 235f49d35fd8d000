// FAKE-DRIVER tests: the CUDA code paths of libdlpack against tests/native/fakecuda.zig, a fake
// driver over host memory with two devices (device memory is PROT_NONE to the host, contexts and
// handles are checked strictly). They run without a GPU and check the driver-facing logic for
// real; they are no substitute for tests/cuda/gpu.test.ts and tests/gpu/ on an actual GPU.
import { registerGroup } from "../support/cuda_groups.ts";
import { fakeDriverPath } from "../support/fakecuda.ts";

registerGroup("fake driver", "fake", () => ({ DLPACK_CUDA_LIB: fakeDriverPath(), FAKECUDA_DEVICES: "2" }));
