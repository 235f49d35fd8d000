/**
 * The soak's traffic (tests/soak/soak.ts): each workload is one small unit of real use that ends
 * with everything it created released, by dispose, by a foreign consumer (on this or a native
 * thread), or now and then by the garbage-collection backstop. To add traffic (the Python bridge,
 * CUDA), add a workload here or pass a module exporting `workloads` in SOAK_EXTRA.
 * @module
 */
import {
  type BufferView,
  DLPackError,
  exportDLPack,
  exportDLPackLegacy,
  fromArrayInterface,
  fromDLPack,
  importDLPack,
  share,
  zeros,
} from "../../mod.ts";
import { deleted, make, makeMany, releaseDone, releaseOnThreads, releaseWait, tp } from "../support/producer.ts";

/** One kind of traffic. `run(i)` does one unit; `weight` sets how often it is picked. */
export interface Workload {
  readonly name: string;
  readonly weight: number;
  run(i: number): void;
}

/** Producer tensors made by the soak, to compare with deleter calls at the end. */
export const produced = { count: 0, deletedAtStart: deleted() };

function importOne(i: number): BufferView {
  produced.count++;
  const made = make({ versioned: i % 2 === 0, shape: [32, 32], dtype: "float32" });
  return importDLPack(made.source, { producer: "soak" });
}

export const workloads: Workload[] = [
  {
    name: "import, read, dispose",
    weight: 4,
    run(i) {
      using view = importOne(i);
      if (view.access === "unknown") view.assumeWritable();
      view.set(i, 3, 4);
      if (view.get(3, 4) !== i % 16777216) throw new Error("value lost");
      view.toArray();
    },
  },
  {
    name: "refused imports (deleter called)",
    weight: 2,
    run(i) {
      produced.count++;
      const made = make({ shape: [4], byteOffset: 8, dataBytes: 32, versioned: i % 2 === 0 });
      try {
        fromDLPack(made.source); // strict: refuses the byte_offset, releases the producer
        throw new Error("strict import accepted a byte_offset");
      } catch (e) {
        if (!(e instanceof DLPackError) || e.code !== "byte_offset") throw e;
      }
    },
  },
  {
    name: "export JS memory to a foreign consumer",
    weight: 4,
    run(i) {
      const data = new Float64Array(256).fill(i);
      const capsule = i % 3 === 0 ? exportDLPackLegacy(data) : share(data);
      const address = capsule.take();
      if (i % 2 === 0) tp.tp_consume(address, capsule.versioned ? 1 : 0);
      else tp.tp_consume_on_thread(address, capsule.versioned ? 1 : 0);
    },
  },
  {
    name: "chain: producer -> import -> export -> import -> export -> consumer thread",
    weight: 3,
    run(i) {
      const first = importOne(i);
      const second = importDLPack(exportDLPack(first));
      const taken = exportDLPack(second).take();
      first.dispose();
      second.dispose();
      tp.tp_consume_on_thread(taken, 1);
    },
  },
  {
    name: "array interface with keepAlive",
    weight: 2,
    run(i) {
      const memory = zeros([16, 16], "int32");
      const view = fromArrayInterface(
        { data: [memory.address, false], shape: [16, 16], typestr: "<i4", version: 3 },
        memory, // the allocation itself is the keepAlive: disposed when the view and exports are gone
      );
      view.set(i % 1000, 1, 1);
      const taken = exportDLPack(view).take();
      view.dispose();
      tp.tp_consume(taken, 1);
    },
  },
  {
    name: "allocate, strided copy, toArray",
    weight: 2,
    run(i) {
      using a = zeros([64, 48], "float32");
      using t = importDLPack(exportDLPack(a, { shape: [48, 64], strides: [1, 48] }));
      using c = t.copy();
      if (c.size !== 3072 || !c.cContiguous) throw new Error("copy");
      a.set(i % 100, 0, 0);
      c.toArray();
    },
  },
  {
    name: "512 releases on 8 native threads while sweeping",
    weight: 1,
    run(i) {
      const addresses = makeMany({ shape: [8], versioned: true }, 256);
      produced.count += 256;
      const tagged = new Float64Array(512);
      const pinnedSource = new Float32Array(8).fill(i);
      for (let k = 0; k < 256; k++) {
        const view = importDLPack({ versioned: addresses[k]! });
        const capsule = exportDLPack(view);
        tagged[k] = Number(capsule.take()) * 2 + 1;
        view.dispose();
        tagged[256 + k] = Number(exportDLPack(pinnedSource).take()) * 2 + 1;
      }
      const handle = releaseOnThreads(tagged, 8);
      while (!releaseDone(handle)) void 0;
      releaseWait(handle);
    },
  },
  {
    name: "left to the GC backstop",
    weight: 1,
    run(i) {
      // Views and capsules nobody disposes; the FinalizationRegistry releases them.
      importOne(i).array();
      exportDLPack(new Float32Array(64));
    },
  },
];
