/**
 * A deliberately leaking workload, for the soak's own test (tests/reliability/soak.test.ts): the soak must
 * fail when memory is kept, or its flat-RSS verdict would prove nothing.
 * @module
 */
import { type BufferView, zeros } from "../../mod.ts";
import type { Workload } from "./workloads.ts";

const kept: BufferView[] = [];

export const workloads: Workload[] = [{
  name: "leak 256 KiB per unit",
  weight: 4,
  run() {
    kept.push(zeros([64 * 1024], "float32"));
  },
}];
