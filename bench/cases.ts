// The JS side of the benchmark: runs every case in the runtime it is started with and prints one
// JSON object of medians (ns per operation) and figures. bench/run.ts starts it under Deno and Bun,
// interleaved with the Python peers, and computes the ratios.
import { readFileSync } from "node:fs";
import { exportDLPack, importDLPack, stats } from "../mod.ts";
import { runtime } from "../ffi/mod.ts";
import { deleted, tp } from "../tests/support/producer.ts";
import { bareArrayBuffer, ffiFloorCases } from "./floor.ts";
import { measure, SAMPLES } from "./measure.ts";
import { bridgeCases } from "./bridge.ts";
import { ioCases } from "./io.ts";
import { copyCases } from "./copies.ts";
import { elementCases } from "./elements.ts";
import { workerCases } from "./workers.ts";

const out: Record<string, number | string | boolean> = { runtime: runtime().name };

function rssBytes(): number {
  return Number(readFileSync("/proc/self/statm", "utf8").split(" ")[1]) * 4096;
}

function settle(): void {
  for (let i = 0; i < 3; i++) runtime().gc();
}

// A reusable producer tensor per size: its deleter only counts, so the loop times the import alone.
const KiB = 1024;
const tensors = new Map<string, number>([
  ["1KiB", tp.tp_static_tensor(KiB, 1)],
  ["1MiB", tp.tp_static_tensor(KiB * KiB, 16)],
  ["1GiB", tp.tp_static_tensor(KiB * KiB * KiB, 1024)],
]);
const small = { versioned: tensors.get("1KiB")! };

// The copies first (bench/copies.ts), while the heap holds nothing of the cases below: a collection
// during a 1 MiB copy would show in its figure.
copyCases(out);

out.import_dispose_ns = measure(200_000, () => importDLPack(small).dispose());
// The address as the runtime's FFI hands it out from a C function: a Deno.PointerObject in Deno (what a
// "pointer" result is), a number in Bun.
{
  const address = tensors.get("1KiB")!;
  const native = (runtime().pointerObjects ? Deno.UnsafePointer.create(BigInt(address)) : address) as number;
  const source = { versioned: native };
  out.import_dispose_native_ns = measure(200_000, () => importDLPack(source).dispose());
}
// The sizes are measured in alternating batches, so a slow stretch of a shared machine hits all of
// them alike and their ratio (size independence) stays meaningful.
{
  const bySize = [...tensors].map(([size, address]) => {
    const source = { versioned: address };
    return { size, fn: () => importDLPack(source).dispose(), perCall: [] as number[] };
  });
  for (const { fn } of bySize) for (let i = 0; i < 20_000; i++) fn();
  for (let s = 0; s < SAMPLES; s++) {
    for (const m of bySize) {
      const t0 = performance.now();
      for (let i = 0; i < 100_000; i++) m.fn();
      m.perCall.push(((performance.now() - t0) * 1e6) / 100_000);
    }
  }
  for (const m of bySize) out[`import_dispose_${m.size}_ns`] = m.perCall.sort((a, b) => a - b)[SAMPLES >> 1]!;
}
/** Median ns per `make()` of each case over `batches` batches of `batch` calls, the cases
 * interleaved batch by batch: the collection the garbage of earlier batches costs lands in any of
 * them alike (in Bun a single one moved a case's median by 2x from run to run). What `make()`
 * returns is disposed after its batch, outside the timed region. */
function measureMade(
  batch: number,
  cases: Record<string, () => { dispose(): void }>,
  batches = 21,
): Record<string, number> {
  const made = new Array<{ dispose(): void }>(batch);
  const perCall: Record<string, number[]> = {};
  for (const name in cases) perCall[name] = [];
  for (let s = 0; s < batches + 3; s++) {
    for (const name in cases) {
      const make = cases[name]!;
      const t0 = performance.now();
      for (let i = 0; i < batch; i++) made[i] = make();
      const t = ((performance.now() - t0) * 1e6) / batch;
      for (let i = 0; i < batch; i++) made[i]!.dispose();
      if (s >= 3) perCall[name]!.push(t); // the first batches warm the JIT up
    }
  }
  const medians: Record<string, number> = {};
  for (const name in cases) medians[name] = perCall[name]!.sort((a, b) => a - b)[batches >> 1]!;
  return medians;
}

out.import_array_dispose_ns = measure(100_000, () => {
  const v = importDLPack(small);
  v.array();
  v.dispose();
});
{
  const v = importDLPack(small);
  const floor = bareArrayBuffer(Number(v.address), KiB);
  const figures = measureMade(2_000, {
    // The case is "import + array()": the view's dispose is timed in import_dispose_ns.
    import_array_ns: () => {
      const made = importDLPack(small);
      made.array();
      return made;
    },
    bare_arraybuffer_ns: () => {
      floor();
      return { dispose() {} };
    },
    // What array() cannot do without: the import, then the bare ArrayBuffer and a TypedArray on it.
    import_bare_array_ns: () => {
      const made = importDLPack(small);
      void new Float32Array(floor());
      return made;
    },
  });
  Object.assign(out, figures);
  v.dispose();
}

const exported = new Float32Array(256);
out.export_ns = measure(100_000, () => exportDLPack(exported).dispose());
// Taken by a foreign consumer, which calls the deleter from C (the test producer's consumer).
out.export_foreign_ns = measure(100_000, () => tp.tp_consume(exportDLPack(exported).take(), 1));

// RSS when importing (and wrapping) a 1 GiB tensor: nothing may touch its pages.
settle();
{
  const before = rssBytes();
  const v = importDLPack({ versioned: tensors.get("1GiB")! });
  const a = v.array();
  out.rss_growth_1GiB_import_bytes = rssBytes() - before;
  out.array_1GiB_length = a.length;
  v.dispose();
}

// 1,000,000 import/dispose cycles: throughput, RSS drift, counters back to zero.
settle();
{
  const deletedBefore = deleted();
  const before = rssBytes();
  const t0 = performance.now();
  for (let i = 0; i < 1_000_000; i++) importDLPack(small).dispose();
  const seconds = (performance.now() - t0) / 1000;
  settle();
  out.cycles_1M_per_second = 1_000_000 / seconds;
  out.cycles_1M_rss_growth_bytes = rssBytes() - before;
  out.cycles_1M_deleters = deleted() - deletedBefore;
  const s = stats();
  out.cycles_1M_stats_zero = s.imports === 0 && s.exports === 0 && s.pinned === 0;
}

// After the RSS rows: these make 200,000 ArrayBuffers, whose backing stores the engine frees on its
// own schedule, which would move the RSS baselines above.
// A TypedArray made for the export each time: nothing learned from an earlier export of it helps.
out.export_fresh_ns = measure(100_000, () => exportDLPack(new Float32Array(256)).dispose());
let made: Float32Array | undefined;
out.alloc_f32_ns = measure(100_000, () => {
  made = new Float32Array(256);
});
void made;

// Import and export against their floor (bench/floor.ts), reading one element (bench/elements.ts),
// and Workers (bench/workers.ts).
ffiFloorCases(out, tensors.get("1KiB")!);
elementCases(out);
await workerCases(out);

// Tensors on disk: a 1 GiB safetensors file (bench/io.ts). The garbage the cases above left (200,000
// ArrayBuffers, the Workers' messages) is collected first: Python's peer, which frees by reference
// count, owes no collection either, and in Bun one ran inside these few timed opens.
settle();
ioCases(out);

// Imports of tensors in memory the library has not seen (a producer whose allocations keep mapping
// new memory): the test producer maps a page for each tensor of a batch beforehand and unmaps them
// after it, so the batch times the imports alone; interleaved with batches of a known-mapping
// import. Then again with 20,000 mappings more (a JIT, an interpreter and a model loaded get
// there), which stay: these rows come last.
function missRows(suffix: string): void {
  const batch = 2_000;
  const tensors = new Float64Array(batch);
  const missed: number[] = [];
  const known: number[] = [];
  const timed = (fn: (i: number) => void) => {
    const t0 = performance.now();
    for (let i = 0; i < batch; i++) fn(i);
    return ((performance.now() - t0) * 1e6) / batch;
  };
  for (let s = 0; s < SAMPLES + 2; s++) {
    if (tp.tp_fresh_tensors(batch, tensors) !== batch) throw new Error("could not map the tensors' pages");
    const miss = timed((i) => importDLPack({ versioned: tensors[i]! }).dispose());
    tp.tp_fresh_unmap(tensors, batch);
    const hit = timed(() => importDLPack(small).dispose());
    // The first batches warm the JIT up.
    if (s >= 2) missed.push(miss), known.push(hit);
  }
  const median = (v: number[]) => v.sort((a, b) => a - b)[v.length >> 1]!;
  out[`import_miss${suffix}_ns`] = median(missed);
  out[`import_known${suffix}_ns`] = median(known);
  out[`mappings${suffix}`] = readFileSync("/proc/self/maps", "utf8").split("\n").length - 1;
}

// The bridge rows: JS -> numpy -> JS, and torch (bench/bridge.ts).
bridgeCases(out);

missRows("");
if (tp.tp_add_mappings(10_000) !== 10_000) throw new Error("could not map 20,000 more pages");
missRows("_20k");

console.log(JSON.stringify(out));
