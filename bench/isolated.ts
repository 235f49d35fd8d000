// The benchmark's cases that change the process they run in, each round in a fresh one (bench/run.ts
// starts it under Deno and under Bun): memory when nobody disposes (1,000,000 imports, then
// 1,000,000 exports, never disposed, with a timer turn every 10,000: the peak RSS growth), and
// imports while 100,000 views stay alive against imports without them. Prints one JSON object.
import { readFileSync } from "node:fs";
import { type BufferView, exportDLPack, importDLPack } from "../mod.ts";
import { runtime } from "../ffi/mod.ts";
import { tp } from "../tests/support/producer.ts";
import { interleaved } from "./measure.ts";

const out: Record<string, number | string | boolean> = { runtime: runtime().name };

function rssBytes(): number {
  return Number(readFileSync("/proc/self/statm", "utf8").split(" ")[1]) * 4096;
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

console.log(JSON.stringify(out));
