// Two Workers against one (bench/worker_loop.ts): imports of their own tensors, exports of their
// own TypedArrays, and an arithmetic loop as the control of how much two threads get on this
// machine at all; throughput in operations per wall-clock second, the one- and two-Worker runs
// alternated; and an export's cost inside a Worker. Benchmark code only.
import type { LoopMessage } from "./worker_loop.ts";

type Figures = Record<string, number | string | boolean>;

const ROUNDS = 5;
// Each run lasts 20-50 ms: with 20,000 exports (5 ms) one collection or a late wake-up decided a
// round's ratio (Bun's export ratio read 1.28-2.03 from run to run).
const COUNTS: Record<"import" | "export" | "arithmetic", number> = {
  import: 200_000,
  export: 100_000,
  arithmetic: 200_000,
};

function answer(worker: Worker): Promise<Record<string, number>> {
  return new Promise((resolve, reject) => {
    worker.onmessage = (e) => resolve(e.data);
    worker.onerror = (e) => reject(new Error(`bench worker: ${e.message}`));
  });
}

/** Operations per millisecond of `workers` each running `count` iterations of `op`, started together. */
async function run(workers: Worker[], op: LoopMessage["op"], count: number): Promise<number> {
  const signal = new SharedArrayBuffer(8);
  const flag = new Int32Array(signal);
  const answers = workers.map(answer);
  for (const w of workers) w.postMessage({ op, count, signal } satisfies LoopMessage);
  while (Atomics.load(flag, 1) < workers.length) await new Promise((r) => setTimeout(r, 1));
  const t0 = performance.now();
  Atomics.store(flag, 0, 1);
  Atomics.notify(flag, 0);
  await Promise.all(answers);
  return (workers.length * count) / (performance.now() - t0);
}

/** Adds the Worker figures to `out`: 2-Worker over 1-Worker throughput per op (medians of
 * alternated rounds) and `worker_export_ns`. */
export async function workerCases(out: Figures): Promise<void> {
  const url = new URL("./worker_loop.ts", import.meta.url);
  const workers = [new Worker(url, { type: "module" }), new Worker(url, { type: "module" })];
  try {
    const ratios: Record<string, number[]> = { import: [], export: [], arithmetic: [] };
    for (let r = 0; r < ROUNDS; r++) {
      for (const op of ["import", "export", "arithmetic"] as const) {
        const one = await run(workers.slice(0, 1), op, COUNTS[op]);
        const two = await run(workers, op, COUNTS[op]);
        ratios[op]!.push(two / one);
      }
    }
    for (const op in ratios) out[`workers_${op}_2_threads`] = ratios[op]!.sort((a, b) => a - b)[ROUNDS >> 1]!;
    const exported = answer(workers[0]!);
    workers[0]!.postMessage({ op: "export_ns", count: 10_000, signal: new SharedArrayBuffer(8) } satisfies LoopMessage);
    out.worker_export_ns = (await exported).ns!;
  } finally {
    for (const w of workers) w.terminate();
  }
}
