// The CUDA cases against this machine's own driver and GPU. Where there is none (CI, most dev
// machines) every case is reported skipped with the reason; the full GPU check with the Python
// frameworks is tests/gpu/ (run on a device machine).
import * as cuda from "../../cuda.ts";
import { registerGroup } from "../support/cuda_groups.ts";

const status = cuda.available();
registerGroup(
  "real GPU",
  "real",
  () => ({}),
  status.available ? false : `needs a CUDA driver and GPU; here: ${status.reason}`,
);
