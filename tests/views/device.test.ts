// The first-hour operations on CUDA device views, against the FAKE driver always (device memory
// PROT_NONE to the host: nothing may read it directly) and this machine's GPU where there is one:
// astype lands on the view's device, copyFrom with cast converts host to device and device to
// device, item, flatten and ravel read and copy through the copy engine, flip is zero-copy there.
import assert from "node:assert/strict";
import { empty } from "../../mod.ts";
import { CUDA0, type CudaCase, fill, hostView, noLeaks, range, registerDeviceGroups } from "../support/cuda_groups.ts";

const CASES: readonly CudaCase[] = [
  {
    name: "astype of a device view is converted on the host and lands on its device",
    groups: ["fake", "real"],
    run(ctx) {
      noLeaks(ctx, () => {
        using d = empty([2, 3], "float32", { device: CUDA0 });
        fill(d, [1.5, -2.5, 300.7, -1, 0, 65536]);
        using i16 = d.astype("int16");
        assert.deepEqual(i16.device, CUDA0);
        assert.equal(i16.dtype, "int16");
        using back = i16.toHost();
        assert.deepEqual(back.toNested(), [[1, -2, 300], [-1, 0, 0]]);
        using dt = d.T;
        using t = dt.astype("bfloat16");
        assert.deepEqual(t.device, CUDA0);
        using tb = t.toHost();
        assert.deepEqual(tb.toNested(), [[1.5, -1], [-2.5, 0], [300, 65536]]);
        using same = d.astype("float32", { copy: false });
        assert.equal(same.address, d.address);
      });
    },
  },
  {
    name: "copyFrom with cast: host into device, device into device, device into host",
    groups: ["fake", "real"],
    run(ctx) {
      noLeaks(ctx, () => {
        using h = hostView(range(6, -2), [2, 3]);
        using d = empty([2, 3], "uint8", { device: CUDA0 });
        d.copyFrom(h, { cast: true });
        using e = empty([2, 3], "float64", { device: CUDA0 });
        e.copyFrom(d, { cast: true });
        using out = empty([2, 3], "int32");
        out.copyFrom(e, { cast: true });
        assert.deepEqual(out.toNested(), [[254, 255, 0], [1, 2, 3]]);
        d.copyFrom(new Float64Array([9.9, 8, 7, 6, 5, 4]), { cast: true });
        using corner = d.slice(0, 0);
        assert.equal(corner.item(), 9);
      });
    },
  },
  {
    name: "flip, ravel and flatten of device views: values through the copy engine",
    groups: ["fake", "real"],
    run(ctx) {
      noLeaks(ctx, () => {
        using d = empty([2, 3], "float32", { device: CUDA0 });
        fill(d, range(6));
        using f = d.flip();
        assert.deepEqual(f.device, CUDA0);
        assert.deepEqual(f.strides, [-3, -1]);
        using fh = f.toHost();
        assert.deepEqual(fh.toNested(), [[5, 4, 3], [2, 1, 0]]);
        using r = d.ravel();
        assert.equal(r.address, d.address, "C order: a view");
        using dt = d.T;
        using flat = dt.flatten();
        assert.deepEqual(flat.device, CUDA0);
        assert.notEqual(flat.address, d.address);
        using flatHost = flat.toHost();
        assert.deepEqual(flatHost.toNested(), [0, 3, 1, 4, 2, 5]);
        using rt = dt.ravel();
        assert.deepEqual(rt.device, CUDA0);
        using rth = rt.toHost();
        assert.deepEqual(rth.toNested(), [0, 3, 1, 4, 2, 5]);
      });
    },
  },
];

registerDeviceGroups(import.meta.url, CASES);
