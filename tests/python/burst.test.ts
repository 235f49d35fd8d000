// The GIL burst: the bridge keeps the GIL from a call to the end of the synchronous run of JS that
// made it, lets go of it when JS yields (so Python threads run between tasks), and a Worker
// terminated in the middle of a burst does not leave the interpreter locked (checked in a child
// process with a time limit, so a deadlock fails the test instead of hanging the runner).
import assert from "node:assert/strict";
import { mkdirSync, rmSync, writeFileSync } from "node:fs";
import { noPython, python } from "../support/python.ts";
import { repoRoot, runIsolated, runtimeName, selfExecutable, spawn, test } from "../support/harness.ts";

const skip = { skip: noPython, timeout: 120_000 };
const sleep = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms));

test("a Python thread waits during a synchronous run of JS and runs when JS yields", async () => {
  const py = python();
  py.exec(
    "import threading, time\n" +
      "burst_stop = [False]\n" +
      "burst_n = [0]\n" +
      "def burst_spin():\n" +
      "    while not burst_stop[0]:\n" +
      "        burst_n[0] += 1\n" +
      "        time.sleep(0)\n" +
      "burst_thread = threading.Thread(target=burst_spin)\n" +
      "burst_thread.start()",
  );
  try {
    await sleep(50);
    const count = () => py.eval("burst_n[0]").toJS() as number;
    const first = count();
    assert.ok(first > 0, "the thread ran while JS awaited");
    // One synchronous run: the bridge holds the GIL throughout, so the thread cannot step while
    // JS works (it may step while the bridge runs Python bytecode: Python's switch interval).
    // Free, it would loop thousands of times in 30 ms.
    const until = performance.now() + 30;
    while (performance.now() < until) { /* busy JS, no bridge call */ }
    const during = count() - first;
    assert.ok(during < 20, `the thread waited for the end of the synchronous run (${during} steps)`);
    await sleep(50);
    assert.ok(count() > first, "and ran again once JS yielded");
  } finally {
    py.exec("burst_stop[0] = True");
    await sleep(10);
    py.exec("burst_thread.join()\ndel burst_thread, burst_spin, burst_n, burst_stop");
  }
}, skip);

/** Makes and destroys one subinterpreter (the module's name changed in CPython 3.13). */
const SUBINTERPRETER =
  `py.exec("try:\\n import _interpreters as _si\\nexcept ImportError:\\n import _xxsubinterpreters as _si\\n_si.destroy(_si.create())\\ndel _si");`;

for (const subinterpreter of [false, true]) {
  const made = subinterpreter ? ", after a subinterpreter was made" : "";
  test(
    `inside a burst whose GIL another library's call let go, bridge calls take it back${made} (child process)`,
    () => {
      // The natives skip PyGILState inside this thread's burst only while the thread state says the
      // GIL is held: a library that let it go (PyEval_SaveThread) must not leave them running without
      // it. Once a subinterpreter exists, PyGILState_Check answers yes on every thread, so it cannot
      // be what says so.
      const source = `
import { fromPython, openPython, toPython } from "${repoRoot}/python.ts";
import { openLibrary } from "${repoRoot}/ffi/mod.ts";
const py = openPython();
const np = py.import("numpy");
const fromDlpack = np.get("from_dlpack");
const x = new Float32Array([1, 2, 3]);
${subinterpreter ? SUBINTERPRETER : ""}
toPython(x, py).dispose(); // opens this synchronous run's burst
const capi = openLibrary(py.library, {
  PyEval_SaveThread: { args: [], returns: "usize" },
  PyEval_RestoreThread: { args: ["usize"], returns: "void" },
}).symbols;
const saved = capi.PyEval_SaveThread();
let total = 0;
for (let i = 0; i < 100; i++) {
  const t = toPython(x, py);
  const b = fromDlpack.call(t);
  const v = fromPython(b);
  total += v.toArray()[2];
  v.dispose();
  b.dispose();
  t.dispose();
}
capi.PyEval_RestoreThread(saved);
using n = py.eval("1 + 2");
console.log("round trips " + total + " then " + n.toJS());
`;
      const out = runIsolated(source);
      assert.equal(out.code, 0, `exit ${out.code}: ${out.stderr.slice(-3000)}`);
      assert.match(out.stdout, /round trips 300 then 3/, out.stdout + out.stderr.slice(-2000));
    },
    skip,
  );
}

/** Runs `main` in a fresh process of this runtime, with `worker` as the module at `WORKER_URL`
 * (a placeholder in `main`), killed after 60 s; fails with the child's output unless it printed
 * `expected`. */
async function childRun(main: string, worker: string, expected: RegExp): Promise<void> {
  const dir = `${repoRoot}/.scratch/isolated`;
  mkdirSync(dir, { recursive: true });
  const stem = `${dir}/${runtimeName}-burst-${Date.now()}-${Math.random().toString(36).slice(2)}`;
  writeFileSync(`${stem}-worker.ts`, worker);
  writeFileSync(`${stem}.ts`, main.replace("WORKER_URL", `file://${stem}-worker.ts`));
  try {
    const args = runtimeName === "deno" ? ["run", "--allow-all", `${stem}.ts`] : ["run", `${stem}.ts`];
    const env: Record<string, string> = {};
    for (const name of ["PYTHONPATH", "DLPACK_PYTHON", "HOME"]) {
      const value = (globalThis as { process?: { env: Record<string, string | undefined> } }).process?.env[name] ??
        (globalThis as { Deno?: { env: { get(n: string): string | undefined } } }).Deno?.env.get(name);
      if (value !== undefined) env[name] = value;
    }
    const run = await spawn(selfExecutable(), args, { env, timeoutMs: 60_000 });
    assert.notEqual(run.code, 124, `the child deadlocked on the GIL\n${run.stdout}\n${run.stderr.slice(-2000)}`);
    assert.match(run.stdout, expected, `exit ${run.code}\n${run.stdout}\n${run.stderr.slice(-2000)}`);
  } finally {
    rmSync(`${stem}.ts`, { force: true });
    rmSync(`${stem}-worker.ts`, { force: true });
  }
}

test("a Worker and the main thread use the bridge at once, each burst ending when its JS yields", async () => {
  await childRun(
    `import { fromPython, openPython, toPython } from "${repoRoot}/python.ts";
const py = openPython();
py.exec("import numpy as np");
const worker = new Worker(new URL("WORKER_URL"), { type: "module" });
const done = new Promise((resolve) => worker.onmessage = (e) => resolve(e.data));
const x = new Float64Array([1, 2, 3]);
using from = py.eval("np.from_dlpack");
let sum = 0;
for (let round = 0; round < 50; round++) {
  for (let i = 0; i < 20; i++) {
    using t = toPython(x, py);
    using a = from.call(t);
    using v = fromPython(a);
    sum += v.get(2) as number;
  }
  await new Promise((resolve) => setTimeout(resolve, 0));
}
console.log("RESULT main " + sum + " worker " + await done);
worker.terminate();
`,
    `import { fromPython, openPython, toPython } from "${repoRoot}/python.ts";
const py = openPython();
py.exec("import numpy as np");
const y = new Float32Array([4, 5]);
using from = py.eval("np.from_dlpack");
let sum = 0;
for (let round = 0; round < 50; round++) {
  for (let i = 0; i < 20; i++) {
    using t = toPython(y, py);
    using a = from.call(t);
    using v = fromPython(a);
    sum += v.get(1) as number;
  }
  await new Promise((resolve) => setTimeout(resolve, 0));
}
postMessage(sum);
`,
    /RESULT main 3000 worker 5000/,
  );
}, skip);

test("a Worker terminated inside a burst lets go of the GIL (child process)", async () => {
  // Python's own thread-local keys may be cleared before the hook runs: it must not need them.
  await childRun(
    `import { openPython } from "${repoRoot}/python.ts";
const py = openPython();
const worker = new Worker(new URL("WORKER_URL"), { type: "module" });
await new Promise((resolve) => worker.onmessage = resolve);
worker.terminate();
// Waits here until the Worker's thread has ended and its thread-exit hook let go of the GIL.
console.log("RESULT " + py.eval("40 + 2").toJS());
`,
    `import { openPython } from "${repoRoot}/python.ts";
const py = openPython();
py.eval("1").dispose(); // opens a burst: this thread holds the GIL now
postMessage("waiting");
Atomics.wait(new Int32Array(new SharedArrayBuffer(4)), 0, 0); // never yields: the burst stays open
`,
    /RESULT 42/,
  );
}, {
  ...skip,
  // Deno 2.9 does not end a Worker that never yields (Atomics.wait, a busy loop): it keeps running
  // after terminate(), and so keeps its burst, as it would keep any lock it held.
  skip: noPython || (runtimeName === "deno" ? "Deno does not terminate a Worker blocked in Atomics.wait" : false),
});
