/**
 * A deliberately leaking workload, for the soak's own test (tests/reliability/soak.test.ts): the soak must
 * fail when memory is kept, or its flat-RSS verdict would prove nothing.
 * @module
 */
import { type BufferView, zeros } from "../../mod.ts";
import type { Workload } from "./workloads.ts";

const kept: BufferView[] = [];

export const workloads: Workload[] = [{
  name: "leak 1 MiB per unit, touched",
  weight: 4,
  run() {
    // Touched, so the pages count in RSS (fresh zeroed pages are not resident until written); 1 MiB, so even a
    // slow, loaded machine leaks well past the 16 MiB threshold in the few seconds this runs.
    const view = zeros([256 * 1024], "float32");
    view.array().fill(1);
    kept.push(view);
  },
}];
