// `deno task bench`: runs bench/cases.ts and bench/isolated.ts (a fresh process for the cases that
// change it) under Deno and under Bun, bench/peers.py (numpy, JAX, pyarrow, torch with timeit) and
// the native loops of `zig build bench-import` (the floor's native calls, native threads) in ONE
// run on this machine, interleaved round by round, takes the median of each figure across rounds,
// prints the table of medians and ratios against the peers, writes bench/results.json and, with
// --docs, the table in docs/performance.md. With --only=bridge, runs and prints only the bridge
// rows (bench/bridge.ts) and writes nothing.
import { existsSync, readdirSync, readFileSync, statSync, writeFileSync } from "node:fs";
import { replaceBetweenMarkers } from "../tools/markers.ts";
import { ensureIoFile, ioFilePath } from "./io.ts";

const root = new URL("../", import.meta.url).pathname;
const ROUNDS = Number(Deno.args.find((a) => a.startsWith("--rounds="))?.split("=")[1] ?? 3);
const BRIDGE_ONLY = Deno.args.includes("--only=bridge");
const tools = `${root}.tools/bin`;

/** The pinned base site, each installed peer framework (tools/python.sh puts them in
 * .tools/python/peers/<peer>), then whatever PYTHONPATH the caller set. */
function pythonPath(): string {
  const peers = `${root}.tools/python/peers`;
  const dirs = [`${root}.tools/python/site`];
  if (existsSync(peers)) {
    for (const name of readdirSync(peers).sort()) {
      if (!name.startsWith(".") && statSync(`${peers}/${name}`).isDirectory()) dirs.push(`${peers}/${name}`);
    }
  }
  const inherited = Deno.env.get("PYTHONPATH");
  if (inherited) dirs.push(inherited);
  return dirs.join(":");
}
// The 1 GiB safetensors file of the tensors-on-disk rows, written once and reused (.scratch/ is ignored).
const ioFile = ioFilePath(root);
if (!BRIDGE_ONLY) ensureIoFile(ioFile);
const env = { ...Deno.env.toObject(), PYTHONPATH: pythonPath(), DLPACK_BENCH_IO_FILE: ioFile };

function run(cmd: string, args: string[], cwd = root): Record<string, number | string | boolean> {
  const out = new Deno.Command(cmd, { args, cwd, env, stdout: "piped", stderr: "piped" }).outputSync();
  const text = new TextDecoder().decode(out.stdout).trim().split("\n").pop() ?? "";
  if (out.code !== 0) {
    throw new Error(`${cmd} ${args.join(" ")} failed: ${new TextDecoder().decode(out.stderr).slice(-2000)}`);
  }
  return JSON.parse(text);
}

type Side = "deno" | "bun" | "python" | "native";
type Figures = Record<string, number | string | boolean>;
const rounds: Record<Side, Array<Figures>> = { deno: [], bun: [], python: [], native: [] };
const cases = BRIDGE_ONLY ? "bench/bridge.ts" : "bench/cases.ts";
const peerArgs = BRIDGE_ONLY ? ["bench/peers.py", "--only=bridge"] : ["bench/peers.py"];
const deno = (file: string) => run(`${tools}/deno`, ["run", "-A", "--v8-flags=--expose-gc", file]);
const bun = (file: string) => run(`${tools}/bun`, ["run", file]);
// The native loops, built as tools/build.sh builds the library (the step installs it again).
const native = () =>
  run(
    `${tools}/zig`,
    ["build", "bench-import", "--release=safe", "--", "--json", "1", "--misses", "0", "--count", "400000"],
    `${root}zig`,
  );
for (let r = 0; r < ROUNDS; r++) {
  console.error(`round ${r + 1}/${ROUNDS}`);
  if (BRIDGE_ONLY) {
    rounds.deno.push(deno(cases));
    rounds.python.push(run("python3", peerArgs));
    rounds.bun.push(bun(cases));
    continue;
  }
  rounds.deno.push({ ...deno(cases), ...deno("bench/isolated.ts") });
  rounds.python.push(run("python3", peerArgs));
  rounds.native.push(native());
  rounds.bun.push({ ...bun(cases), ...bun("bench/isolated.ts") });
}

function median(side: Side, key: string): number {
  const values = rounds[side].map((r) => r[key]).filter((v): v is number => typeof v === "number").sort((a, b) =>
    a - b
  );
  return values.length === 0 ? NaN : values[Math.floor(values.length / 2)]!;
}

const cpu = readFileSync("/proc/cpuinfo", "utf8").match(/model name\s*:\s*(.+)/)?.[1] ?? "unknown CPU";
/** The last-level cache's size, where sysfs tells it (the copies stream their output past it). */
const llc = (() => {
  const dir = "/sys/devices/system/cpu/cpu0/cache";
  if (!existsSync(dir)) return "";
  const levels = readdirSync(dir).filter((n) => n.startsWith("index")).map((n) => ({
    level: Number(readFileSync(`${dir}/${n}/level`, "utf8")),
    size: readFileSync(`${dir}/${n}/size`, "utf8").trim(),
  })).sort((a, b) => b.level - a.level);
  return levels.length === 0 ? "" : `, L${levels[0]!.level} ${levels[0]!.size}`;
})();
const memory = Math.round(
  Number(readFileSync("/proc/meminfo", "utf8").match(/MemTotal:\s*(\d+)/)?.[1] ?? 0) / 1024 / 1024,
);
const machine =
  `${cpu}, ${navigator.hardwareConcurrency} cores${llc}, ${memory} GiB, ${Deno.build.os} ${Deno.build.arch}`;
const versions = `Deno ${Deno.version.deno}, Bun ${
  new TextDecoder().decode(new Deno.Command(`${tools}/bun`, { args: ["--version"] }).outputSync().stdout).trim()
}, numpy ${rounds.python[0]!.numpy}${torchVersion()}`;

/** Why the tensors-on-disk rows are skipped (safetensors or the file missing), or undefined. */
function ioSkipped(): string | undefined {
  for (const side of ["deno", "bun", "python"] as const) {
    const value = rounds[side][0]?.io;
    if (value !== "measured") return `skipped: ${String(value ?? "not measured").slice(0, 120)}`;
  }
  return undefined;
}

/** Why the torch rows are skipped (torch not importable in one of the runtimes), or undefined. */
function torchSkipped(): string | undefined {
  for (const side of ["deno", "bun"] as const) {
    const value = rounds[side][0]?.torch;
    if (typeof value !== "string" || value.startsWith("unavailable")) {
      return `skipped: torch is not installed (${String(value ?? "not measured").slice(0, 120)})`;
    }
  }
  return undefined;
}

function torchVersion(): string {
  const value = rounds.deno[0]?.torch;
  return typeof value === "string" && !value.startsWith("unavailable") ? `, torch ${value}` : "";
}

/** A target of one runtime's figure: its ratio to the reference (or, `absolute`, the figure
 * itself) at most `limit`, or at least with `atLeast`. */
interface Target {
  limit: number;
  atLeast?: boolean;
  absolute?: boolean;
}

interface Row {
  name: string;
  unit: string;
  deno: number;
  bun: number;
  /** What the figure is compared with, per runtime (NaN: the figure is itself the ratio). */
  ref: [number, number];
  refText: string;
  /** Acceptable ratio (figure / reference): at most, or at least with `atLeast`. */
  target?: number;
  atLeast?: boolean;
  /** Targets that differ between the runtimes (instead of `target`); none for a runtime: undefined. */
  targets?: [Target | undefined, Target | undefined];
  /** The embedded-Python bridge rows (all that --only=bridge runs). */
  bridge?: boolean;
  /** Why the row was not measured (a peer that is not installed). */
  skipped?: string | undefined;
}

const d = (k: string) => median("deno", k);
const b = (k: string) => median("bun", k);
const p = (k: string) => median("python", k);
const n = (k: string) => median("native", k);
const both = (v: number): [number, number] => [v, v];
const none: [number, number] = [NaN, NaN];
const MiB = 1048576;

const rows: Row[] = [
  {
    name: "import + dispose (1 KiB tensor)",
    unit: "ns",
    deno: d("import_dispose_ns"),
    bun: b("import_dispose_ns"),
    ref: both(p("numpy_import_ns")),
    refText: `numpy's import (\`from_dlpack\` − \`__dlpack__\`) ${fmt(p("numpy_import_ns"))} ns`,
    target: 1,
  },
  {
    name: "import + dispose, the address as the runtime's FFI returns it (Deno.PointerObject, Bun number)",
    unit: "ns",
    deno: d("import_dispose_native_ns"),
    bun: b("import_dispose_native_ns"),
    ref: both(p("numpy_import_ns")),
    refText: `numpy's import ${fmt(p("numpy_import_ns"))} ns`,
    target: 1,
  },
  {
    name: "import + dispose ÷ its floor (thread CPU time)",
    unit: "×",
    deno: d("import_dispose_cpu_ns") / (n("native_import_ns") + d("empty_import_calls_cpu_ns")),
    bun: b("import_dispose_cpu_ns") / (n("native_import_ns") + b("empty_import_calls_cpu_ns")),
    ref: none,
    refText: `the floor: its native calls alone (\`zig build bench-import\`: ${
      fmt(n("native_import_ns"))
    } ns) + the same FFI calls to empty functions (${fmt(d("empty_import_calls_cpu_ns"))} / ${
      fmt(b("empty_import_calls_cpu_ns"))
    } ns); import + dispose ${fmt(d("import_dispose_cpu_ns"))} / ${fmt(b("import_dispose_cpu_ns"))} ns`,
    target: 1.2,
  },
  {
    name: "import + array()",
    unit: "ns",
    deno: d("import_array_ns"),
    bun: b("import_array_ns"),
    ref: [d("import_bare_array_ns"), b("import_bare_array_ns")],
    refText: `the import, then a bare zero-copy ArrayBuffer and a Float32Array on it: ${
      fmt(d("import_bare_array_ns"))
    } / ${fmt(b("import_bare_array_ns"))} ns (the bare ArrayBuffer alone: Deno getArrayBuffer ${
      fmt(d("bare_arraybuffer_ns"))
    } ns, Bun toArrayBuffer ${fmt(b("bare_arraybuffer_ns"))} ns); with dispose (detaching the array): ${
      fmt(d("import_array_dispose_ns"))
    } / ${fmt(b("import_array_dispose_ns"))} ns`,
    target: 1.5,
  },
  {
    name: "import + `get(1, 2)` + dispose of a 2×3 float32",
    unit: "ns",
    deno: d("import_get_dispose_ns"),
    bun: b("import_get_dispose_ns"),
    ref: [d("by_hand_read_ns"), b("by_hand_read_ns")],
    refText: `a reader by hand with the runtime's FFI (the data pointer, the float, the deleter): ${
      fmt(d("by_hand_read_ns"))
    } / ${fmt(b("by_hand_read_ns"))} ns`,
    // Deno: no target here; its 120 ns is the read's own (the next row).
    targets: [undefined, { limit: 1.1 }],
  },
  {
    name: "`get(1, 2)` of a live 2×3 float32 view, the read alone",
    unit: "ns",
    deno: d("get_live_ns"),
    bun: b("get_live_ns"),
    ref: none,
    refText: "the index checked, the element read in place (Deno: libdlpack's `dlpk_load`; Bun: `bun:ffi` read)",
    targets: [{ limit: 120, absolute: true }, { limit: 120, absolute: true }],
  },
  {
    name: "import + `get(1, 2)` + dispose ÷ import + dispose",
    unit: "×",
    deno: d("import_get_dispose_ns") / d("import_dispose_2x3_ns"),
    bun: b("import_get_dispose_ns") / b("import_dispose_2x3_ns"),
    ref: none,
    refText: `import + dispose of the same tensor, batches interleaved: ${fmt(d("import_dispose_2x3_ns"))} / ${
      fmt(b("import_dispose_2x3_ns"))
    } ns`,
    target: 1.5,
  },
  {
    name: "export of a TypedArray (capsule made and freed)",
    unit: "ns",
    deno: d("export_ns"),
    bun: b("export_ns"),
    ref: both(p("numpy_export_ns")),
    refText: `numpy \`__dlpack__\` ${fmt(p("numpy_export_ns"))} ns`,
    target: 1,
  },
  {
    name: "export of a TypedArray released by a foreign consumer (deleter called from C)",
    unit: "ns",
    deno: d("export_foreign_ns"),
    bun: b("export_foreign_ns"),
    ref: both(p("numpy_export_ns")),
    refText: `numpy \`__dlpack__\` ${fmt(p("numpy_export_ns"))} ns (its capsule freed right away)`,
    target: 1,
  },
  {
    name: "export + dispose ÷ its floor (thread CPU time)",
    unit: "×",
    deno: d("export_dispose_cpu_ns") / (n("native_export_ns") + d("empty_export_calls_cpu_ns")),
    bun: b("export_dispose_cpu_ns") / (n("native_export_ns") + b("empty_export_calls_cpu_ns")),
    ref: none,
    refText: `the floor: its native calls alone (${fmt(n("native_export_ns"))} ns) + the same FFI calls to empty ` +
      `functions (${fmt(d("empty_export_calls_cpu_ns"))} / ${fmt(b("empty_export_calls_cpu_ns"))} ns); export + ` +
      `dispose ${fmt(d("export_dispose_cpu_ns"))} / ${fmt(b("export_dispose_cpu_ns"))} ns`,
    target: 1.4,
  },
  {
    name: "export of a TypedArray made for it (`new Float32Array(256)` each time)",
    unit: "ns",
    deno: d("export_fresh_ns"),
    bun: b("export_fresh_ns"),
    ref: [d("alloc_f32_ns") + 2 * d("export_ns"), b("alloc_f32_ns") + 2 * b("export_ns")],
    refText: `\`new Float32Array(256)\` alone (${fmt(d("alloc_f32_ns"))} / ${
      fmt(b("alloc_f32_ns"))
    } ns) + 2× the export of a known array; numpy \`np.empty(256).__dlpack__()\` ${fmt(p("numpy_export_fresh_ns"))} ns`,
    target: 1,
  },
  {
    name: "export + dispose in a Worker ÷ on the main thread",
    unit: "×",
    deno: d("worker_export_ns") / d("export_ns"),
    bun: b("worker_export_ns") / b("export_ns"),
    ref: none,
    refText: `in a Worker ${fmt(d("worker_export_ns"))} / ${fmt(b("worker_export_ns"))} ns, on the main thread ${
      fmt(d("export_ns"))
    } / ${fmt(b("export_ns"))} ns`,
    target: 2,
  },
  {
    name: "2 threads ÷ 1, native imports of their own tensors (the same figure in both columns)",
    unit: "×",
    deno: n("native_import_2_threads"),
    bun: n("native_import_2_threads"),
    ref: none,
    refText: "throughput, wall clock (`zig build bench-import`), each thread's tensor made on it, its deleter " +
      `counting per thread; an arithmetic loop (the control) ${fmt(n("native_arithmetic_2_threads"))}`,
    target: 1.8,
    atLeast: true,
  },
  {
    name: "2 threads ÷ 1, native exports of their own buffers (the same figure in both columns)",
    unit: "×",
    deno: n("native_export_2_threads"),
    bun: n("native_export_2_threads"),
    ref: none,
    refText: "throughput, wall clock",
    target: 1.8,
    atLeast: true,
  },
  {
    name: "2 Workers ÷ 1, imports of their own tensors",
    unit: "×",
    deno: d("workers_import_2_threads"),
    bun: b("workers_import_2_threads"),
    ref: none,
    refText: `throughput, wall clock; an arithmetic loop (the control) ${fmt(d("workers_arithmetic_2_threads"))} / ${
      fmt(b("workers_arithmetic_2_threads"))
    }`,
    target: 1.6,
    atLeast: true,
  },
  {
    name: "2 Workers ÷ 1, exports of their own TypedArrays",
    unit: "×",
    deno: d("workers_export_2_threads"),
    bun: b("workers_export_2_threads"),
    ref: none,
    refText: "throughput, wall clock",
    target: 1.6,
    atLeast: true,
  },
  {
    name: "JS → numpy → JS round trip through the bridge (thread CPU time)",
    unit: "ns",
    deno: d("roundtrip_js_numpy_js_cpu_ns"),
    bun: b("roundtrip_js_numpy_js_cpu_ns"),
    ref: [d("numpy_roundtrip_cpu_ns"), b("numpy_roundtrip_cpu_ns")],
    refText: `numpy → numpy → numpy (\`from_dlpack\` twice) in the same process, batches interleaved: ${
      fmt(d("numpy_roundtrip_cpu_ns"))
    } / ${fmt(b("numpy_roundtrip_cpu_ns"))} ns; wall clock: ${fmt(d("roundtrip_js_numpy_js_ns"))} / ${
      fmt(b("roundtrip_js_numpy_js_ns"))
    } ns against plain Python's ${fmt(p("numpy_roundtrip_ns"))} ns`,
    target: 2,
    bridge: true,
  },
  {
    name: "`fromPython(t)` of a torch tensor (1 KiB), view disposed",
    unit: "ns",
    deno: d("from_python_torch_ns"),
    bun: b("from_python_torch_ns"),
    ref: [d("torch_from_dlpack_torch_ns"), b("torch_from_dlpack_torch_ns")],
    refText: `\`torch.from_dlpack(t)\` of a torch tensor in the same process (timeit in the embedded interpreter: ${
      fmt(d("torch_from_dlpack_torch_ns"))
    } / ${fmt(b("torch_from_dlpack_torch_ns"))} ns; plain Python ${fmt(p("torch_from_dlpack_ns"))} ns)`,
    target: 1,
    bridge: true,
    skipped: torchSkipped(),
  },
  {
    name: "`torch.from_dlpack(toPython(x))` (1 KiB), both objects released",
    unit: "ns",
    deno: d("torch_from_dlpack_js_export_ns"),
    bun: b("torch_from_dlpack_js_export_ns"),
    ref: [d("torch_from_dlpack_torch_ns"), b("torch_from_dlpack_torch_ns")],
    refText: `the same \`torch.from_dlpack(t)\` of a torch tensor (called from JS: ${
      fmt(d("torch_from_dlpack_torch_from_js_ns"))
    } / ${fmt(b("torch_from_dlpack_torch_from_js_ns"))} ns); \`torch.from_dlpack\` of a ready DLPackTensor ${
      fmt(d("torch_from_dlpack_dlpacktensor_ns"))
    } / ${fmt(b("torch_from_dlpack_dlpacktensor_ns"))} ns; \`toPython(x, py, { as: torch.Tensor })\` ${
      fmt(d("to_python_as_torch_ns"))
    } / ${fmt(b("to_python_as_torch_ns"))} ns`,
    target: 1.5,
    bridge: true,
    skipped: torchSkipped(),
  },
  {
    name: "import + dispose of a tensor in memory the library has not seen (a page mapped for each)",
    unit: "ns",
    deno: d("import_miss_ns"),
    bun: b("import_miss_ns"),
    ref: [d("import_known_ns"), b("import_known_ns")],
    refText: `a known-mapping import + dispose, batches interleaved, ${fmt(d("import_known_ns"))} / ${
      fmt(b("import_known_ns"))
    } ns (${fmt(d("mappings"))} mappings)`,
    target: 30,
  },
  {
    name: "the same with 20,000 mappings more",
    unit: "ns",
    deno: d("import_miss_20k_ns"),
    bun: b("import_miss_20k_ns"),
    ref: both(2000),
    refText: `2 µs; ${fmt(d("import_miss_20k_ns") / d("import_known_20k_ns"))} / ${
      fmt(b("import_miss_20k_ns") / b("import_known_20k_ns"))
    } × the known-mapping import (${fmt(d("mappings_20k"))} mappings)`,
    target: 1,
  },
  {
    name: "import + dispose at 1 GiB ÷ at 1 KiB",
    unit: "×",
    deno: d("import_dispose_1GiB_ns") / d("import_dispose_1KiB_ns"),
    bun: b("import_dispose_1GiB_ns") / b("import_dispose_1KiB_ns"),
    ref: none,
    refText: "size independence (1 MiB: " +
      `${fmt(d("import_dispose_1MiB_ns"))} / ${fmt(b("import_dispose_1MiB_ns"))} ns)`,
    target: 1.1,
  },
  {
    name: "RSS growth importing and wrapping 1 GiB",
    unit: "MiB",
    deno: d("rss_growth_1GiB_import_bytes") / MiB,
    bun: b("rss_growth_1GiB_import_bytes") / MiB,
    ref: none,
    refText: "nothing copied or touched",
    target: 1,
  },
  {
    name: "1,000,000 import/dispose cycles",
    unit: "M/s",
    deno: d("cycles_1M_per_second") / 1e6,
    bun: b("cycles_1M_per_second") / 1e6,
    ref: none,
    refText: "throughput",
  },
  {
    name: "RSS growth over those 1M cycles",
    unit: "MiB",
    deno: d("cycles_1M_rss_growth_bytes") / MiB,
    bun: b("cycles_1M_rss_growth_bytes") / MiB,
    ref: none,
    refText: "stats() back at zero",
    target: 16,
  },
  {
    name: "loadSafetensors of a 1 GiB file (256 float32 tensors), every tensor a view over one mapping",
    unit: "ms",
    deno: d("io_load_1GiB_ms"),
    bun: b("io_load_1GiB_ms"),
    ref: both(p("st_load_file_1GiB_ms")),
    refText: `\`safetensors.numpy.load_file\` ${fmt(p("st_load_file_1GiB_ms"))} ms (reads every tensor into memory)`,
    target: 0.05,
    skipped: ioSkipped(),
  },
  {
    name: "RSS growth holding those 256 views",
    unit: "MiB",
    deno: d("io_load_1GiB_rss_bytes") / 1048576,
    bun: b("io_load_1GiB_rss_bytes") / 1048576,
    ref: both(p("st_load_file_1GiB_rss_bytes") / 1048576),
    refText: `\`load_file\`'s arrays: ${fmt(p("st_load_file_1GiB_rss_bytes") / 1048576)} MiB`,
    target: 0.03,
    skipped: ioSkipped(),
  },
  {
    name: "openSafetensors of that file, get() of one tensor, its last element read",
    unit: "ms",
    deno: d("io_open_get_one_ms"),
    bun: b("io_open_get_one_ms"),
    ref: both(p("st_safe_open_one_ms")),
    refText: `\`safe_open(path, "np")\` and \`get_tensor\` of one (a 4 MiB copy) ${fmt(p("st_safe_open_one_ms"))} ms`,
    target: 1,
    skipped: ioSkipped(),
  },
  {
    name: "peak RSS growth, 1,000,000 imports never disposed (a timer turn every 10,000)",
    unit: "MiB",
    deno: d("undisposed_imports_peak_bytes") / MiB,
    bun: b("undisposed_imports_peak_bytes") / MiB,
    ref: none,
    refText: "the backstop releases what nobody disposed; numpy holds nothing after each array's last reference",
    target: 64,
  },
  {
    name: "peak RSS growth, 1,000,000 exports never disposed (a timer turn every 10,000)",
    unit: "MiB",
    deno: d("undisposed_exports_peak_bytes") / MiB,
    bun: b("undisposed_exports_peak_bytes") / MiB,
    ref: none,
    refText: "the same for exports of one TypedArray",
    target: 128,
  },
  {
    name: "import + dispose with 100,000 live views ÷ without",
    unit: "×",
    deno: d("import_dispose_100k_live_ns") / d("import_dispose_no_live_ns"),
    bun: b("import_dispose_100k_live_ns") / b("import_dispose_no_live_ns"),
    ref: none,
    refText: `thread CPU time, alternated: ${fmt(d("import_dispose_100k_live_ns"))} / ${
      fmt(b("import_dispose_100k_live_ns"))
    } ns with them, ${fmt(d("import_dispose_no_live_ns"))} / ${fmt(b("import_dispose_no_live_ns"))} ns without`,
    target: 1.3,
  },
  {
    name: "copyFrom() of a contiguous 64 MiB view into a touched one",
    unit: "GB/s",
    deno: d("memcpy_GBps"),
    bun: b("memcpy_GBps"),
    ref: both(p("numpy_memcpy_GBps")),
    refText: `numpy \`np.copyto\` into a preallocated array ${fmt(p("numpy_memcpy_GBps"))} GB/s (thread CPU time, ` +
      "written sources on both sides)",
    target: 1.3,
    atLeast: true,
  },
  {
    name: "copyFrom() of a contiguous 1 MiB view into a touched one (below the size copies stream from)",
    unit: "GB/s",
    deno: d("small_memcpy_GBps"),
    bun: b("small_memcpy_GBps"),
    ref: both(p("numpy_small_memcpy_GBps")),
    refText: `numpy \`np.copyto\` ${fmt(p("numpy_small_memcpy_GBps"))} GB/s`,
    target: 0.95,
    atLeast: true,
  },
  {
    name: "copyFrom() of a[:, ::2] into a touched array, 4096×4096 float32",
    unit: "GB/s",
    deno: d("copy_into_every_other_column_GBps"),
    bun: b("copy_into_every_other_column_GBps"),
    ref: [d("memcpy_GBps"), b("memcpy_GBps")],
    refText: "contiguous copyFrom() of the same run",
    target: 0.5,
    atLeast: true,
  },
  {
    name: "copyFrom() of a.T into a touched array, 4096×4096 float32",
    unit: "GB/s",
    deno: d("copy_into_transposed_GBps"),
    bun: b("copy_into_transposed_GBps"),
    ref: [d("memcpy_GBps"), b("memcpy_GBps")],
    refText: `contiguous copyFrom() of the same run (numpy's \`np.copyto(dst, a.T)\` reaches ${
      fmt(p("numpy_copy_into_transposed_GBps") / p("numpy_memcpy_GBps"))
    } of its copyto)`,
    target: 0.8,
    atLeast: true,
  },
  {
    name: "copy() of a contiguous 64 MiB view (fresh memory)",
    unit: "GB/s",
    deno: d("alloc_memcpy_GBps"),
    bun: b("alloc_memcpy_GBps"),
    ref: both(p("numpy_alloc_memcpy_GBps")),
    refText: `numpy \`a.copy()\` ${fmt(p("numpy_alloc_memcpy_GBps"))} GB/s: first touch of fresh pages dominates`,
  },
  {
    name: "copy() of a[:, ::2] (fresh memory)",
    unit: "GB/s",
    deno: d("copy_every_other_column_GBps"),
    bun: b("copy_every_other_column_GBps"),
    ref: [d("alloc_memcpy_GBps"), b("alloc_memcpy_GBps")],
    refText: "copy() of the contiguous view, same run",
  },
  {
    name: "copy() of a.T (fresh memory)",
    unit: "GB/s",
    deno: d("copy_transposed_GBps"),
    bun: b("copy_transposed_GBps"),
    ref: [d("alloc_memcpy_GBps"), b("alloc_memcpy_GBps")],
    refText: `copy() of the contiguous view, same run (numpy's \`ascontiguousarray(a.T)\` reaches ${
      fmt(p("numpy_copy_transposed_GBps") / p("numpy_alloc_memcpy_GBps"))
    } of its \`a.copy()\`)`,
    target: 0.7,
    atLeast: true,
  },
];

function fmt(v: number): string {
  if (!Number.isFinite(v)) return "—";
  return Math.abs(v) >= 100 ? v.toFixed(0) : Math.abs(v) >= 10 ? v.toFixed(1) : v.toFixed(2);
}

const lines = [
  "| case | Deno | Bun | compared with | Deno ratio | Bun ratio | target |",
  "|---|---|---|---|---|---|---|",
];
const misses: string[] = [];
for (const row of rows) {
  if (BRIDGE_ONLY && !row.bridge) continue;
  const shared: Target | undefined = row.target === undefined
    ? undefined
    : { limit: row.target, ...(row.atLeast ? { atLeast: true } : {}) };
  const targets = row.targets ?? [shared, shared];
  const hasTarget = targets[0] !== undefined || targets[1] !== undefined;
  if (row.skipped !== undefined) {
    lines.push(`| ${row.name} (${row.unit}) | — | — | ${row.skipped} | | | ${hasTarget ? "skipped" : ""} |`);
    continue;
  }
  const ratio = (v: number, ref: number) => (Number.isFinite(ref) ? v / ref : v);
  const rd = ratio(row.deno, row.ref[0]);
  const rb = ratio(row.bun, row.ref[1]);
  let target = "";
  if (hasTarget) {
    const figures: [number, number][] = [[row.deno, rd], [row.bun, rb]];
    const verdicts = targets.map((t, k) => {
      if (t === undefined) return "—";
      const [figure, r] = figures[k]!;
      const value = t.absolute ? figure : r;
      const ok = t.atLeast ? value >= t.limit : value <= t.limit;
      if (!ok) misses.push(`${row.name} (${k === 0 ? "Deno" : "Bun"})`);
      return ok ? "met" : "missed";
    });
    const spell = (t: Target | undefined) =>
      t === undefined ? "none" : `${t.atLeast ? "≥" : "≤"} ${t.limit}${t.absolute ? ` ${row.unit}` : ""}`;
    const same = targets[0]?.limit === targets[1]?.limit && targets[0]?.absolute === targets[1]?.absolute;
    const spelled = same ? spell(targets[0]) : `Deno ${spell(targets[0])}, Bun ${spell(targets[1])}`;
    target = `${spelled}: ${verdicts[0]} / ${verdicts[1]}`;
  }
  const shown = (r: number, ref: number) => (Number.isFinite(ref) ? fmt(r) : "");
  lines.push(
    `| ${row.name} (${row.unit}) | ${fmt(row.deno)} | ${fmt(row.bun)} | ${row.refText} | ${shown(rd, row.ref[0])} | ${
      shown(rb, row.ref[1])
    } | ${target} |`,
  );
}
const extras = BRIDGE_ONLY ? [] : [
  `The 1M cycles left stats() at zero: Deno ${rounds.deno.every((r) => r.cycles_1M_stats_zero)}, Bun ${
    rounds.bun.every((r) => r.cycles_1M_stats_zero)
  }; ` +
  `deleters called: ${d("cycles_1M_deleters")} / ${b("cycles_1M_deleters")}.`,
  `Peers for context: JAX \`__dlpack__\` ${fmt(p("jax_export_ns"))} ns, \`jax.dlpack.from_dlpack(numpy)\` ${
    fmt(p("jax_from_dlpack_ns"))
  } ns, ` +
  `pyarrow \`__dlpack__\` ${fmt(p("pyarrow_export_ns"))} ns, \`np.from_dlpack(pyarrow)\` ${
    fmt(p("pyarrow_to_numpy_ns"))
  } ns.`,
];
const date = new Date().toISOString().slice(0, 10);
const table = [
  `Measured ${date} by \`deno task bench\` on ${machine} (${versions}); medians of ${ROUNDS} interleaved rounds, each a median of 7 batches.`,
  "",
  ...lines,
  "",
  ...extras,
  misses.length === 0 ? "Every target met in this run." : `Targets missed in this run: ${misses.join("; ")}.`,
].join("\n");
console.log(table);
if (!BRIDGE_ONLY) {
  writeFileSync(`${root}bench/results.json`, JSON.stringify({ date, machine, versions, rounds }, null, 1));
  if (Deno.args.includes("--docs")) replaceBetweenMarkers(`${root}docs/performance.md`, "bench", table);
}
