// The Python bridge against handles and built-ins that lie: `{ handle }` objects that are not Python
// objects (checked natively against the process's mappings before anything dereferences them),
// replaced getters of the library's own classes, replaced built-ins after load, an exhausted stack
// right after fromPython took a tensor, and Deno's env permission for DLPACK_PYTHON. Crash cases run
// in a child process.
import assert from "node:assert/strict";
import { localBuildPath } from "../../ffi/mod.ts";
import { runtime } from "../../ffi/mod.ts";
import { noPython } from "../support/python.ts";
import { repoRoot, runIsolated, runtimeName, spawn, test, tool } from "../support/harness.ts";

const skip = { skip: noPython, timeout: 120_000 };

/** Runs `body` in a fresh process with `dl`, `py`, `fromPython`, `toPython`, `attempt` and `out`;
 * returns what it put in `out`, or fails with the child's output when it crashed. */
function isolated(body: string): Record<string, unknown> {
  const source = `
import * as dl from "${repoRoot}/mod.ts";
import { fromPython, openPython, PyObject, Python, toPython } from "${repoRoot}/python.ts";
const py = openPython();
const out = {};
const stringify = JSON.stringify;
const attempt = (f) => {
  try {
    const r = f();
    return r instanceof PyObject ? "PyObject" : r instanceof dl.BufferView ? "view " + r.dispose() : r;
  } catch (error) {
    return error instanceof dl.DLPackError ? error.code + ": " + error.message : "other: " + error;
  }
};
void fromPython; void toPython; void PyObject; void Python; void attempt;
${body}
console.log("RESULT " + stringify(out, (_, v) => typeof v === "bigint" ? String(v) : v));
`;
  const run = runIsolated(source, { gc: true });
  const line = run.stdout.split("\n").find((l) => l.startsWith("RESULT "));
  assert.ok(
    run.code === 0 && line !== undefined,
    `the child exited with ${run.code}\nstdout: ${run.stdout.slice(-2000)}\nstderr: ${run.stderr.slice(-3000)}`,
  );
  return JSON.parse(line.slice("RESULT ".length));
}

test("{ handle } objects that are not Python objects are refused before any dereference", () => {
  const out = isolated(`
// Native memory to forge objects in: word 1 of an object is its type pointer.
const block = dl.zeros([256], "float64");
const words = new BigUint64Array(block.array().buffer, 0, 256);
const base = block.address;
words[1] = 0x10n; // object at base: its type is unmapped
words[17] = base + 512n; // object at base + 128: its type at base + 512 ...
words[65] = 0x20n; // ... whose own type is unmapped
words[33] = base + 768n; // object at base + 256: its type's chain loops without reaching type
words[97] = base + 768n;
const fakes = {
  page1: { handle: 4096 },
  high: { handle: 2 ** 46 },
  top: { handle: 2n ** 47n - 16n },
  misaligned: { handle: base + 3n },
  typeUnmapped: { handle: base },
  metatypeUnmapped: { handle: base + 128n },
  typeLoop: { handle: base + 256n },
};
const id = py.eval("id");
const results = {};
for (const [name, fake] of Object.entries(fakes)) {
  results[name] = [
    attempt(() => py.wrap(fake)),
    attempt(() => py.set("x", fake)),
    attempt(() => py.set("x", [1, [fake]])),
    attempt(() => id.call(fake)),
    attempt(() => id.callWith([], { a: fake })),
    attempt(() => fromPython(fake)),
  ];
}
out.results = results;
// Real objects of this interpreter still pass as { handle }.
const arr = py.eval("__import__('numpy').arange(4.0)");
const wrapped = py.wrap({ handle: arr.handle });
out.real = [wrapped.toJS(), id.call({ handle: arr.handle }).toJS() === id.call(arr).toJS()];
const view = fromPython({ handle: arr.handle });
out.view = [view.get(3), view.shape];
view.dispose();
out.imports = dl.stats().imports;
`);
  const results = out.results as Record<string, string[]>;
  for (const [name, codes] of Object.entries(results)) {
    assert.equal(codes.length, 6);
    for (const r of codes) {
      assert.match(r, /^argument: /, `${name}: ${r}`);
      if (name === "typeUnmapped") assert.match(r, /its type object is not in readable memory/);
      if (name === "metatypeUnmapped") assert.match(r, /the type of its type is not in readable memory/);
    }
  }
  assert.deepEqual(out.real, [[0, 1, 2, 3], true]);
  assert.deepEqual(out.view, [3, [4]]);
  assert.equal(out.imports, 0);
}, skip);

test("replaced getters of BufferView, Capsule, PyObject and Python change nothing the bridge does", () => {
  const out = isolated(`
const define = Object.defineProperty;
const ro = dl.importDLPack(dl.exportDLPack(new Float64Array([1, 2, 3]), { readonly: true }));
const arr = py.eval("__import__('numpy').arange(3.0)");
py.exec("import gc, sys");
const refsBefore = py.eval("sys.getrefcount").call(arr).toJS();
define(dl.BufferView.prototype, "access", { configurable: true, get() { return "readwrite"; } });
define(dl.Capsule.prototype, "takeAddress", { configurable: true, value() { return 8; } });
define(PyObject.prototype, "handleNumber", { configurable: true, get() { return 4096; } });
define(PyObject.prototype, "python", { configurable: true, get() { return undefined; } });
define(PyObject.prototype, "disposed", { configurable: true, get() { return false; } });
define(Python.prototype, "state", { configurable: true, get() { return {}; } });
const t = attempt(() => {
  const made = toPython(ro, py);
  py.set("t", made);
  made.dispose();
  return "made";
});
out.t = t;
out.legacy = attempt(() => {
  py.exec("try:\\n  t.__dlpack__()\\n  r = 'given'\\nexcept BufferError:\\n  r = 'refused'");
  return py.eval("r").toJS();
});
out.view = attempt(() => {
  const v = fromPython(arr);
  const r = [v.get(2), v.shape];
  v.dispose();
  return r;
});
out.wrap = attempt(() => py.wrap(arr).toJS());
// A disposed PyObject whose getter says it is not: the GC backstop must not release it again.
for (let i = 0; i < 50; i++) py.wrap(arr).dispose();
await new Promise((resolve) => setTimeout(resolve, 10));
dl.stats();
const collect = globalThis.gc ?? (() => Bun.gc(true));
for (let i = 0; i < 4; i++) collect();
await new Promise((resolve) => setTimeout(resolve, 10));
out.refs = [refsBefore, py.eval("sys.getrefcount").call(arr).toJS()];
ro.dispose();
`);
  assert.equal(out.t, "made");
  assert.equal(out.legacy, "refused", "read-only data never leaves as a legacy capsule");
  assert.deepEqual(out.view, [2, [3]]);
  assert.deepEqual(out.wrap, [0, 1, 2]);
  const [before, after] = out.refs as number[];
  assert.equal(after, before, "every reference taken was released once");
}, skip);

test("built-ins replaced after load: strings and error texts keep their true sizes", () => {
  const out = isolated(`
py.exec("import sys");
const TA = Object.getPrototypeOf(Uint8Array.prototype);
const define = Object.defineProperty;
const getDescriptor = Object.getOwnPropertyDescriptor;
const lies = [
  [TA, "length", { configurable: true, get() { return 1 << 20; } }],
  [TextEncoder.prototype, "encode", { configurable: true, writable: true, value() { return new Uint8Array(1); } }],
  [Array.prototype, Symbol.iterator, { configurable: true, writable: true, value: function* () { yield 4096; yield 4096; } }],
  [globalThis, "Number", { configurable: true, writable: true, value: () => 4096 }],
  [Number, "isSafeInteger", { configurable: true, writable: true, value: () => true }],
  [Array, "isArray", { configurable: true, writable: true, value: () => true }],
  [JSON, "parse", { configurable: true, writable: true, value: () => ({ data: [4096, false], shape: [1 << 20], typestr: "<f8" }) }],
];
const saved = lies.map(([target, key]) => getDescriptor(target, key));
const fromNumpy = py.eval("__import__('numpy').arange(5.0)");
for (let i = 0; i < lies.length; i++) define(lies[i][0], lies[i][1], lies[i][2]);
const results = {};
results.set = attempt(() => { py.set("s", "héllo"); return "ok"; });
results.error = attempt(() => py.exec("raise ValueError('x' * 100000)"));
results.eval = attempt(() => py.eval("1 + 1") !== undefined);
results.from = attempt(() => {
  const v = fromPython(fromNumpy);
  const r = [v.get(4), v.shape];
  v.dispose();
  return r;
});
for (let i = 0; i < lies.length; i++) define(lies[i][0], lies[i][1], saved[i]);
results.s = py.eval("s").toJS();
out.results = results;
`);
  const results = out.results as Record<string, unknown>;
  assert.equal(results.set, "ok");
  assert.equal(results.s, "héllo");
  assert.match(String(results.error), /^python: exec: ValueError: x+/);
  assert.ok(
    String(results.error).length < 4200,
    `the error text stays within its buffer (${String(results.error).length})`,
  );
  assert.equal(results.eval, true);
  assert.deepEqual(results.from, [4, [5]]);
}, skip);

test("an exhausted stack right after fromPython took a tensor leaks nothing", () => {
  const out = isolated(`
py.exec("import numpy as np, sys");
const arr = py.eval("np.arange(8.0)");
const tensor = toPython(new Float32Array(8), py);
const refcount = py.eval("sys.getrefcount");
const refsBefore = refcount.call(arr).toJS();
const ops = [() => fromPython(arr), () => fromPython(tensor), () => fromPython(arr, { maxVersion: null })];
const held = [];
for (let i = 0; i < 100000; i++) held[i] = null;
let count = 0, errors = 0, unwound = 0;
function tryOp(op) {
  let r = null;
  try {
    r = op();
  } catch {
    errors++;
    return;
  }
  held[count++] = r;
}
function deep(depth) {
  try {
    deep(depth + 1);
  } catch {
    // Out of stack below: each frame on the way back tries again with a little more stack.
  }
  if (unwound++ < 1500) for (let k = 0; k < ops.length; k++) tryOp(ops[k]);
}
deep(0);
for (let i = 0; i < count; i++) held[i].dispose();
await new Promise((resolve) => setTimeout(resolve, 20));
dl.stats();
out.scan = [errors, count];
out.imports = dl.stats().imports;
tensor.dispose();
out.refs = [refsBefore, refcount.call(arr).toJS()];
`);
  const [errors, count] = out.scan as [number, number];
  assert.ok(errors > 0 && count > 0, `the scan reached the stack limit and succeeded further up (${errors}, ${count})`);
  assert.equal(out.imports, 0, "no imported tensor is left behind");
  const [before, after] = out.refs as number[];
  assert.equal(after, before, "numpy's array is referenced exactly as before");
}, skip);

test("Deno permissions: a DLPACK_PYTHON that may not be read is an error naming --allow-env", async () => {
  const rt = runtime();
  const home = rt.env("HOME") ?? "/";
  const local = localBuildPath(rt.os)!;
  const script = `${repoRoot}/.scratch/python_permission_probe.ts`;
  (await import("node:fs")).mkdirSync(`${repoRoot}/.scratch`, { recursive: true });
  (await import("node:fs")).writeFileSync(
    script,
    `import { DLPackError } from "${repoRoot}/mod.ts";
import { openPython } from "${repoRoot}/python.ts";
const opts = Deno.args[0] === undefined ? undefined : { library: Deno.args[0] };
try {
  openPython(opts);
  console.log("opened");
} catch (error) {
  console.log(error instanceof DLPackError ? error.code + ": " + error.message : "other: " + error);
}
`,
  );
  const run = (flags: string[], args: string[] = []) =>
    spawn(tool("deno"), ["run", "--no-prompt", ...flags, script, ...args], {
      cwd: repoRoot,
      env: { HOME: home, DENO_DIR: rt.env("DENO_DIR") ?? `${home}/.cache/deno`, DLPACK_PYTHON: "/nonexistent/python" },
    });
  const denied = await run(["--allow-ffi", "--allow-read", "--allow-run", "--allow-env=DLPACK_LIB"]);
  assert.equal(
    denied.stdout.trim(),
    "python: cannot tell whether DLPACK_PYTHON is set: Deno denies reading it. Run with --allow-env=DLPACK_PYTHON " +
      "(or --allow-env), or pass openPython({ library: '/path/to/libpython3.X.so' }).",
    denied.stderr,
  );
  const granted = await run(["--allow-ffi", "--allow-read", "--allow-run", "--allow-env"]);
  assert.equal(granted.stdout.trim(), "python: DLPACK_PYTHON=/nonexistent/python: no such file", granted.stderr);
  const library = "/usr/lib/libpython-denied.so";
  const unreadable = await run(["--allow-ffi", `--allow-read=${local}`, "--allow-env"], [library]);
  assert.equal(
    unreadable.stdout.trim(),
    `python: ${library} (the library option): Deno denies reading it, so it cannot be checked. ` +
      `Run with --allow-read=${library} (or --allow-read).`,
    unreadable.stderr,
  );
}, { skip: runtimeName !== "deno" ? "Bun has no permission system" : false, timeout: 60_000 });
