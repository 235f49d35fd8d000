// Runs the CUDA test cases of one group (DLPACK_CUDA_TEST_GROUP) in this process, whose driver the
// parent chose through DLPACK_CUDA_LIB, and prints one "CUDA-CASE <json>" line per case. Started
// by tests/support/cuda_groups.ts; not a test file itself.
import { runtime } from "../../ffi/mod.ts";
import { type CaseContext, CASES, type Group } from "./cuda_cases.ts";
import { bindFakeDriver } from "./fakecuda.ts";

const group = runtime().env("DLPACK_CUDA_TEST_GROUP") as Group;
const ctx: CaseContext = {
  fake: group === "fake" || group === "fakepython" ? bindFakeDriver(runtime().env("DLPACK_CUDA_LIB")!) : null,
};
for (const c of CASES) {
  if (!c.groups.includes(group)) continue;
  let result: { name: string; ok: boolean; message?: string };
  try {
    c.run(ctx);
    result = { name: c.name, ok: true };
  } catch (error) {
    const e = error as Error;
    result = { name: c.name, ok: false, message: `${e?.stack ?? e}` };
  }
  console.log(`CUDA-CASE ${JSON.stringify(result)}`);
}
