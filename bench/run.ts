// `deno task bench`: runs bench/cases.ts under Deno and under Bun and bench/peers.py (numpy, JAX,
// pyarrow, torch with timeit) in ONE run on this machine, interleaved round by round, takes the
// median of each figure across rounds, prints the table of medians and ratios against the peers,
// writes bench/results.json and, with --docs, the table in docs/performance.md. With
// --only=bridge, runs and prints only the bridge rows (bench/bridge.ts) and writes nothing.
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

function run(cmd: string, args: string[]): Record<string, number | string | boolean> {
  const out = new Deno.Command(cmd, { args, cwd: root, env, stdout: "piped", stderr: "piped" }).outputSync();
  const text = new TextDecoder().decode(out.stdout).trim().split("\n").pop() ?? "";
  if (out.code !== 0) {
    throw new Error(`${cmd} ${args.join(" ")} failed: ${new TextDecoder().decode(out.stderr).slice(-2000)}`);
  }
  return JSON.parse(text);
}

type Side = "deno" | "bun" | "python";
const rounds: Record<Side, Array<Record<string, number | string | boolean>>> = { deno: [], bun: [], python: [] };
const cases = BRIDGE_ONLY ? "bench/bridge.ts" : "bench/cases.ts";
const peerArgs = BRIDGE_ONLY ? ["bench/peers.py", "--only=bridge"] : ["bench/peers.py"];
for (let r = 0; r < ROUNDS; r++) {
  console.error(`round ${r + 1}/${ROUNDS}`);
  rounds.deno.push(run(`${tools}/deno`, ["run", "-A", "--v8-flags=--expose-gc", cases]));
  rounds.python.push(run("python3", peerArgs));
  rounds.bun.push(run(`${tools}/bun`, ["run", cases]));
}

function median(side: Side, key: string): number {
  const values = rounds[side].map((r) => r[key]).filter((v): v is number => typeof v === "number").sort((a, b) =>
    a - b
  );
  return values.length === 0 ? NaN : values[Math.floor(values.length / 2)]!;
}

const cpu = readFileSync("/proc/cpuinfo", "utf8").match(/model name\s*:\s*(.+)/)?.[1] ?? "unknown CPU";
const memory = Math.round(
  Number(readFileSync("/proc/meminfo", "utf8").match(/MemTotal:\s*(\d+)/)?.[1] ?? 0) / 1024 / 1024,
);
const machine = `${cpu}, ${navigator.hardwareConcurrency} cores, ${memory} GiB, ${Deno.build.os} ${Deno.build.arch}`;
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
  /** The embedded-Python bridge rows (all that --only=bridge runs). */
  bridge?: boolean;
  /** Why the row was not measured (a peer that is not installed). */
  skipped?: string | undefined;
}

const d = (k: string) => median("deno", k);
const b = (k: string) => median("bun", k);
const p = (k: string) => median("python", k);
const both = (v: number): [number, number] => [v, v];
const none: [number, number] = [NaN, NaN];

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
    name: "import + array()",
    unit: "ns",
    deno: d("import_array_ns"),
    bun: b("import_array_ns"),
    ref: [d("bare_arraybuffer_ns"), b("bare_arraybuffer_ns")],
    refText: `bare zero-copy ArrayBuffer (Deno getArrayBuffer ${fmt(d("bare_arraybuffer_ns"))} ns, Bun toArrayBuffer ${
      fmt(b("bare_arraybuffer_ns"))
    } ns); with dispose (detaching the array): ${fmt(d("import_array_dispose_ns"))} / ${
      fmt(b("import_array_dispose_ns"))
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
    name: "export of a TypedArray made for it (`new Float32Array(256)` each time)",
    unit: "ns",
    deno: d("export_fresh_ns"),
    bun: b("export_fresh_ns"),
    ref: both(p("numpy_export_fresh_ns")),
    refText: `numpy \`np.empty(256).__dlpack__()\` ${
      fmt(p("numpy_export_fresh_ns"))
    } ns; \`new Float32Array(256)\` alone: ${fmt(d("alloc_f32_ns"))} / ${fmt(b("alloc_f32_ns"))} ns`,
    target: 1,
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
    target: 3,
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
    deno: d("rss_growth_1GiB_import_bytes") / 1048576,
    bun: b("rss_growth_1GiB_import_bytes") / 1048576,
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
    deno: d("cycles_1M_rss_growth_bytes") / 1048576,
    bun: b("cycles_1M_rss_growth_bytes") / 1048576,
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
    name: "memcpy: copyFrom() of a contiguous 64 MiB view into a touched one",
    unit: "GB/s",
    deno: d("memcpy_GBps"),
    bun: b("memcpy_GBps"),
    ref: both(p("numpy_memcpy_GBps")),
    refText: `numpy copyto into a preallocated array ${fmt(p("numpy_memcpy_GBps"))} GB/s`,
  },
  {
    name: "copyFrom() of a[:, ::2] into a touched array, 4096×4096 float32",
    unit: "GB/s",
    deno: d("copy_into_every_other_column_GBps"),
    bun: b("copy_into_every_other_column_GBps"),
    ref: [d("memcpy_GBps"), b("memcpy_GBps")],
    refText: "memcpy (copyFrom, contiguous) of the same run",
    target: 0.5,
    atLeast: true,
  },
  {
    name: "copyFrom() of a.T into a touched array, 4096×4096 float32",
    unit: "GB/s",
    deno: d("copy_into_transposed_GBps"),
    bun: b("copy_into_transposed_GBps"),
    ref: [d("memcpy_GBps"), b("memcpy_GBps")],
    refText: `memcpy (copyFrom, contiguous) of the same run (numpy's \`np.copyto(dst, a.T)\` reaches ${
      fmt(p("numpy_copy_into_transposed_GBps") / p("numpy_memcpy_GBps"))
    } of its copyto)`,
    target: 0.7,
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
  if (row.skipped !== undefined) {
    lines.push(
      `| ${row.name} (${row.unit}) | — | — | ${row.skipped} | | | ${row.target === undefined ? "" : "skipped"} |`,
    );
    continue;
  }
  const ratio = (v: number, ref: number) => (Number.isFinite(ref) ? v / ref : v);
  const rd = ratio(row.deno, row.ref[0]);
  const rb = ratio(row.bun, row.ref[1]);
  let target = "";
  if (row.target !== undefined) {
    const ok = (r: number) => (row.atLeast ? r >= row.target! : r <= row.target!);
    target = `${row.atLeast ? "≥" : "≤"} ${row.target}: ${ok(rd) ? "met" : "missed"} / ${ok(rb) ? "met" : "missed"}`;
    if (!ok(rd)) misses.push(`${row.name} (Deno)`);
    if (!ok(rb)) misses.push(`${row.name} (Bun)`);
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
