// The bridge rows of the benchmark, in the runtime it is started with: JS -> numpy -> JS, and with
// torch (when importable) fromPython of a torch tensor and torch.from_dlpack of a JS export, each
// against torch.from_dlpack of a torch tensor timed in the same process (timeit inside the
// embedded interpreter, so that reference pays no JS-to-Python call). Run alone
// (`deno run -A bench/bridge.ts`, `bun run bench/bridge.ts`) it prints its figures as one JSON
// object; bench/cases.ts includes them.
import { fromPython, openPython, toPython } from "../python.ts";
import { measure, SAMPLES } from "./measure.ts";

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
  out.roundtrip_js_numpy_js_ns = measure(20_000, () => {
    const t = toPython(x, py);
    const b = fromDlpack.call(t);
    const v = fromPython(b);
    v.dispose();
    b.dispose();
    t.dispose();
  });
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
  torchCases(py, out);
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
