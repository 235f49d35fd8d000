// CUDA cases against a driver: the FAKE driver (tests/native/fakecuda.zig, over host memory with
// two devices: device memory is PROT_NONE to the host, contexts and handles are checked strictly)
// always, and this machine's own driver and GPU where there is one (elsewhere every "real GPU"
// case is reported skipped with the reason). The fake-driver cases check the driver-facing logic
// for real without a GPU; they are no substitute for a GPU run (tests/gpu/ on a device machine).
// Each group runs in a child process of its own (tests/support/cuda_groups.ts).
import assert from "node:assert/strict";
import * as cuda from "../../cuda.ts";
import { empty, exportDLPack, exportDLPackLegacy, fromArrayInterface, importDLPack, stats, zeros } from "../../mod.ts";
import { core, runtime } from "../../ffi/mod.ts";
import { deleted, make, tp } from "../support/producer.ts";
import { refused } from "../support/assertions.ts";
import {
  claim,
  CUDA0,
  type CudaCase,
  fakeOf,
  fill,
  hostView,
  noLeaks,
  range,
  registerDeviceGroups,
  valuesOf,
} from "../support/cuda_groups.ts";

const CASES: readonly CudaCase[] = [
  // -------------------------------------------------------------------------------------------
  // Driver and devices
  {
    name: "available() reports the driver, its version and its devices",
    groups: ["fake", "real"],
    run(ctx) {
      const status = cuda.available();
      assert.equal(status.available, true, status.reason);
      assert.equal(status.reason, undefined);
      assert.ok(status.driverVersion! > 0);
      const list = cuda.devices();
      assert.equal(list.length, status.deviceCount);
      assert.ok(list.length >= 1);
      for (const [i, d] of list.entries()) {
        assert.equal(d.id, i);
        assert.ok(d.name.length > 0 && d.totalMemory > 0 && d.multiprocessors > 0);
        assert.match(d.pciBusId, /^[0-9a-fA-F]{4,8}:[0-9a-fA-F]{2}:[0-9a-fA-F]{2}\.[0-7]$/);
      }
      if (ctx.fake !== null) {
        assert.equal(status.driverVersion, 12080);
        assert.equal(list.length, 2);
        const [first, second] = list as [cuda.CudaDevice, cuda.CudaDevice];
        assert.equal(second.name, "Fake CUDA Device 1 (host memory)");
        assert.deepEqual(first.computeCapability, [9, 0]);
        assert.equal(first.pciBusId, "0000:01:00.0");
      }
    },
  },
  {
    name: "pointerInfo() tells device, page-locked, managed and unregistered memory apart",
    groups: ["fake", "real"],
    run(ctx) {
      noLeaks(ctx, () => {
        using d = empty([64], "float32", { device: CUDA0 });
        using h = empty([64], "float32", { device: { type: "cudaHost" } });
        using m = empty([64], "float32", { device: { type: "cudaManaged" } });
        const di = cuda.pointerInfo(d.address);
        assert.equal(di.memoryType, "device");
        assert.equal(di.device, 0);
        assert.equal(di.managed, false);
        if (di.rangeStart !== null) {
          assert.ok(di.rangeStart <= d.address && d.address + 256n <= di.rangeStart + BigInt(di.rangeSize!));
        }
        assert.equal(cuda.pointerInfo(h.address).memoryType, "host");
        assert.equal(cuda.pointerInfo(h.address).managed, false);
        assert.equal(cuda.pointerInfo(m.address).managed, true);
        const js = cuda.pointerInfo(runtime().addressOf(new Float32Array(4)));
        assert.equal(js.memoryType, "unregistered");
        assert.equal(js.device, null);
        using plain = empty([4], "float32");
        assert.equal(cuda.pointerInfo(plain.address).memoryType, "unregistered");
      });
    },
  },
  // -------------------------------------------------------------------------------------------
  // View operations on device memory
  {
    name: "view operations on device memory: zero-copy on the device, the producer stream kept, fill and toNested",
    groups: ["fake", "real"],
    run(ctx) {
      noLeaks(ctx, () => {
        const d = zeros([3, 4], "float32", { device: CUDA0 });
        fill(d, range(12));
        const s = d.slice("::-1", "1:3");
        assert.deepEqual(s.device, CUDA0);
        assert.equal(s.verified, true);
        assert.equal(s.address, d.address + 36n, "element 0 is row 2, column 1 of the same allocation");
        assert.deepEqual(s.toNested(), [[9, 10], [5, 6], [1, 2]], "read through the driver");
        refused(() => s.array(), "device");
        const producer = cuda.createStream();
        cuda.setProducerStream(d, producer);
        const t = d.transpose();
        assert.equal(cuda.producerStream(t), producer, "later fences of the derived view wait for the same work");
        assert.deepEqual(valuesOf(t), [0, 4, 8, 1, 5, 9, 2, 6, 10, 3, 7, 11]);
        const row = d.at(1);
        row.fill(-1);
        assert.deepEqual(valuesOf(d), [0, 1, 2, 3, -1, -1, -1, -1, 8, 9, 10, 11]);
        d.dispose();
        assert.deepEqual(valuesOf(row), [-1, -1, -1, -1], "the device memory outlives the base view");
        for (const v of [s, t, row]) v.dispose();
        cuda.destroyStream(producer);
      });
    },
  },

  // -------------------------------------------------------------------------------------------
  // Allocation and lifetimes
  {
    name: "zeros/empty on cuda, cudaHost and cudaManaged: device, verified, zeroed, array() only on the host kinds",
    groups: ["fake", "real"],
    run(ctx) {
      noLeaks(ctx, () => {
        const before = cuda.cudaStats();
        using d = zeros([3, 4], "float32", { device: CUDA0 });
        assert.deepEqual(d.device, { type: "cuda", id: 0 });
        assert.equal(d.verified, true);
        assert.equal(d.owner, "dlpack-ts");
        assert.equal(d.access, "readwrite");
        assert.ok(d.cContiguous);
        assert.deepEqual(valuesOf(d), new Array(12).fill(0));
        refused(() => d.array(), "device", /cuda:0/);
        assert.equal(cuda.cudaStats().deviceAllocations, before.deviceAllocations + 1);
        assert.equal(cuda.cudaStats().deviceBytes, before.deviceBytes + 48);
        using h = zeros([5], "float64", { device: { type: "cudaHost" } });
        assert.deepEqual(h.device, { type: "cudaHost", id: 0 });
        assert.deepEqual(Array.from(h.array() as Float64Array), [0, 0, 0, 0, 0]);
        h.set(2.5, 3);
        assert.equal(h.get(3), 2.5);
        using m = zeros([5], "int32", { device: { type: "cudaManaged" } });
        assert.deepEqual(m.device, { type: "cudaManaged", id: 0 });
        assert.deepEqual(Array.from(m.array() as Int32Array), [0, 0, 0, 0, 0]);
        assert.equal(cuda.cudaStats().hostAllocations, before.hostAllocations + 1);
        assert.equal(cuda.cudaStats().managedAllocations, before.managedAllocations + 1);
        using nothing = empty([0, 3], "float32", { device: CUDA0 });
        assert.equal(nothing.size, 0);
        using nothingHere = nothing.toHost();
        assert.equal(nothingHere.size, 0);
      });
    },
  },
  {
    name: "device memory lives until the last view and export are gone",
    groups: ["fake", "real"],
    run(ctx) {
      noLeaks(ctx, () => {
        const base = cuda.cudaStats().deviceAllocations;
        const x = empty([8], "float32", { device: CUDA0 });
        fill(x, range(8));
        const capsule = exportDLPack(x);
        x.dispose();
        assert.equal(cuda.cudaStats().deviceAllocations, base + 1, "the export holds it");
        const v = importDLPack(capsule);
        assert.equal(v.verified, true);
        assert.deepEqual(v.device, CUDA0);
        assert.deepEqual(valuesOf(v), range(8));
        const legacy = exportDLPackLegacy(v);
        v.dispose();
        assert.equal(cuda.cudaStats().deviceAllocations, base + 1);
        using again = importDLPack(legacy);
        assert.deepEqual(valuesOf(again), range(8));
      });
    },
  },
  {
    name: "an export's deleter on a foreign thread frees device memory with that device's context current",
    groups: ["fake"],
    run(ctx) {
      const fake = fakeOf(ctx);
      noLeaks(ctx, () => {
        const before = fake.stats().deviceAllocations;
        const x = empty([16], "float32", { device: { type: "cuda", id: 1 } });
        const capsule = exportDLPack(x);
        x.dispose();
        assert.equal(fake.stats().deviceAllocations, before + 1);
        assert.equal(tp.tp_consume_on_thread(capsule.take(), 1), 0);
        assert.equal(fake.stats().deviceAllocations, before);
      });
    },
  },
  {
    name: "allocation refusals: unknown device, ids of pinned and managed memory, alignment",
    groups: ["fake", "real"],
    run(ctx) {
      noLeaks(ctx, () => {
        const count = cuda.available().deviceCount;
        refused(() => empty([2], "float32", { device: { type: "cuda", id: count } }), "device", /no CUDA device/);
        refused(() => empty([2], "float32", { device: { type: "cuda", id: -1 } }), "device");
        refused(() => empty([2], "float32", { device: { type: "cudaHost", id: 1 } }), "device", /device id 0/);
        refused(() => empty([2], "float32", { device: CUDA0, align: 512 }), "requirements", /256/);
        using ok = empty([2], "float32", { device: CUDA0, align: 256 });
        assert.equal(ok.address % 256n, 0n);
      });
    },
  },
  // -------------------------------------------------------------------------------------------
  // Copies
  {
    name: "copies in every direction keep the values: host->device, device->device, device->host",
    groups: ["fake", "real"],
    run(ctx) {
      noLeaks(ctx, () => {
        const values = range(24, -7).map((v) => v * 0.5);
        using src = hostView(values, [2, 3, 4], "float64");
        using a = empty([2, 3, 4], "float64", { device: CUDA0 });
        assert.equal(a.copyFrom(src), a);
        using b = empty([2, 3, 4], "float64", { device: CUDA0 });
        b.copyFrom(a);
        using back = empty([2, 3, 4], "float64");
        back.copyFrom(b);
        assert.deepEqual(Array.from(back.array() as Float64Array), values);
        using viaHost = b.toHost();
        assert.deepEqual(Array.from(viaHost.array() as Float64Array), values);
        assert.deepEqual(viaHost.device, { type: "cpu", id: 0 });
        using pinned = empty([2, 3, 4], "float64", { device: { type: "cudaHost" } });
        pinned.copyFrom(b);
        assert.deepEqual(Array.from(pinned.array() as Float64Array), values);
        using managed = empty([2, 3, 4], "float64", { device: { type: "cudaManaged" } });
        managed.copyFrom(pinned);
        b.copyFrom(managed);
        assert.deepEqual(valuesOf(b), values);
      });
    },
  },
  {
    name: "copies between two devices (peer copies)",
    groups: ["fake"],
    run(ctx) {
      const fake = fakeOf(ctx);
      noLeaks(ctx, () => {
        using a = empty([6], "int32", { device: CUDA0 });
        using h = empty([6], "int32");
        (h.array() as Int32Array).set([5, 4, 3, 2, 1, 0]);
        a.copyFrom(h);
        using b = empty([6], "int32", { device: { type: "cuda", id: 1 } });
        b.copyFrom(a);
        assert.deepEqual(b.device, { type: "cuda", id: 1 });
        using back = b.toHost();
        assert.deepEqual(Array.from(back.array() as Int32Array), [5, 4, 3, 2, 1, 0]);
        assert.equal(fake.stats().wrongContext, 0);
      });
    },
  },
  {
    name: "strided sources (transposed, negative strides) are copied element by element",
    groups: ["fake", "real"],
    run(ctx) {
      noLeaks(ctx, () => {
        using h = hostView(range(6)); // 0..5 as a 2x3 C-order matrix
        using t = importDLPack(exportDLPack(h, { shape: [3, 2], strides: [1, 3] })); // its transpose
        const expected = Array.from(t.toArray() as Float32Array);
        assert.deepEqual(expected, [0, 3, 1, 4, 2, 5]);
        using d = empty([3, 2], "float32", { device: CUDA0 });
        d.copyFrom(t);
        assert.deepEqual(valuesOf(d), expected);
        // A strided view of device memory: verified, and staged through the host when copied.
        using flat = empty([6], "float32", { device: CUDA0 });
        flat.copyFrom(h);
        using dt = importDLPack(exportDLPack(flat, { shape: [3, 2], strides: [1, 3] }));
        assert.equal(dt.verified, true);
        assert.ok(!dt.cContiguous);
        assert.deepEqual(valuesOf(dt), expected);
        using reversed = importDLPack(exportDLPack(flat, { shape: [6], strides: [-1], offset: 5 }));
        assert.deepEqual(valuesOf(reversed), [5, 4, 3, 2, 1, 0]);
        using d2 = empty([6], "float32", { device: CUDA0 });
        d2.copyFrom(reversed);
        assert.deepEqual(valuesOf(d2), [5, 4, 3, 2, 1, 0]);
        using c = dt.copy();
        assert.deepEqual(c.device, CUDA0);
        assert.ok(c.cContiguous);
        assert.deepEqual(valuesOf(c), expected);
      });
    },
  },
  {
    name: "views laid out alike (F order) copy in one driver call",
    groups: ["fake"],
    run(ctx) {
      const fake = fakeOf(ctx);
      noLeaks(ctx, () => {
        using h = hostView(range(6, 10));
        using hf = importDLPack(exportDLPack(h, { shape: [2, 3], strides: [1, 2] }));
        using flat = empty([6], "float32", { device: CUDA0 });
        using df = importDLPack(exportDLPack(flat, { shape: [2, 3], strides: [1, 2] }));
        assert.ok(df.fContiguous && !df.cContiguous);
        const copies = fake.stats().syncCopies;
        df.copyFrom(hf);
        assert.equal(fake.stats().syncCopies, copies + 1, "one copy of the whole span");
        assert.deepEqual(valuesOf(flat), range(6, 10));
      });
    },
  },
  {
    name: "copy() of device data stays on its device; __dlpack__(copy: true) copies there too",
    groups: ["fake", "real"],
    run(ctx) {
      noLeaks(ctx, () => {
        using d = empty([4], "float32", { device: CUDA0 });
        fill(d, [1, 2, 3, 4]);
        using c = d.copy();
        assert.deepEqual(c.device, CUDA0);
        assert.notEqual(c.address, d.address);
        assert.equal(c.verified, true);
        assert.deepEqual(valuesOf(c), [1, 2, 3, 4]);
        const capsule = d.__dlpack__({ maxVersion: [1, 3], copy: true });
        using v = importDLPack(capsule);
        assert.equal(v.flags.isCopied, true);
        assert.notEqual(v.address, d.address);
        assert.deepEqual(v.device, CUDA0);
        assert.deepEqual(valuesOf(v), [1, 2, 3, 4]);
      });
    },
  },
  {
    name: "copyFrom refusals: dtype, shape, read-only, layout, disposed, other device kinds",
    groups: ["fake", "real"],
    run(ctx) {
      noLeaks(ctx, () => {
        using d = empty([2, 3], "float32", { device: CUDA0 });
        using h = hostView(range(6), [2, 3]);
        using f64 = empty([2, 3], "float64");
        refused(() => d.copyFrom(f64), "dtype", /the source is float64, this view is float32/);
        using wrongShape = hostView(range(6), [3, 2]);
        refused(() => d.copyFrom(wrongShape), "shape", /\[3, 2\].*\[2, 3\]/);
        using ro = importDLPack(exportDLPack(d, { readonly: true }));
        assert.equal(ro.verified, true);
        refused(() => ro.copyFrom(h), "readonly", /read-only/);
        using transposedDst = importDLPack(exportDLPack(d, { shape: [3, 2], strides: [1, 3] }));
        using src = hostView(range(6), [3, 2]);
        refused(() => transposedDst.copyFrom(src), "strides", /C-contiguous/);
        const gone = empty([2, 3], "float32", { device: CUDA0 });
        gone.dispose();
        refused(() => d.copyFrom(gone), "disposed");
        refused(() => gone.toHost(), "disposed");
        using rocm = importDLPack(make({ device: [10, 0], shape: [2, 3] }).source);
        refused(() => d.copyFrom(rocm), "device", /rocm:0/);
      });
    },
  },
  // -------------------------------------------------------------------------------------------
  // Import verification
  {
    name: "a CUDA claim on device memory imports verified, zero-copy",
    groups: ["fake", "real"],
    run(ctx) {
      noLeaks(ctx, () => {
        using x = empty([16], "float32", { device: CUDA0 });
        fill(x, range(16));
        const deletedBefore = deleted();
        const v = importDLPack(claim([2, 0], [4, 4], Number(x.address)).source);
        assert.equal(v.verified, true);
        assert.equal(v.address, x.address);
        assert.deepEqual(valuesOf(v), range(16));
        v.dispose();
        assert.equal(deleted(), deletedBefore + 1);
        using empty0 = importDLPack(make({ device: [2, 0], shape: [0], data: "null" }).source);
        assert.equal(empty0.verified, true, "nothing to check but the device ordinal");
      });
    },
  },
  {
    name: "false CUDA claims are refused with the driver's view, the deleter called exactly once",
    groups: ["fake", "real"],
    run(ctx) {
      noLeaks(ctx, () => {
        using device = empty([16], "float32", { device: CUDA0 });
        using pinned = empty([16], "float32", { device: { type: "cudaHost" } });
        using managed = empty([16], "float32", { device: { type: "cudaManaged" } });
        const count = cuda.available().deviceCount;
        const cases: [string, () => ReturnType<typeof make>, RegExp][] = [
          ["cuda on pageable host memory", () => claim([2, 0], [4]), /claims cuda:0 .*does not know .* first byte/],
          ["cuda on pinned memory", () => claim([2, 0], [4], Number(pinned.address)), /page-locked host memory/],
          ["cudaHost on device memory", () => claim([3, 0], [4], Number(device.address)), /device memory of cuda:0/],
          ["cudaHost on pageable memory", () => claim([3, 0], [4]), /claims cudaHost:0 .*does not know/],
          ["cudaManaged on device memory", () => claim([13, 0], [4], Number(device.address)), /claims cudaManaged/],
          ["cudaHost on managed memory", () => claim([3, 0], [4], Number(managed.address)), /managed memory/],
          ["an ordinal the driver lacks", () => claim([2, count], [4]), new RegExp(`sees ${count} device`)],
        ];
        if (count > 1) {
          cases.push(["the wrong device", () => claim([2, 1], [4], Number(device.address)), /claims cuda:1 .*cuda:0/]);
        }
        for (const [what, makeIt, pattern] of cases) {
          const made = makeIt();
          const before = deleted();
          const e = refused(() => importDLPack(made.source), "device", pattern);
          assert.match(e.message, /deleter was called/, what);
          assert.equal(deleted(), before + 1, `${what}: deleter once`);
        }
      });
    },
  },
  {
    name: "a claim is checked at its last byte too: a tensor overrunning its allocation is refused",
    groups: ["fake"],
    run(ctx) {
      noLeaks(ctx, () => {
        using x = empty([16], "float32", { device: CUDA0 });
        const before = deleted();
        refused(() => importDLPack(claim([2, 0], [4096], Number(x.address)).source), "device", /last byte/);
        assert.equal(deleted(), before + 1);
        // Negative strides reach below element 0: the first byte is checked there.
        const below = make({ device: [2, 0], shape: [4], strides: [-1], data: Number(x.address) });
        refused(() => importDLPack(below.source), "device", /first byte/);
        using inside = importDLPack(
          make({ device: [2, 0], shape: [4], strides: [-1], data: Number(x.address), byteOffset: 12 }).source,
        );
        assert.equal(inside.verified, true);
      });
    },
  },
  {
    name: "claims at hostile addresses (up to the top of the address space) are checked without overflow",
    groups: ["fake"],
    run(ctx) {
      noLeaks(ctx, () => {
        for (const data of [0xffff_ffff_ffff_f000n, 0x8000_0000_0000_0000n, 1n << 52n]) {
          const made = make({ device: [2, 0], shape: [4], dtype: "float32", data });
          const before = deleted();
          refused(() => importDLPack(made.source), "device", /does not know/);
          assert.equal(deleted(), before + 1);
        }
      });
    },
  },
  {
    name: "true cudaHost and cudaManaged claims import verified and give arrays",
    groups: ["fake", "real"],
    run(ctx) {
      noLeaks(ctx, () => {
        using pinned = zeros([4], "float32", { device: { type: "cudaHost" } });
        using managed = zeros([4], "float32", { device: { type: "cudaManaged" } });
        using p = importDLPack(claim([3, 0], [4], Number(pinned.address)).source);
        using m = importDLPack(claim([13, 0], [4], Number(managed.address)).source);
        using c = importDLPack(claim([2, 0], [4], Number(managed.address)).source);
        assert.ok(p.verified && m.verified && c.verified, "managed memory satisfies a cuda claim too");
        (p.array() as Float32Array)[1] = 7;
        assert.equal(pinned.get(1), 7);
        assert.equal(m.array().length, 4);
      });
    },
  },
  {
    name: "fromArrayInterface: a false cuda device claim is refused and keepAlive released",
    groups: ["fake", "real"],
    run(ctx) {
      noLeaks(ctx, () => {
        using host = empty([4], "float32");
        let released = 0;
        const keep = { dispose: () => released++ };
        refused(
          () => fromArrayInterface({ data: [host.address, false], shape: [4], typestr: "<f4", device: CUDA0 }, keep),
          "device",
          /claims cuda:0/,
        );
        stats(); // sweeps released pins
        assert.equal(released, 1);
        using d = empty([4], "float32", { device: CUDA0 });
        using ok = fromArrayInterface({ data: [d.address, false], shape: [4], typestr: "<f4", device: CUDA0 });
        assert.equal(ok.verified, true);
      });
    },
  },
  {
    name: "a driver failure while checking a claim refuses the import with the driver's error",
    groups: ["fake"],
    run(ctx) {
      const fake = fakeOf(ctx);
      noLeaks(ctx, () => {
        using x = empty([4], "float32", { device: CUDA0 });
        const made = claim([2, 0], [4], Number(x.address));
        const before = deleted();
        fake.failNext("cuPointerGetAttributes", 999);
        refused(
          () => importDLPack(made.source),
          "cuda",
          /checking the tensor's cuda:0 claim: cuPointerGetAttributes returned CUDA_ERROR_UNKNOWN \(999\)/,
        );
        assert.equal(deleted(), before + 1);
      });
    },
  },
  // -------------------------------------------------------------------------------------------
  // Driver errors
  {
    name: "driver errors carry the call, the CUresult and the driver's error name; nothing leaks",
    groups: ["fake"],
    run(ctx) {
      const fake = fakeOf(ctx);
      noLeaks(ctx, () => {
        fake.failNext("cuMemAlloc_v2", 2);
        const e = refused(() => empty([4], "float32", { device: CUDA0 }), "cuda");
        assert.ok(e instanceof cuda.CudaDriverError);
        assert.equal(e.result, 2);
        assert.equal(e.errorName, "CUDA_ERROR_OUT_OF_MEMORY");
        assert.equal(e.call, "cuMemAlloc_v2");
        assert.match(e.message, /cuMemAlloc_v2 failed with CUDA_ERROR_OUT_OF_MEMORY \(2\): out of memory/);
        // A failed memset frees the fresh allocation.
        fake.failNext("cuMemsetD8_v2", 700);
        refused(() => zeros([4], "float32", { device: CUDA0 }), "cuda", /CUDA_ERROR_ILLEGAL_ADDRESS \(700\)/);
        using d = empty([4], "float32", { device: CUDA0 });
        fake.failNext("cuMemcpyHtoD_v2", 700);
        using four = hostView([1, 2, 3, 4]);
        refused(() => d.copyFrom(four), "cuda", /cuMemcpyHtoD_v2 failed with CUDA_ERROR_ILLEGAL/);
        fake.failNext("cuMemcpyDtoH_v2", 12345);
        refused(() => d.toHost(), "cuda", /cuMemcpyDtoH_v2 failed with unknown CUresult \(12345\)/);
        fake.failNext("cuStreamCreate", 201);
        refused(() => cuda.createStream(), "cuda", /CUDA_ERROR_INVALID_CONTEXT/);
        fake.failNext("cuCtxPushCurrent_v2", 201);
        refused(() => d.toHost(), "cuda", /cuCtxPushCurrent_v2 failed/);
      });
    },
  },
  // -------------------------------------------------------------------------------------------
  // Streams
  {
    name: "streams and events: create, record, wait, synchronize, destroy",
    groups: ["fake", "real"],
    run(ctx) {
      noLeaks(ctx, () => {
        const s = cuda.createStream();
        const e = cuda.createEvent();
        assert.ok(s > 2n && e > 0n);
        cuda.recordEvent(e, s);
        cuda.waitEvent(cuda.LEGACY_STREAM, e);
        if (ctx.fake !== null) {
          assert.deepEqual(ctx.fake.lastWait(), { stream: 1n, event: e, recordedOn: s });
        }
        cuda.synchronize(s);
        cuda.synchronize();
        cuda.synchronize(cuda.PER_THREAD_STREAM);
        cuda.destroyEvent(e);
        cuda.destroyStream(s);
        refused(() => cuda.destroyStream(1), "cuda", /default streams/);
        refused(() => cuda.synchronize(-5 as number), "cuda", /handle/);
      });
    },
  },
  {
    name: "fenceForConsumer follows the protocol: None, -1, 0, 1, 2 and stream handles",
    groups: ["fake"],
    run(ctx) {
      const fake = fakeOf(ctx);
      noLeaks(ctx, () => {
        using x = empty([4], "float32", { device: CUDA0 });
        const s = cuda.createStream();
        const t = cuda.createStream();
        const waits = () => fake.stats().waits;
        cuda.setProducerStream(x, s);
        assert.equal(cuda.producerStream(x), s);
        let n = waits();
        cuda.fenceForConsumer(x, undefined); // None: the legacy default stream
        assert.equal(waits(), ++n);
        assert.equal(fake.lastWait().stream, 1n);
        assert.equal(fake.lastWait().recordedOn, s);
        cuda.fenceForConsumer(x, -1);
        assert.equal(waits(), n, "-1: no synchronization");
        refused(() => cuda.fenceForConsumer(x, 0), "cuda", /stream 0 is not allowed/);
        cuda.fenceForConsumer(x, 2);
        assert.equal(waits(), ++n);
        assert.deepEqual([fake.lastWait().stream, fake.lastWait().recordedOn], [2n, s]);
        cuda.fenceForConsumer(x, t);
        assert.deepEqual([fake.lastWait().stream, fake.lastWait().recordedOn], [t, s]);
        n++;
        cuda.fenceForConsumer(x, s);
        assert.equal(waits(), n, "same stream: nothing to wait for");
        cuda.setProducerStream(x, null);
        cuda.fenceForConsumer(x, t);
        assert.deepEqual([fake.lastWait().stream, fake.lastWait().recordedOn], [t, 1n]);
        n++;
        cuda.fenceForConsumer(x, 1n);
        assert.equal(waits(), n, "legacy to legacy");
        using host = empty([4], "float32");
        cuda.fenceForConsumer(host, null);
        refused(() => cuda.fenceForConsumer(host, 1), "device", /stream must be None for cpu data/);
        refused(() => cuda.setProducerStream(host, s), "device");
        cuda.destroyStream(s);
        cuda.destroyStream(t);
      });
    },
  },
  {
    name: "__dlpack__({ stream }) fences CUDA data before handing out the capsule",
    groups: ["fake"],
    run(ctx) {
      const fake = fakeOf(ctx);
      noLeaks(ctx, () => {
        using x = empty([4], "float32", { device: CUDA0 });
        const t = cuda.createStream();
        const n = fake.stats().waits;
        const capsule = x.__dlpack__({ maxVersion: [1, 3], stream: t });
        assert.equal(fake.stats().waits, n + 1);
        assert.deepEqual([fake.lastWait().stream, fake.lastWait().recordedOn], [t, 1n]);
        capsule.dispose();
        refused(() => x.__dlpack__({ maxVersion: [1, 3], stream: 0 }), "cuda", /stream 0/);
        x.__dlpack__({ maxVersion: [1, 3], stream: -1 }).dispose();
        assert.equal(fake.stats().waits, n + 1);
        using pinned = empty([4], "float32", { device: { type: "cudaHost" } });
        pinned.__dlpack__({ maxVersion: [1, 3], stream: t }).dispose();
        assert.equal(fake.stats().waits, n + 2, "pinned memory written by kernels is fenced as well");
        cuda.destroyStream(t);
      });
    },
  },
  {
    name: "exports carry the producer stream and an event; fenceExport waits on that event",
    groups: ["fake"],
    run(ctx) {
      const fake = fakeOf(ctx);
      noLeaks(ctx, () => {
        using x = empty([4], "float32", { device: CUDA0 });
        const s = cuda.createStream();
        const t = cuda.createStream();
        cuda.setProducerStream(x, s);
        const events = cuda.cudaStats().events;
        const records = fake.stats().records;
        const capsule = exportDLPack(x);
        assert.equal(cuda.cudaStats().events, events + 1, "the export holds an event");
        assert.equal(fake.stats().records, records + 1, "recorded on the producer stream at export");
        const n = fake.stats().waits;
        cuda.fenceExport(capsule, t);
        assert.equal(fake.stats().waits, n + 1);
        const wait = fake.lastWait();
        assert.deepEqual([wait.stream, wait.recordedOn], [t, s]);
        assert.equal(fake.stats().records, records + 1, "no new event: the export's own");
        cuda.fenceExport(capsule, -1);
        cuda.fenceExport(capsule, s);
        assert.equal(fake.stats().waits, n + 1, "-1 and the producer stream itself: no wait");
        refused(() => cuda.fenceExport(capsule, 0), "cuda", /stream 0/);
        // The native entry a Python __dlpack__ calls: -1 as all ones, 0 refused.
        assert.equal(core().dlpk_cuda_export_fence(capsule.address, 1, (1n << 64n) - 1n), 0);
        assert.equal(core().dlpk_cuda_export_fence(capsule.address, 1, 0), -2);
        assert.equal(core().dlpk_cuda_export_fence(capsule.address, 1, 2), 0);
        // Not one of our exports (NULL, misaligned, someone else's struct): refused, nothing read.
        assert.equal(core().dlpk_cuda_export_fence(0, 1, 1), -2);
        assert.equal(core().dlpk_cuda_export_fence(capsule.address + 4n, 1, 1), -2);
        const foreign = make({ device: [2, 0], shape: [1], data: "null" });
        assert.equal(core().dlpk_cuda_export_fence(foreign.address, 1, 1), -2);
        tp.tp_consume(foreign.address, 1);
        assert.deepEqual([fake.lastWait().stream, fake.lastWait().recordedOn], [2n, s]);
        capsule.dispose();
        assert.equal(cuda.cudaStats().events, events, "the event goes with the export");
        cuda.setProducerStream(x, null);
        const plain = exportDLPackLegacy(x);
        cuda.fenceExport(plain, t);
        assert.deepEqual([fake.lastWait().stream, fake.lastWait().recordedOn], [t, 1n]);
        plain.dispose();
        using host = empty([2], "float32");
        const hostCapsule = exportDLPack(host);
        refused(() => cuda.fenceExport(hostCapsule, t), "cuda", /invalid argument/);
        hostCapsule.dispose();
        cuda.destroyStream(s);
        cuda.destroyStream(t);
      });
    },
  },
  {
    name: "copies are ordered on the producer stream (or the given one) and complete on return",
    groups: ["fake"],
    run(ctx) {
      const fake = fakeOf(ctx);
      noLeaks(ctx, () => {
        using x = empty([4], "float32", { device: CUDA0 });
        fill(x, [1, 2, 3, 4]);
        const s = cuda.createStream();
        let f = fake.stats();
        x.toHost().dispose();
        assert.equal(fake.stats().syncCopies, f.syncCopies + 1, "no producer stream: synchronous copy");
        cuda.setProducerStream(x, s);
        f = fake.stats();
        using h = x.toHost();
        assert.deepEqual(Array.from(h.array() as Float32Array), [1, 2, 3, 4]);
        assert.equal(fake.stats().asyncCopies, f.asyncCopies + 1, "queued on the producer stream");
        assert.equal(fake.stats().syncs, f.syncs + 1, "and awaited");
        f = fake.stats();
        using reversed = hostView([4, 3, 2, 1]);
        x.copyFrom(reversed, { stream: 2 });
        assert.equal(fake.stats().asyncCopies, f.asyncCopies + 1);
        assert.deepEqual(valuesOf(x), [4, 3, 2, 1]);
        cuda.destroyStream(s);
      });
    },
  },
  {
    name: "every driver call ran with the right context current, and the context stack is balanced",
    groups: ["fake"],
    run(ctx) {
      const f = fakeOf(ctx).stats();
      assert.equal(f.wrongContext, 0);
      assert.equal(f.contextDepth, 0);
      assert.ok(f.retains >= 1 && f.retains <= 2, "one primary-context retain per device used");
      assert.equal(cuda.cudaStats().freeFailures, 0);
    },
  },
];

registerDeviceGroups(import.meta.url, CASES);
