// Constructors and joins on CUDA memory, against the FAKE driver (device memory PROT_NONE to the
// host, so every byte moves through the driver) and this machine's GPU where there is one: concat
// and stack of device views of several layouts along every axis, ones/full/zerosLike on the
// device, the values read back on the host; a join of views on two devices refused.
import assert from "node:assert/strict";
import { arange, concat, full, ones, stack, zeros, zerosLike } from "../../mod.ts";
import { refused } from "../support/assertions.ts";
import { CUDA0, type CudaCase, fill, noLeaks, range, registerDeviceGroups, valuesOf } from "../support/cuda_groups.ts";
import * as cuda from "../../cuda.ts";

/** The C-order values of concatenating host matrices `a` and `b` (rows x cols each) along `axis`. */
function concatenated(a: number[], b: number[], rows: number, cols: number, axis: number): number[] {
  if (axis === 0) return [...a, ...b];
  const out: number[] = [];
  for (let r = 0; r < rows; r++) out.push(...a.slice(r * cols, (r + 1) * cols), ...b.slice(r * cols, (r + 1) * cols));
  return out;
}

const CASES: readonly CudaCase[] = [
  {
    name: "concat and stack of device views along every axis, C order and transposed inputs",
    groups: ["fake", "real"],
    run(ctx) {
      noLeaks(ctx, () => {
        using a = zeros([2, 3], "float32", { device: CUDA0 });
        using b = zeros([2, 3], "float32", { device: CUDA0 });
        fill(a, range(6));
        fill(b, range(6, 100));
        for (const axis of [0, 1, -1]) {
          using out = concat([a, b], axis);
          assert.deepEqual(out.device, CUDA0);
          assert.deepEqual(out.shape, axis === 0 ? [4, 3] : [2, 6]);
          assert.deepEqual(valuesOf(out), concatenated(range(6), range(6, 100), 2, 3, axis === 0 ? 0 : 1));
        }
        using t = a.transpose(); // 3x2, F order on the device
        using u = b.transpose();
        using tt = concat([t, u], 1);
        assert.deepEqual(valuesOf(tt), [0, 3, 100, 103, 1, 4, 101, 104, 2, 5, 102, 105]);
        using s = stack([a, b], 2);
        assert.deepEqual(s.shape, [2, 3, 2]);
        assert.deepEqual(valuesOf(s), [0, 100, 1, 101, 2, 102, 3, 103, 4, 104, 5, 105]);
      });
    },
  },
  {
    name: "ones, full and zerosLike on the device; a join across devices refused",
    groups: ["fake", "real"],
    run(ctx) {
      noLeaks(ctx, () => {
        using o = ones([2, 2], "float32", { device: CUDA0 });
        assert.deepEqual(valuesOf(o), [1, 1, 1, 1]);
        using f = full([3], 2.5, "float32", { device: CUDA0 });
        assert.deepEqual(valuesOf(f), [2.5, 2.5, 2.5]);
        using z = zerosLike(f);
        assert.deepEqual(z.device, CUDA0);
        assert.deepEqual(valuesOf(z), [0, 0, 0]);
        using host = arange(3, "float32");
        refused(() => concat([f, host]), "device", /view 1 is on cpu:0, view 0 on cuda:0/);
        if (cuda.devices().length > 1) {
          using other = zeros([3], "float32", { device: { type: "cuda", id: 1 } });
          refused(() => stack([f, other]), "device", /view 1 is on cuda:1/);
        }
      });
    },
  },
];

registerDeviceGroups(import.meta.url, CASES);
