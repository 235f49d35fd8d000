// The benchmark's cases that change the process they run in, each round in a fresh one (bench/run.ts
// starts it under Deno and under Bun): memory when nobody disposes (1,000,000 imports, then
// 1,000,000 exports, never disposed, with a timer turn every 10,000: the peak RSS growth), imports
// while 100,000 views stay alive against imports without them, and imports of tensors in memory
// the library has not seen (a page mapped just before each), with the process's usual mappings
// and with 20,000 more, against imports of a known tensor in the same process. Prints one JSON
// object.
import { readFileSync } from "node:fs";
import { type BufferView, exportDLPack, importDLPack } from "../mod.ts";
import { runtime } from "../ffi/mod.ts";
import { tp } from "../tests/support/producer.ts";
import { threadNs } from "./cpu_time.ts";
import { interleaved } from "./measure.ts";

const out: Record<string, number | string | boolean> = { runtime: runtime().name };

function rssBytes(): number {
  return Number(readFileSync("/proc/self/statm", "utf8").split(" ")[1]) * 4096;
}

function mappings(): number {
  return readFileSync("/proc/self/maps", "utf8").trim().split("\n").length;
}

const turn = () => new Promise((resolve) => setTimeout(resolve, 0));

async function settle(): Promise<void> {
  for (let i = 0; i < 3; i++) {
    runtime().gc();
    await turn();
  }
}

/** The peak RSS growth over `count` calls of `make`, whose results are dropped undisposed, with a
 * timer turn every 10,000 calls (when the RSS is sampled). */
async function peakGrowth(count: number, make: () => unknown): Promise<number> {
  await settle();
  const before = rssBytes();
  let peak = before;
  for (let i = 0; i < count; i++) {
    make();
    if (i % 10_000 === 9_999) {
      await turn();
      peak = Math.max(peak, rssBytes());
    }
  }
  await settle();
  return peak - before;
}

const small = { versioned: tp.tp_static_tensor(1024, 1) };
const exported = new Float32Array(256);

out.undisposed_imports_peak_bytes = await peakGrowth(1_000_000, () => importDLPack(small));
out.undisposed_exports_peak_bytes = await peakGrowth(1_000_000, () => exportDLPack(exported));
await settle();

// 100,000 live views: import + dispose of another tensor with and without them, alternated.
{
  const other = { versioned: tp.tp_static_tensor(1024, 1) };
  const without: number[] = [];
  const withLive: number[] = [];
  for (let r = 0; r < 3; r++) {
    without.push(interleaved({ i: () => importDLPack(other).dispose() }, 100_000, 3).i!);
    const live: BufferView[] = [];
    for (let i = 0; i < 100_000; i++) live.push(importDLPack(small));
    withLive.push(interleaved({ i: () => importDLPack(other).dispose() }, 100_000, 3).i!);
    for (const v of live) v.dispose();
    await settle();
  }
  const median = (v: number[]) => v.sort((a, b) => a - b)[v.length >> 1]!;
  out.import_dispose_no_live_ns = median(without);
  out.import_dispose_100k_live_ns = median(withLive);
}

/** Median thread CPU ns of import + dispose of a tensor in a page mapped just before it. */
function missImport(count: number): number {
  const times: number[] = [];
  const t = threadNs();
  const clock = threadNs() - t; // one reading of the clock, left out of each figure
  for (let i = 0; i < count; i++) {
    const address = tp.tp_fresh_tensor();
    if (address === 0) throw new Error("no fresh page for the miss-path case");
    const t0 = threadNs();
    importDLPack({ versioned: address }).dispose();
    times.push(threadNs() - t0 - clock);
  }
  return times.sort((a, b) => a - b)[count >> 1]!;
}

const known = () => interleaved({ i: () => importDLPack(small).dispose() }, 100_000, 5).i!;
out.mappings_before = mappings();
out.miss_import_ns = missImport(50);
out.known_import_ns = known();
const made = tp.tp_map_regions(20_000);
out.mappings_after = mappings();
out.miss_import_20k_ns = missImport(50);
out.known_import_20k_ns = known();
out.regions_made = made;

console.log(JSON.stringify(out));
