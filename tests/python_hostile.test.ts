// Hostile use of the Python bridge: copying, pickling and re-initializing the DLPackTensor that
// toPython returns (crash cases run in a child process).
import assert from "node:assert/strict";
import { noPython } from "./support/python.ts";
import { repoRoot, runIsolated, test } from "./support/harness.ts";

const skip = { skip: noPython };
/** Runs `body` (statements using `py`, `toPython`, `fromPython`, `stats`, `out`) in a fresh process;
 * returns what it put in `out`, or fails with the child's output when it crashed. */
function isolated(body: string): Record<string, unknown> {
  const source = `
import { stats } from "${repoRoot}/mod.ts";
import { fromPython, openPython, PyObject, Python, toPython } from "${repoRoot}/python.ts";
const py = openPython();
const out: Record<string, unknown> = {};
const tried = (code: string) => {
  try {
    py.exec(code);
    return "ok";
  } catch (error) {
    return (error as Error).message;
  }
};
void fromPython; void PyObject; void Python; void tried;
${body}
console.log("RESULT " + JSON.stringify(out));
`;
  const run = runIsolated(source);
  const line = run.stdout.split("\n").find((l) => l.startsWith("RESULT "));
  assert.ok(
    run.code === 0 && line !== undefined,
    `the child exited with ${run.code}\nstdout: ${run.stdout.slice(-2000)}\nstderr: ${run.stderr.slice(-2000)}`,
  );
  return JSON.parse(line.slice("RESULT ".length));
}

test("copy.copy, copy.deepcopy and pickle of a DLPackTensor: refused or shared, released once", () => {
  const out = isolated(`
const before = stats();
const x = new Float64Array([1, 2, 3]);
const t = toPython(x, py);
py.set("t", t);
t.dispose();
py.exec("import copy, pickle, gc, numpy as np");
out.copy = tried("c = copy.copy(t)\\nassert c is t");
out.deepcopy = tried("copy.deepcopy(t)");
out.pickle = [0, 1, 2, 3, 4, 5].map((p) => tried("pickle.dumps(t, protocol=" + p + ")"));
out.reduce = tried("t.__reduce__()");
out.reduceEx = tried("t.__reduce_ex__(2)");
out.objectReduceEx = tried("object.__reduce_ex__(t, 2)");
out.getstate = tried("t.__getstate__()");
out.setstate = tried("t.__setstate__({})");
out.listCopy = tried("lc = copy.copy([t, t])\\nassert lc[0] is t");
// The copies all drop their references; the JS memory is released exactly once.
out.arrays = tried("a = np.from_dlpack(c)\\nb = np.from_dlpack(lc[1])\\ndel t, c, lc\\ngc.collect()\\na += 1\\nb += 1");
py.exec("del a, b\\ngc.collect()");
out.values = Array.from(x);
const after = stats();
out.balanced = after.exports === before.exports && after.pinned === before.pinned;
`);
  assert.equal(out.copy, "ok", "copy.copy returns the (immutable) object itself");
  assert.match(String(out.deepcopy), /TypeError: dlpack_ts\.DLPackTensor cannot be deep-copied/);
  for (const p of out.pickle as string[]) assert.match(p, /TypeError: dlpack_ts\.DLPackTensor cannot be pickled/);
  assert.match(String(out.reduce), /TypeError: .*cannot be pickled/);
  assert.match(String(out.reduceEx), /TypeError: .*cannot be pickled/);
  assert.match(String(out.objectReduceEx), /TypeError: .*(cannot be pickled|no state to save)/);
  assert.match(String(out.getstate), /TypeError: .*no state to save/);
  assert.match(String(out.setstate), /TypeError: .*made by dlpack-ts/);
  assert.equal(out.listCopy, "ok");
  assert.equal(out.arrays, "ok");
  assert.deepEqual(out.values, [3, 4, 5], "both arrays wrote into the JS memory");
  assert.equal(out.balanced, true, "the export was released once, the pin swept");
}, skip);

test("a DLPackTensor cannot be re-initialized, made from Python, subclassed or fed raw addresses", () => {
  const out = isolated(`
const before = stats();
const x = new Float32Array([1, 2]);
const ro = new Float32Array([5, 6]);
const jsT = toPython(x, py);
const jsRo = toPython(ro, py, { readonly: true });
py.set("t", jsT);
py.set("ro", jsRo);
jsT.dispose();
jsRo.dispose();
py.exec("import dlpack_ts, gc, numpy as np\\nT = dlpack_ts.DLPackTensor");
out.reinit = tried("t.__init__(1, 1, 0, False, (2,), 2, 32)");
out.construct = tried("T(12345, 1, 0, False, (2,), 2, 32)");
out.subclass = tried("class S(T):\\n    pass");
out.newEmpty = tried("e = object.__new__(T)\\ne.__dlpack__()");
out.rawCapsule = tried("dlpack_ts._native_capsule(12345, 1)");
out.rawFence = tried("dlpack_ts._native_fence(0, 1)");
out.otherCapsule = tried("dlpack_ts._native_capsule(np.arange(2.0).__dlpack__(), 1)");
out.makeForged = tried("f = dlpack_ts._make_tensor(4096, 1, 0, False, (2,), 2, 32)\\nf.__dlpack__()");
out.overwritten = tried("u = dlpack_ts._make_tensor(t._template, 1, 0, False, (2,), 2, 32)\\nt._template = 64\\nt.__dlpack__()");
out.shared = tried("a = np.from_dlpack(u)\\na[0] = 7\\ndel a, u, t\\ngc.collect()");
// The read-only flag lives with the template, not in the attribute Python code can change.
out.readonly = tried("ro._readonly = False\\nro.__dlpack__()");
out.twice = tried("c1 = ro.__dlpack__(max_version=(1, 0))\\nc2 = ro.__dlpack__(max_version=(1, 0))\\na1 = np.from_dlpack(ro)\\na2 = np.from_dlpack(ro)\\nassert a1.ctypes.data == a2.ctypes.data\\ndel c1, c2, a1, a2, ro\\ngc.collect()");
out.x = Array.from(x);
const after = stats();
out.balanced = after.exports === before.exports && after.pinned === before.pinned;
`);
  assert.match(String(out.reinit), /TypeError: dlpack_ts\.DLPackTensor objects are made by dlpack-ts/);
  assert.match(String(out.construct), /TypeError: dlpack_ts\.DLPackTensor objects are made by dlpack-ts/);
  assert.match(String(out.subclass), /TypeError: dlpack_ts\.DLPackTensor cannot be subclassed/);
  assert.match(String(out.newEmpty), /AttributeError/);
  assert.match(String(out.rawCapsule), /TypeError: dlpack-ts: expected the export template of a DLPackTensor/);
  assert.match(String(out.rawFence), /TypeError: dlpack-ts: expected the export template/);
  assert.match(String(out.otherCapsule), /TypeError: dlpack-ts: expected the export template/);
  assert.match(String(out.makeForged), /TypeError: dlpack-ts: expected the export template/);
  assert.match(String(out.overwritten), /TypeError: dlpack-ts: expected the export template/);
  assert.equal(out.shared, "ok", "a tensor sharing another's template capsule works and releases it once");
  assert.match(String(out.readonly), /BufferError: dlpack-ts: read-only data cannot be exported through the legacy/);
  assert.equal(out.twice, "ok", "__dlpack__ called twice gives two independent capsules");
  assert.deepEqual(out.x, [7, 2]);
  assert.equal(out.balanced, true, "every export released once, every pin swept");
}, skip);
