/**
 * The soak: mixed import / export / chain / array-interface / native-thread traffic for a fixed
 * time with memory sampled once a second. At the end everything must be released: live counters
 * back to zero, every producer tensor deleted exactly once, and memory flat after the warm-up.
 * Prints one line of JSON (`{"soak": ...}`) and exits 1 when a check fails.
 *
 * "Flat" is judged on two series that a leak moves and nothing else does: RSS outside the JS
 * heap (native allocations, pinned and external buffers, allocator arenas) and the JS heap's
 * live bytes. The JS heap's committed size is reported but not judged: V8 grows its young
 * generation in steps under a high allocation rate (measured: +16 MB over 10 minutes with
 * heapUsed flat at 4 MB), which is sizing, not a leak; raw RSS has a looser bound for it.
 *
 *   tools/soak.sh [seconds] [deno|bun|both]      (default 600 s, both runtimes)
 *
 * Environment: SOAK_SECONDS (default 600), SOAK_MAX_DRIFT_MB (default 16), SOAK_EXTRA (a module
 * exporting more `workloads`, e.g. Python exchange).
 * @module
 */
import { stats } from "../../mod.ts";
import { runtime } from "../../ffi/mod.ts";
import { sweepPins } from "../../src/native/owner.ts";
import { deleted } from "../support/producer.ts";
import { memoryBytes } from "../support/harness.ts";
import { produced, type Workload, workloads } from "./workloads.ts";

const seconds = Number(runtime().env("SOAK_SECONDS") ?? 600);
const maxDriftMb = Number(runtime().env("SOAK_MAX_DRIFT_MB") ?? 16);
const extra = runtime().env("SOAK_EXTRA");
const all: Workload[] = [...workloads];
if (extra !== undefined && extra !== "") {
  const url = new URL(extra, `file://${runtime().env("PWD") ?? "."}/`).href;
  all.push(...((await import(url)) as { workloads: Workload[] }).workloads);
}

const MB = 1024 * 1024;
const schedule: Workload[] = all.flatMap((w) => Array<Workload>(w.weight).fill(w));
const counts = new Map<string, number>(all.map((w) => [w.name, 0]));
const samples: { rss: number; offHeap: number; heapUsed: number; heapTotal: number }[] = [];
const sample = () => {
  const m = memoryBytes();
  samples.push({ rss: m.rss, offHeap: m.rss - m.heapTotal, heapUsed: m.heapUsed, heapTotal: m.heapTotal });
};
const start = performance.now();
let next = start;
let i = 0;

const collect = async () => {
  runtime().gc();
  await new Promise((resolve) => setTimeout(resolve, 5)); // let finalizers run
};

while (performance.now() - start < seconds * 1000) {
  // Bursts of work between samples; timers (the pin sweep) and finalizers run in the gaps.
  for (let k = 0; k < 200; k++, i++) {
    const w = schedule[i % schedule.length]!;
    w.run(i);
    counts.set(w.name, counts.get(w.name)! + 1);
  }
  if (performance.now() >= next) {
    await collect();
    sample();
    next += 1000;
  } else {
    await new Promise((resolve) => setTimeout(resolve, 0));
  }
}

// Drain: the GC backstop releases what the last workload left behind.
for (let k = 0; k < 50; k++) {
  await collect();
  sweepPins();
  const s = stats();
  if (s.imports + s.exports + s.allocations + s.pinned === 0) break;
}
const final = stats();
sample();

// Of at least one sample (the last is taken after the loop).
const median = (xs: number[]) => {
  const s = xs.slice().sort((a, b) => a - b);
  return s[Math.floor(s.length / 2)]!;
};
// The first fifth warms up (JIT, allocator pools, heap sizing); drift compares the median of the
// next fifth with the median of the last fifth.
const fifth = Math.max(1, Math.floor(samples.length / 5));
const early = samples.length >= 3 * fifth ? samples.slice(fifth, 2 * fifth) : samples;
const late = samples.slice(-fifth);
const mb = (bytes: number) => Math.round((bytes / MB) * 10) / 10;
const drift = (key: keyof (typeof samples)[number]) =>
  mb(median(late.map((s) => s[key])) - median(early.map((s) => s[key])));
const driftMb = {
  offHeap: drift("offHeap"),
  heapUsed: drift("heapUsed"),
  rss: drift("rss"),
  heapTotal: drift("heapTotal"),
};
const producerDeleted = deleted() - produced.deletedAtStart;
const failures: string[] = [];
if (driftMb.offHeap > maxDriftMb) {
  failures.push(`RSS outside the JS heap grew ${driftMb.offHeap} MB after the warm-up (limit ${maxDriftMb})`);
}
if (driftMb.heapUsed > maxDriftMb / 2) {
  failures.push(`live JS heap grew ${driftMb.heapUsed} MB after the warm-up (limit ${maxDriftMb / 2})`);
}
if (driftMb.rss > 2 * maxDriftMb) {
  failures.push(`RSS grew ${driftMb.rss} MB after the warm-up (limit ${2 * maxDriftMb})`);
}
for (const key of ["imports", "exports", "allocations", "pinned", "allocatedBytes", "pinnedBytes"] as const) {
  if (final[key] !== 0) failures.push(`stats().${key} is ${final[key]} at the end`);
}
if (producerDeleted !== produced.count) {
  failures.push(`${produced.count} producer tensors made, ${producerDeleted} deleted`);
}
const series = (key: keyof (typeof samples)[number]) => ({
  first: mb(samples[0]![key]),
  warm: mb(median(early.map((s) => s[key]))),
  last: mb(median(late.map((s) => s[key]))),
  max: mb(Math.max(...samples.map((s) => s[key]))),
});

console.log(JSON.stringify({
  soak: {
    runtime: runtime().name,
    seconds: Math.round((performance.now() - start) / 100) / 10,
    units: i,
    perWorkload: Object.fromEntries(counts),
    producerTensors: produced.count,
    producerDeleted,
    samples: samples.length,
    rssMb: series("rss"),
    offHeapMb: series("offHeap"),
    heapUsedMb: series("heapUsed"),
    heapTotalMb: series("heapTotal"),
    driftMb,
    maxDriftMb,
    final,
    failures,
  },
}));
if (failures.length > 0) {
  (globalThis as { Deno?: { exit(c: number): void } }).Deno?.exit(1);
  (globalThis as unknown as { process?: { exit(c: number): void } }).process?.exit(1);
}
