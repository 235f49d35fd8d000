// The bridge rows of the benchmark, in the runtime it is started with: JS -> numpy -> JS, and with
// torch (when importable) fromPython of a torch tensor and torch.from_dlpack of a JS export, each
// against torch.from_dlpack of a torch tensor timed in the same process (timeit inside the
// embedded interpreter, so that reference pays no JS-to-Python call). Run alone
// (`deno run -A bench/bridge.ts`, `bun run bench/bridge.ts`) it prints its figures as one JSON
// object; bench/cases.ts includes them.
import { fromPython, openPython, type PyObject, toPython } from "../python.ts";
import { measure, SAMPLES } from "./measure.ts";
import { threadNs } from "./cpu_time.ts";

type Figures = Record<string, number | string | boolean>;

/** Adds the bridge figures to `out`; a part whose Python packages are missing says so instead. */
export function bridgeCases(out: Figures): void {
  let py: ReturnType<typeof openPython>;
  try {
    py = openPython();
    py.exec("import numpy");
  } catch (error) {
    out.roundtrip_js_numpy_js_ns = `unavailable: ${(error as Error).message.slice(0, 100)}`;
    out.torch = out.roundtrip_js_numpy_js_ns;
    return;
  }
  const np = py.import("numpy");
  const fromDlpack = np.get("from_dlpack");
  const x = new Float32Array(256);
  const roundTrip = () => {
    const t = toPython(x, py);
    const b = fromDlpack.call(t);
    const v = fromPython(b);
    v.dispose();
    b.dispose();
    t.dispose();
  };
  out.roundtrip_js_numpy_js_ns = measure(20_000, roundTrip);
  // Its steps, each alone (for the profile; not rows of the table): toPython and the
  // DLPackTensor's release, numpy's import of a ready DLPackTensor called from JS (the call and
  // the array's release included), and fromPython of a ready ndarray with the view disposed.
  out.step_to_python_ns = measure(20_000, () => toPython(x, py).dispose());
  {
    using t = toPython(x, py);
    out.step_numpy_from_dlpack_ns = measure(20_000, () => fromDlpack.call(t).dispose());
    using b = fromDlpack.call(t);
    out.step_from_python_ns = measure(20_000, () => fromPython(b).dispose());
  }
  cpuCases(py, fromDlpack, x, roundTrip, out);
  torchCases(py, out);
}

/** Batches of the thread CPU time figures; the median batch is reported. */
const CPU_BATCHES = 9;
const CPU_BATCH = 20_000;

/**
 * The round trip, its steps and numpy's own round trip (`from_dlpack(from_dlpack(a))` with
 * `from_dlpack` bound once, as bench/peers.py and the JS cases bind theirs, timed inside the
 * embedded interpreter) in thread CPU time, their batches interleaved: on a loaded machine the
 * wall-clock figures above also count the time this thread waited for a core, and numpy's
 * reference is then measured in another process at another moment.
 */
function cpuCases(
  py: ReturnType<typeof openPython>,
  fromDlpack: PyObject,
  x: Float32Array,
  roundTrip: () => void,
  out: Figures,
): void {
  py.exec(
    "import time as _bench_time\n" +
      "_bench_a = numpy.zeros(256, numpy.float32)\n" +
      "def _bench_numpy_roundtrip(n):\n" +
      "    t0 = _bench_time.thread_time_ns()\n" +
      "    f = numpy.from_dlpack\n" +
      "    for _ in range(n): f(f(_bench_a))\n" +
      "    return _bench_time.thread_time_ns() - t0",
  );
  using numpyRoundTrip = py.eval("_bench_numpy_roundtrip");
  using n = py.eval(`${CPU_BATCH}`);
  using t = toPython(x, py);
  using b = fromDlpack.call(t);
  const cases: Record<string, () => number> = {
    roundtrip_js_numpy_js_cpu_ns: () => jsBatch(roundTrip),
    numpy_roundtrip_cpu_ns: () => numpyRoundTrip.call(n).toJS<number>() / CPU_BATCH,
    step_to_python_cpu_ns: () => jsBatch(() => toPython(x, py).dispose()),
    step_numpy_from_dlpack_cpu_ns: () => jsBatch(() => fromDlpack.call(t).dispose()),
    step_from_python_cpu_ns: () => jsBatch(() => fromPython(b).dispose()),
  };
  // Keyed by the names of `cases`, which the loops walk.
  const samples: Record<string, number[]> = {};
  for (const name in cases) {
    samples[name] = [];
    cases[name]!(); // warm-up
  }
  for (let i = 0; i < CPU_BATCHES; i++) for (const name in cases) samples[name]!.push(cases[name]!());
  for (const name in cases) out[name] = samples[name]!.sort((p, q) => p - q)[CPU_BATCHES >> 1]!;
  out.roundtrip_cpu_ratio = (out.roundtrip_js_numpy_js_cpu_ns as number) / (out.numpy_roundtrip_cpu_ns as number);
  py.exec("del _bench_time, _bench_a, _bench_numpy_roundtrip");
}

/** Thread CPU time per call of `fn` over one batch. */
function jsBatch(fn: () => void): number {
  const t0 = threadNs();
  for (let i = 0; i < CPU_BATCH; i++) fn();
  return (threadNs() - t0) / CPU_BATCH;
}

function torchCases(py: ReturnType<typeof openPython>, out: Figures): void {
  try {
    py.exec("import torch, timeit as _timeit, statistics as _statistics");
  } catch (error) {
    out.torch = `unavailable: ${(error as Error).message.slice(0, 160)}`;
    return;
  }
  out.torch = py.eval("torch.__version__").toJS() as string;
  // The same 1 KiB float32 tensor as the numpy rows.
  py.exec("_bench_t = torch.zeros(256)");
  using t = py.eval("_bench_t");
  using fromDlpack = py.eval("torch.from_dlpack");
  using Tensor = py.eval("torch.Tensor");
  const x = new Float32Array(256);
  const timeit = (statement: string, number: number) =>
    py.eval(
      `_statistics.median(_timeit.repeat(${JSON.stringify(statement)}, number=${number}, repeat=${SAMPLES}, ` +
        `globals=globals())) / ${number} * 1e9`,
    ).toJS() as number;
  // Warm torch's from_dlpack up (its first calls import and cache) before either side is timed.
  timeit("torch.from_dlpack(_bench_t)", 2_000);
  out.from_python_torch_ns = measure(20_000, () => fromPython(t).dispose());
  out.torch_from_dlpack_torch_ns = timeit("torch.from_dlpack(_bench_t)", 20_000);
  // The expression as JS writes it: export, wrap, torch's import, both objects released.
  out.torch_from_dlpack_js_export_ns = measure(20_000, () => {
    const d = toPython(x, py);
    fromDlpack.call(d).dispose();
    d.dispose();
  });
  // For context: the reference called from JS the same way, torch.from_dlpack of a DLPackTensor
  // inside Python, and a torch tensor made through torch's C exchange table (toPython's `as`).
  out.torch_from_dlpack_torch_from_js_ns = measure(20_000, () => fromDlpack.call(t).dispose());
  {
    using d = toPython(x, py);
    py.set("_bench_d", d);
    out.torch_from_dlpack_dlpacktensor_ns = timeit("torch.from_dlpack(_bench_d)", 20_000);
    py.exec("del _bench_d");
  }
  out.to_python_as_torch_ns = measure(20_000, () => toPython(x, py, { as: Tensor }).dispose());
  py.exec("del _bench_t");
}

if (import.meta.main) {
  const { runtime } = await import("../ffi/mod.ts");
  const out: Figures = { runtime: runtime().name };
  bridgeCases(out);
  console.log(JSON.stringify(out));
}
