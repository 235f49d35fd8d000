// The Worker side of bench/workers.ts: each message names a loop (imports of this Worker's own
// tensor, exports of its own TypedArray, or arithmetic, the control), waits on a shared flag until
// the main thread releases every Worker together, runs it and answers; `export_ns` answers the
// median ns of an export + dispose measured here. Benchmark code only.
import { exportDLPack, importDLPack } from "../mod.ts";
import { tp } from "../tests/support/producer.ts";
import { measure } from "./measure.ts";

/** What bench/workers.ts sends. */
export interface LoopMessage {
  op: "import" | "export" | "arithmetic" | "export_ns";
  count: number;
  /** Int32 slots: [0] the start flag, [1] how many Workers are ready. */
  signal: SharedArrayBuffer;
}

const scope = globalThis as unknown as {
  onmessage: ((e: MessageEvent<LoopMessage>) => void) | null;
  postMessage(value: unknown): void;
};

// This Worker's own tensor, whose deleter counts in a counter of this thread alone.
const source = { versioned: tp.tp_static_tensor_local(1024, 1) };
const exported = new Float32Array(256);
let sink = 0;

const loops: Record<Exclude<LoopMessage["op"], "export_ns">, (n: number) => void> = {
  import: (n) => {
    for (let i = 0; i < n; i++) importDLPack(source).dispose();
  },
  export: (n) => {
    for (let i = 0; i < n; i++) exportDLPack(exported).dispose();
  },
  arithmetic: (n) => {
    let x = sink;
    for (let i = 0; i < n * 64; i++) x = (x * 31 + i) | 0;
    sink = x;
  },
};

scope.onmessage = (e) => {
  const m = e.data;
  if (m.op === "export_ns") {
    scope.postMessage({ ns: measure(m.count, () => exportDLPack(exported).dispose()) });
    return;
  }
  const loop = loops[m.op];
  loop(Math.ceil(m.count / 10)); // warm-up
  const flag = new Int32Array(m.signal);
  Atomics.add(flag, 1, 1);
  Atomics.wait(flag, 0, 0);
  loop(m.count);
  scope.postMessage({ done: true, sink });
};
