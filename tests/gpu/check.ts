// GPU verification of dlpack-ts, for a machine with an NVIDIA GPU and the CUDA driver (the device
// machine: python3 with torch, cupy, jax and numpy; no Deno, Bun or Zig there, so tests/gpu/device.sh
// unpacks a carried deno and runs this file with it). Writes gpu-results.json and gpu-results.md
// into $OUT (or the current directory) and exits non-zero when any case failed.
//
// Sections:
//   library    every "real" case of tests/cuda/device.test.ts, against the real driver (run by that
//              file in a child process, as its "real GPU" tests are)
//   bandwidth  host<->device copy bandwidth through view.copyFrom (pageable and page-locked host
//              memory, device to device), values checked after each kind of copy
//   python     PYTHON-BRIDGE cases: torch, cupy and jax CUDA tensors through the embedded CPython
//              both ways, values after device copies, and stream fencing, through issue 4's API
//              (openPython, fromPython, toPython from ../../python.ts). Where that Python or its
//              frameworks cannot be opened they are reported skipped with the reason, never passed.
import * as cuda from "../../cuda.ts";
import { type BufferView, empty, stats } from "../../mod.ts";
import { corePath, runtime } from "../../ffi/mod.ts";
import { CASE_GROUP_ENV, runScript } from "../support/harness.ts";
import { fromPython, openPython, type PyObject, type Python, toPython } from "../../python.ts";

type Status = "pass" | "fail" | "skip";
interface CaseResult {
  section: string;
  name: string;
  status: Status;
  ms: number;
  message?: string;
}

const results: CaseResult[] = [];
const bandwidth: Record<string, unknown>[] = [];
const outDir = runtime().env("OUT") ?? ".";

async function check(section: string, name: string, fn: () => unknown, skip?: string): Promise<void> {
  if (skip !== undefined) {
    results.push({ section, name, status: "skip", ms: 0, message: skip });
    console.log(`SKIP ${section}: ${name} (${skip})`);
    return;
  }
  const t0 = performance.now();
  try {
    await fn();
    results.push({ section, name, status: "pass", ms: Math.round(performance.now() - t0) });
    console.log(`PASS ${section}: ${name}`);
  } catch (error) {
    const e = error as Error;
    results.push({
      section,
      name,
      status: "fail",
      ms: Math.round(performance.now() - t0),
      message: `${e?.stack ?? e}`,
    });
    console.log(`FAIL ${section}: ${name}\n${e?.stack ?? e}`);
  }
}

function assert(condition: unknown, message: string): asserts condition {
  if (!condition) throw new Error(message);
}

// ---------------------------------------------------------------------------------------------
// Environment

const status = cuda.available();
const environment: Record<string, unknown> = {
  date: new Date().toISOString(),
  runtime: `${runtime().name} ${(globalThis as { Deno?: { version: { deno: string } } }).Deno?.version.deno ?? ""}`,
  library: corePath(),
  cuda: status,
  devices: status.available ? cuda.devices() : [],
  nvidiaSmi: runtime().env("GPU_NVIDIA_SMI") ?? null,
};
console.log(JSON.stringify(environment, null, 2));

// ---------------------------------------------------------------------------------------------
// library: the shared CUDA cases against the real driver

const noDriver = status.available ? undefined : `no CUDA driver: ${status.reason}`;
const deviceCases = new URL("../cuda/device.test.ts", import.meta.url).pathname;
const child = runScript(deviceCases, { [CASE_GROUP_ENV]: "real" });
const reported = child.stdout.split("\n").filter((line) => line.startsWith("CUDA-CASE "));
if (reported.length === 0) {
  await check("library", "the real-driver cases of tests/cuda/device.test.ts", () => {
    throw new Error(`the child process reported no case (exit code ${child.code}):\n${child.stderr.slice(-3000)}`);
  });
}
for (const line of reported) {
  const outcome = JSON.parse(line.slice("CUDA-CASE ".length)) as { name: string; ok: boolean; message?: string };
  await check("library", outcome.name, () => {
    if (!outcome.ok) throw new Error(outcome.message);
  }, noDriver);
}

// ---------------------------------------------------------------------------------------------
// bandwidth

const MiB = 1 << 20;

function timeIt(label: string, bytes: number, op: () => void, reps = 7): void {
  op(); // warm-up (first touch, driver staging buffers)
  const times: number[] = [];
  for (let i = 0; i < reps; i++) {
    const t0 = performance.now();
    op();
    times.push(performance.now() - t0);
  }
  times.sort((a, b) => a - b);
  // reps >= 1 times.
  const best = times[0]!;
  const median = times[Math.floor(times.length / 2)]!;
  const record = {
    copy: label,
    bytes,
    bestMs: +best.toFixed(3),
    medianMs: +median.toFixed(3),
    bestGBps: +(bytes / best / 1e6).toFixed(2),
    medianGBps: +(bytes / median / 1e6).toFixed(2),
  };
  bandwidth.push(record);
  console.log(`${label}: ${record.bestGBps} GB/s best, ${record.medianGBps} GB/s median (${bytes / MiB} MiB)`);
}

function sameBytes(a: BufferView, b: BufferView): boolean {
  const x = a.array() as Uint8Array;
  const y = b.array() as Uint8Array;
  if (x.length !== y.length) return false;
  for (let i = 0; i < x.length; i += 4093) if (x[i] !== y[i]) return false;
  return x[x.length - 1] === y[y.length - 1];
}

await check("bandwidth", "host<->device copy bandwidth (256 MiB, pageable and page-locked)", () => {
  const bytes = 256 * MiB;
  using pageable = empty([bytes], "uint8");
  using pageableBack = empty([bytes], "uint8");
  using pinned = empty([bytes], "uint8", { device: { type: "cudaHost" } });
  using pinnedBack = empty([bytes], "uint8", { device: { type: "cudaHost" } });
  using device = empty([bytes], "uint8", { device: { type: "cuda", id: 0 } });
  using device2 = empty([bytes], "uint8", { device: { type: "cuda", id: 0 } });
  const a = pageable.array() as Uint8Array;
  for (let i = 0; i < a.length; i++) a[i] = (i * 2654435761) >>> 24;
  (pinned.array() as Uint8Array).set(a);

  timeIt("host->device, pageable", bytes, () => device.copyFrom(pageable));
  timeIt("device->host, pageable", bytes, () => pageableBack.copyFrom(device));
  assert(sameBytes(pageable, pageableBack), "pageable round trip changed the bytes");
  timeIt("host->device, page-locked", bytes, () => device.copyFrom(pinned));
  timeIt("device->host, page-locked", bytes, () => pinnedBack.copyFrom(device));
  assert(sameBytes(pinned, pinnedBack), "page-locked round trip changed the bytes");
  timeIt("device->device (bytes copied; read+write is twice that)", bytes, () => device2.copyFrom(device));
  (pinnedBack.array() as Uint8Array).fill(0);
  pinnedBack.copyFrom(device2);
  assert(sameBytes(pinned, pinnedBack), "device->device copy changed the bytes");
  const s = cuda.createStream();
  timeIt("host->device, page-locked, on a created stream", bytes, () => device.copyFrom(pinned, { stream: s }));
  cuda.destroyStream(s);
}, noDriver);

// ---------------------------------------------------------------------------------------------
// python: PYTHON-BRIDGE CASES, through issue 4's API (openPython, fromPython, toPython from
// ../../python.ts, as it stood when this was written: py.exec/eval/set, PyObject.toJS()). Only
// `openBridge` touches that API; if python.ts changes, adapt it there.

interface Bridge {
  exec(code: string): void;
  get(name: string): PyObject;
  set(name: string, obj: PyObject): void;
  number(expr: string): number;
  fromPython(obj: PyObject, opts?: { stream?: number | bigint }): BufferView;
  toPython(view: BufferView): PyObject;
}

function openBridge(): Bridge | string {
  let py: Python;
  try {
    py = openPython();
    py.exec("import torch, cupy, jax");
  } catch (error) {
    return `the embedded Python with torch, cupy and jax is not available: ${(error as Error).message.slice(0, 300)}`;
  }
  return {
    exec: (code) => py.exec(code),
    get: (name) => py.eval(name),
    set: (name, obj) => py.set(name, obj),
    number: (expr) => Number(py.eval(expr).toJS()),
    fromPython: (obj, opts) => fromPython(obj, opts),
    toPython: (view) => toPython(view, py),
  };
}

const bridgeOrReason = status.available ? openBridge() : noDriver!;
const py = typeof bridgeOrReason === "string" ? null : bridgeOrReason;
const pySkip = typeof bridgeOrReason === "string" ? bridgeOrReason : undefined;

function hostValues(view: BufferView): number[] {
  using h = view.toHost();
  return Array.from(h.toArray() as Float32Array, Number);
}

const iota = (n: number) => Array.from({ length: n }, (_, i) => i);

function expectValues(view: BufferView, expected: number[], what: string): void {
  const got = hostValues(view);
  assert(
    got.length === expected.length && got.every((v, i) => v === expected[i]),
    `${what}: got [${got.slice(0, 8)}...] expected [${expected.slice(0, 8)}...]`,
  );
}

await check("python", "torch CUDA tensor -> fromPython: verified cuda:0 view, values", () => {
  py!.exec("import torch\nt = torch.arange(12, dtype=torch.float32, device='cuda').reshape(3, 4)");
  using v = py!.fromPython(py!.get("t"));
  assert(v.device.type === "cuda" && v.device.id === 0, `device ${JSON.stringify(v.device)}`);
  assert(v.verified, "the driver verified torch's device pointer");
  assert(v.shape.join() === "3,4" && v.dtype === "float32", `${v.shape} ${v.dtype}`);
  expectValues(v, iota(12), "torch -> TS");
}, pySkip);

await check("python", "torch transposed (strided) CUDA tensor -> fromPython -> toHost in C order", () => {
  py!.exec("tt = torch.arange(6, dtype=torch.float32, device='cuda').reshape(2, 3).t()");
  using v = py!.fromPython(py!.get("tt"));
  assert(!v.cContiguous, "a transposed view");
  expectValues(v, [0, 3, 1, 4, 2, 5], "transposed torch -> TS");
}, pySkip);

await check("python", "cupy CUDA array -> fromPython: values", () => {
  py!.exec("import cupy\nc = cupy.arange(10, dtype=cupy.float32) * 2");
  using v = py!.fromPython(py!.get("c"));
  assert(v.device.type === "cuda" && v.verified, "verified device memory");
  expectValues(v, iota(10).map((i) => 2 * i), "cupy -> TS");
}, pySkip);

await check("python", "jax CUDA array -> fromPython (legacy capsule): values", () => {
  py!.exec("import jax, jax.numpy as jnp\nj = jnp.arange(8, dtype=jnp.float32) + 1\nj.block_until_ready()");
  using v = py!.fromPython(py!.get("j"));
  assert(v.device.type === "cuda" && v.verified, "verified device memory");
  expectValues(v, iota(8).map((i) => i + 1), "jax -> TS");
}, pySkip);

await check("python", "TS device view -> toPython -> torch.from_dlpack: zero-copy both ways", () => {
  using d = empty([16], "float32", { device: { type: "cuda", id: 0 } });
  using h = empty([16], "float32");
  (h.array() as Float32Array).set(iota(16));
  d.copyFrom(h);
  py!.set("x", py!.toPython(d));
  py!.exec("import torch\ntx = torch.from_dlpack(x)\ntotal = float(tx.sum())\ntx.mul_(3)\ntorch.cuda.synchronize()");
  assert(py!.number("total") === 120, `torch saw sum ${py!.number("total")}`);
  assert(py!.number("tx.data_ptr()") === Number(d.address), "torch aliases our device memory");
  expectValues(d, iota(16).map((i) => 3 * i), "torch's in-place write seen through our view");
  py!.exec("del tx, x");
}, pySkip);

await check("python", "TS device view -> toPython -> cupy.from_dlpack and jax.dlpack.from_dlpack", () => {
  using d = empty([5], "float32", { device: { type: "cuda", id: 0 } });
  using h = empty([5], "float32");
  (h.array() as Float32Array).set([5, 4, 3, 2, 1]);
  d.copyFrom(h);
  py!.set("y", py!.toPython(d));
  py!.exec("import cupy\ncy = cupy.from_dlpack(y)\ncsum = float(cy.sum())");
  assert(py!.number("csum") === 15, "cupy sum");
  py!.set("z", py!.toPython(d));
  py!.exec("import jax, jax.numpy as jnp\njz = jax.dlpack.from_dlpack(z)\njsum = float(jnp.sum(jz))");
  assert(py!.number("jsum") === 15, "jax sum");
  py!.exec("del cy, y, jz, z");
}, pySkip);

await check("python", "fromPython(t, { stream }): torch's pending work is fenced before our stream reads", () => {
  // Work on a torch side stream, current while __dlpack__ runs (torch fences its current stream):
  // a long sleep kernel, then the write. Our stream must wait for it.
  const ours = cuda.createStream();
  py!.exec([
    "import torch",
    "s = torch.cuda.Stream()",
    "torch.cuda.set_stream(s)",
    "torch.cuda._sleep(200_000_000)",
    "w = torch.full((1 << 20,), 7.0, device='cuda')",
  ].join("\n"));
  try {
    using v = py!.fromPython(py!.get("w"), { stream: ours });
    cuda.setProducerStream(v, ours); // the data is ready on our stream once torch fenced it
    using h = v.toHost(); // stream-ordered on `ours`, then awaited
    const a = h.array() as Float32Array;
    assert(a[0] === 7 && a[a.length - 1] === 7, `read ${a[0]} / ${a[a.length - 1]} before torch's write finished`);
  } finally {
    py!.exec("torch.cuda.set_stream(torch.cuda.default_stream())");
    cuda.destroyStream(ours);
  }
}, pySkip);

await check("python", "toPython(view) with a producer stream: torch's consumer stream waits for it", () => {
  // Torch writes into our memory on stream s (after a long sleep); we record s as the view's
  // producer stream; torch.from_dlpack on another stream c must then see the writes.
  using d = empty([1 << 20], "float32", { device: { type: "cuda", id: 0 } });
  py!.set("dx", py!.toPython(d));
  py!.exec([
    "import torch",
    "s2 = torch.cuda.Stream()",
    "alias = torch.from_dlpack(dx)",
    "with torch.cuda.stream(s2):",
    "    torch.cuda._sleep(200_000_000)",
    "    alias.fill_(5.0)",
    "producer = s2.cuda_stream",
  ].join("\n"));
  cuda.setProducerStream(d, BigInt(py!.number("producer")));
  py!.set("dx2", py!.toPython(d));
  py!.exec([
    "c = torch.cuda.Stream()",
    "with torch.cuda.stream(c):",
    "    seen = torch.from_dlpack(dx2)",
    "    first, last = float(seen[0]), float(seen[-1])",
  ].join("\n"));
  assert(py!.number("first") === 5 && py!.number("last") === 5, "torch's consumer stream read before the producer");
  py!.exec("del alias, seen, dx, dx2");
}, pySkip);

await check("python", "nothing leaks: every import, export and device allocation released", () => {
  py!.exec("import gc\ngc.collect()\ntorch.cuda.synchronize()");
  const s = stats();
  const c = cuda.cudaStats();
  assert(s.exports === 0 && s.imports === 0, `live imports ${s.imports}, exports ${s.exports}`);
  assert(c.deviceAllocations === 0 && c.freeFailures === 0, JSON.stringify(c));
}, pySkip);

// ---------------------------------------------------------------------------------------------
// Results

const counts = { pass: 0, fail: 0, skip: 0 };
for (const r of results) counts[r.status]++;
const report = { environment, counts, results, bandwidth };
const lines = [
  `# dlpack-ts GPU check, ${environment.date}`,
  "",
  `Devices: ${
    (environment.devices as cuda.CudaDevice[]).map((d) =>
      `${d.id}: ${d.name} (cc ${d.computeCapability.join(".")}, ${d.pciBusId})`
    ).join("; ") || "none"
  }`,
  `Driver: ${status.available ? status.driverVersion : status.reason}; runtime: ${environment.runtime}`,
  "",
  `${counts.pass} passed, ${counts.fail} failed, ${counts.skip} skipped`,
  "",
  "| section | case | result |",
  "| --- | --- | --- |",
  ...results.map((r) => `| ${r.section} | ${r.name} | ${r.status}${r.status === "skip" ? `: ${r.message}` : ""} |`),
  "",
  "| copy | best GB/s | median GB/s |",
  "| --- | --- | --- |",
  ...bandwidth.map((b) => `| ${b.copy} | ${b.bestGBps} | ${b.medianGBps} |`),
  "",
];
const write = (name: string, text: string) =>
  (globalThis as unknown as { Deno: { writeTextFileSync(p: string, t: string): void } }).Deno.writeTextFileSync(
    `${outDir}/${name}`,
    text,
  );
write("gpu-results.json", JSON.stringify(report, null, 2) + "\n");
write("gpu-results.md", lines.join("\n"));
console.log(`\n${counts.pass} passed, ${counts.fail} failed, ${counts.skip} skipped`);
// 1: a case failed; 3: no driver here, so nothing was verified (the results file says why).
const exitCode = counts.fail > 0 ? 1 : status.available ? 0 : 3;
(globalThis as unknown as { Deno: { exit(code: number): never } }).Deno.exit(exitCode);
