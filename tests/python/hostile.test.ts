// Hostile use of the Python bridge: copying, pickling and re-initializing the DLPackTensor that
// toPython returns (crash cases run in a child process), fromPython options that lie about their
// types, and wrong argument types for every public function of python.ts and the bridge objects.
import assert from "node:assert/strict";
import { fromPython, openPython, PyObject, Python, toPython } from "../../python.ts";
import { noPython, python } from "../support/python.ts";
import { repoRoot, runIsolated, test } from "../support/harness.ts";
import { live, refused } from "../support/assertions.ts";

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
// __dlpack__'s capsules cannot be copied at all, and the export itself is out of Python's reach.
out.capsules = ["copy.copy(t.__dlpack__())", "copy.deepcopy(t.__dlpack__(max_version=(1, 0)))",
  "pickle.dumps(t.__dlpack__())"].map(tried);
out.hidden = ["t._template", "t.__dict__", "vars(t)"].map(tried);
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
  for (const c of out.capsules as string[]) assert.match(c, /TypeError: cannot pickle 'PyCapsule' object/);
  for (const h of out.hidden as string[]) assert.match(h, /(AttributeError|TypeError): .*(_template|__dict__)/);
  assert.equal(out.listCopy, "ok");
  assert.equal(out.arrays, "ok");
  assert.deepEqual(out.values, [3, 4, 5], "both arrays wrote into the JS memory");
  assert.equal(out.balanced, true, "the export was released once, the pin swept");
}, skip);

test("a DLPackTensor cannot be re-initialized, made from Python, subclassed or forged", () => {
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
py.exec("import copy, dlpack_ts, gc, numpy as np\\nT = dlpack_ts.DLPackTensor");
out.reinit = tried("t.__init__(1, 1, 0, False, (2,), 2, 32)");
out.construct = tried("T(12345, 1, 0, False, (2,), 2, 32)");
out.subclass = tried("class S(T):\\n    pass");
out.newEmpty = tried("e = object.__new__(T)\\ne.__dlpack__()");
out.newOwn = tried("T.__new__(T)");
// Nothing to forge: the export lives in a C field, the makers and natives are not Python-callable.
out.natives = ["dlpack_ts._native_capsule", "dlpack_ts._native_fence", "dlpack_ts._make_tensor"].map(tried);
out.overwritten = tried("t._template = 64");
out.unbound = tried("T.__dlpack__(np.arange(2.0))");
out.shared = tried("u = copy.copy(t)\\na = np.from_dlpack(u)\\na[0] = 7\\ndel a, u, t\\ngc.collect()");
// The read-only flag lives in the C object, not in an attribute Python code can change.
out.readonlyAttr = tried("ro._readonly = False");
out.readonly = tried("ro.__dlpack__()");
out.twice = tried("c1 = ro.__dlpack__(max_version=(1, 0))\\nc2 = ro.__dlpack__(max_version=(1, 0))\\na1 = np.from_dlpack(ro)\\na2 = np.from_dlpack(ro)\\nassert a1.ctypes.data == a2.ctypes.data\\ndel c1, c2, a1, a2, ro\\ngc.collect()");
out.x = Array.from(x);
const after = stats();
out.balanced = after.exports === before.exports && after.pinned === before.pinned;
`);
  assert.match(String(out.reinit), /TypeError: dlpack_ts\.DLPackTensor objects are made by dlpack-ts/);
  assert.match(String(out.construct), /TypeError: dlpack_ts\.DLPackTensor objects are made by dlpack-ts/);
  assert.match(String(out.subclass), /TypeError: type 'dlpack_ts\.DLPackTensor' is not an acceptable base type/);
  assert.match(String(out.newEmpty), /TypeError: object\.__new__\(dlpack_ts\.DLPackTensor\) is not safe/);
  assert.match(String(out.newOwn), /TypeError: dlpack_ts\.DLPackTensor objects are made by dlpack-ts/);
  for (const n of out.natives as string[]) assert.match(n, /AttributeError: module 'dlpack_ts' has no attribute/);
  assert.match(
    String(out.overwritten),
    /AttributeError: 'dlpack_ts\.DLPackTensor' object has no attribute '_template'/,
  );
  assert.match(String(out.unbound), /TypeError: .*'__dlpack__' .*'dlpack_ts\.DLPackTensor' object.*'numpy\.ndarray'/);
  assert.equal(out.shared, "ok", "a copy shares the object, and the export is released once");
  assert.match(
    String(out.readonlyAttr),
    /AttributeError: 'dlpack_ts\.DLPackTensor' object has no attribute '_readonly'/,
  );
  assert.match(String(out.readonly), /BufferError: dlpack-ts: read-only data cannot be exported through the legacy/);
  assert.equal(out.twice, "ok", "__dlpack__ called twice gives two independent capsules");
  assert.deepEqual(out.x, [7, 2]);
  assert.equal(out.balanced, true, "every export released once, every pin swept");
}, skip);

test("the DLPackTensor type is immutable, and an object without an export raises in every method", () => {
  const out = isolated(`
const before = stats();
const x = new Float32Array([1, 2]);
const t = toPython(x, py);
py.set("t", t);
t.dispose();
py.exec("import ctypes, gc, numpy as np, dlpack_ts\\nT = dlpack_ts.DLPackTensor");
out.set = [
  "T.__new__ = staticmethod(lambda c: object.__new__(c))",
  "del T.__new__",
  "T.__dlpack__ = lambda self, **kw: None",
  "T.__dlpack_c_exchange_api__ = None",
  "T.shape = 1",
  "type.__setattr__(T, 'shape', 1)",
].map(tried);
out.objectSetattr = tried("object.__setattr__(T, 'shape', 1)");
out.setClass = tried("class Y:\\n    __slots__ = ('a', 'b', 'c')\\ny = Y()\\ny.__class__ = T");
// What a replaced __new__ made before: an object without an export. C code can still make one.
py.exec([
  "alloc = ctypes.pythonapi.PyType_GenericAlloc",
  "alloc.restype = ctypes.py_object",
  "alloc.argtypes = [ctypes.py_object, ctypes.c_ssize_t]",
  "e = alloc(T, 0)",
].join("\\n"));
out.empty = ["e.shape", "e.dtype", "repr(e)", "str(e)", "e.__dlpack__()", "e.__dlpack__(max_version=(1, 0))",
  "e.__dlpack_device__()", "np.from_dlpack(e)"].map((c) => tried("r = " + c));
const e = py.eval("e");
try {
  fromPython(e);
  out.fromPython = "imported";
} catch (error) {
  out.fromPython = (error as Error).message.split("\\n")[0];
}
e.dispose();
py.exec("del e\\ngc.collect()");
out.still = tried("a = np.from_dlpack(t)\\na[0] = 5\\ndel a, t\\ngc.collect()");
out.x = Array.from(x);
const after = stats();
out.balanced = after.exports === before.exports && after.pinned === before.pinned;
`);
  for (const s of out.set as string[]) {
    assert.match(s, /TypeError: cannot set .* attribute of immutable type 'dlpack_ts\.DLPackTensor'/);
  }
  assert.match(String(out.objectSetattr), /TypeError: can't apply this __setattr__ to type object/);
  assert.match(String(out.setClass), /TypeError: __class__ assignment only supported for mutable types/);
  for (const m of out.empty as string[]) {
    assert.match(m, /TypeError: dlpack-ts: this dlpack_ts\.DLPackTensor holds no export/);
  }
  assert.match(String(out.fromPython), /TypeError: dlpack-ts: this dlpack_ts\.DLPackTensor holds no export/);
  assert.equal(out.still, "ok");
  assert.deepEqual(out.x, [5, 2]);
  assert.equal(out.balanced, true, "the export released once, the pin swept");
}, skip);

test("PyObject and Python cannot be constructed with forged handles", () => {
  const out = isolated(`
const attempt = (f: () => unknown) => {
  try {
    f();
    return "ok";
  } catch (error) {
    return (error as { code?: string }).code + ": " + (error as Error).message;
  }
};
out.pyObject = attempt(() => new (PyObject as unknown as new (h: number, p: unknown) => PyObject)(4096, py).get("x"));
out.python = attempt(() => new (Python as unknown as new (s: unknown) => Python)({}).exec("1"));
out.wrapNull = attempt(() => py.wrap({ handle: 0 }));
`);
  assert.match(String(out.pyObject), /^argument: PyObjects are made by the Python bridge/);
  assert.match(String(out.python), /^argument: Python handles are made by openPython\(\)/);
  assert.match(String(out.wrapNull), /^argument: .*must not be NULL/);
}, skip);

test("fromPython options are checked in TypeScript and name the option (Bun's FFI would truncate them)", () => {
  const py = python();
  py.exec("import numpy as np\nsrc = np.arange(4.0)");
  using src = py.eval("src");
  const before = live();
  const opt = (o: unknown) => () => fromPython(src, o as never);
  refused(opt({ maxVersion: [2 ** 40, 0] }), "argument", /option maxVersion .*got \[number 1099511627776, number 0\]/);
  refused(opt({ maxVersion: [1, -1] }), "argument", /option maxVersion/);
  refused(opt({ maxVersion: [1.5, 0] }), "argument", /option maxVersion/);
  refused(opt({ maxVersion: [1] }), "argument", /option maxVersion .*an array of length 1/);
  refused(opt({ maxVersion: [1, 3, 0] }), "argument", /option maxVersion .*length 3/);
  refused(opt({ maxVersion: "1.3" }), "argument", /option maxVersion .*string "1.3"/);
  refused(opt({ maxVersion: { 0: 1, 1: 0, length: 2 } }), "argument", /option maxVersion/);
  refused(opt({ device: { type: "cpu", id: 0.5 } }), "device", /option device\.id .*number 0\.5/);
  refused(opt({ device: { type: "cpu", id: 2 ** 40 } }), "device", /option device\.id/);
  refused(opt({ device: { type: "nope" } }), "device", /option device\.type: unknown device type (string )?"nope"/);
  refused(opt({ device: { type: 1 } }), "argument", /option device\.type must be a device name/);
  refused(opt({ device: "cpu" }), "argument", /option device must be \{ type, id\? \}/);
  refused(opt({ copy: "yes" }), "argument", /option copy must be true, false or null/);
  refused(opt({ copy: 1 }), "argument", /option copy/);
  for (const stream of [0, 0n, NaN, 1.5, -2, 2 ** 53, 2n ** 64n, "1"]) {
    refused(opt({ stream }), "argument", /option stream must be null, -1 .*or a positive stream handle/);
  }
  refused(opt({ stream: 0 }), "argument", /disallows 0/);
  refused(opt(5), "argument", /fromPython\(\) options must be an options object, got number 5/);
  refused(opt([]), "argument", /options must be an options object/);
  // A getter that lies on the second read cannot slip a different value past the check.
  let reads = 0;
  const flipping = {
    get maxVersion() {
      return reads++ === 0 ? [1, 0] : [2 ** 40, 0];
    },
  };
  using flipped = fromPython(src, flipping as never);
  assert.equal(reads, 1, "each option is read once");
  assert.deepEqual(flipped.version, { major: 1, minor: 0 });
  flipped.dispose();
  // null options are no options; each valid form still imports.
  using plain = fromPython(src, null);
  assert.equal(plain.version?.major, 1);
  using legacy = fromPython(src, { maxVersion: null, copy: null, device: null, stream: null });
  assert.equal(legacy.version, null);
  using onCpu = fromPython(src, { maxVersion: [1, 0], copy: false, device: { type: "cpu" } });
  assert.equal(onCpu.address, plain.address);
  plain.dispose();
  legacy.dispose();
  onCpu.dispose();
  assert.deepEqual(live(), before, "refused options imported nothing");
}, skip);

test("a __dlpack__ returning something other than a capsule is called once and named", () => {
  const py = python();
  py.exec(
    "calls = []\n" +
      "class Returns:\n" +
      "    def __init__(self, value):\n" +
      "        self.value = value\n" +
      "    def __dlpack__(self, **kw):\n" +
      "        calls.append(1)\n" +
      "        return self.value\n" +
      "class NotADict:\n" +
      "    __array_interface__ = [1, 2]",
  );
  refused(() => fromPython(py.eval("Returns(None)")), "python", /Returns\.__dlpack__ returned None, not a PyCapsule/);
  assert.equal(py.eval("len(calls)").toJS(), 1, "__dlpack__ was called once");
  refused(() => fromPython(py.eval("Returns(42)")), "python", /returned 42, not a PyCapsule/);
  refused(() => fromPython(py.eval("Returns([1])")), "python", /returned a list, not a PyCapsule/);
  refused(() => fromPython(py.eval("NotADict()")), "python", /__array_interface__ is a list, not a dict/);
  // Only a PyObject of this bridge can keep an __array_interface__ object alive.
  using oi = py.eval("type('OI', (), {'__array_interface__': np.arange(2.0).__array_interface__})()");
  refused(() => fromPython({ handle: oi.handle }), "argument", /need a PyObject of this bridge/);
}, skip);

test("every public function of python.ts refuses wrong argument types with code argument", () => {
  const py = python();
  py.exec("import numpy as np");
  const x = new Float32Array(2);
  const bad = (f: () => unknown, pattern?: RegExp) => refused(f, "argument", pattern);
  bad(() => (toPython as (x: unknown) => unknown)(x), /toPython\(x, py\) needs the bridge .*got undefined/);
  bad(() => toPython(x, {} as never), /needs the bridge/);
  bad(() => toPython(x, Object.create(Python.prototype)), /needs the bridge/);
  bad(() => toPython(123 as never, py), /toPython\(x, py\) takes a BufferView or a TypedArray, got number 123/);
  bad(() => toPython([1, 2] as never, py), /takes a BufferView or a TypedArray, got an array/);
  bad(() => fromPython([1, 2, 3] as never), /must be a PyObject or a \{ handle \} object, got an array/);
  bad(() => fromPython(undefined as never), /got undefined/);
  bad(() => fromPython(42 as never), /got number 42/);
  bad(() => fromPython({} as never), /an object without a handle/);
  bad(() => fromPython({ handle: "12" } as never), /handle/);
  bad(() => fromPython({ handle: -1 } as never), /handle/);
  bad(() => fromPython({ handle: 0 } as never), /must not be NULL/);
  bad(() => fromPython(Object.create(PyObject.prototype)), /not a PyObject made by the bridge/);
  bad(() => openPython(5 as never), /openPython\(\) options must be an options object/);
  bad(() => openPython({ library: 5 } as never), /option library must be a string/);

  bad(() => py.exec(123 as never), /py\.exec\(\) code must be a string, got number 123/);
  bad(() => py.exec("x = 1\0import os"), /must not contain a NUL/);
  bad(() => py.eval(null as never), /py\.eval\(\) expression must be a string, got null/);
  bad(() => py.import(undefined as never), /py\.import\(\) module name must be a string/);
  bad(() => py.set(1 as never, 2), /py\.set\(\) name must be a string/);
  bad(() => py.set("a\0b", 2), /must not contain a NUL/);
  bad(() => py.set("v", Symbol("s") as never), /cannot pass a symbol/);
  bad(() => py.set("v", (() => 1) as never), /cannot pass a function/);
  bad(() => py.set("v", {} as never), /cannot pass an object/);
  bad(() => py.set("v", new Float32Array(2) as never), /cannot pass/);
  bad(() => py.wrap(undefined as never), /py\.wrap\(\) must be a PyObject or a \{ handle \} object/);
  bad(() => py.wrap({} as never), /an object without a handle/);

  using obj = py.eval("dict");
  bad(() => obj.get(1 as never), /PyObject\.get\(\) attribute name must be a string/);
  bad(() => obj.get("fromkeys\0x"), /must not contain a NUL/);
  bad(() => obj.call(Symbol() as never), /cannot pass a symbol/);
  bad(() => obj.callWith("ab" as never), /callWith\(\) args must be an array, got string "ab"/);
  bad(() => obj.callWith([], 5 as never), /kwargs must be an object, got number 5/);
  bad(() => obj.callWith([], { ["a\0b"]: 1 }), /keyword argument's name must not contain a NUL/);
  bad(() => obj.callWith([], { a: Symbol() as never }), /cannot pass a symbol/);
  assert.deepEqual(obj.callWith([], null).toJS(), {});
  assert.deepEqual(obj.callWith([], { a: 1 }).toJS(), { a: 1 });

  // A cycle and a Proxy whose length changes between reads.
  const cycle: unknown[] = [];
  cycle.push(cycle);
  bad(() => py.set("c", cycle as never), /nest more than 256 deep \(a cycle\?\)/);
  let lengthReads = 0;
  const growing = new Proxy([10, 20, 30], {
    get(target, key, receiver) {
      if (key === "length") return lengthReads++ === 0 ? 2 : 3;
      return Reflect.get(target, key, receiver);
    },
  });
  py.set("g", growing as never);
  assert.deepEqual(py.eval("g").toJS(), [10, 20]);
  assert.equal(py.eval("1 + 1").toJS(), 2, "no Python exception was left pending");
}, skip);

test("use after close() or dispose() is refused with code disposed, everywhere", () => {
  const py = python();
  const other = openPython();
  using obj = other.eval("[1, 2]");
  using arr = py.eval("__import__('numpy').arange(3.0)");
  const held = other.wrap(arr);
  other.close();
  const x = new Float32Array(2);
  const closed = (f: () => unknown) => refused(f, "disposed", /closed/);
  closed(() => other.exec("1"));
  closed(() => other.eval("1"));
  closed(() => other.import("math"));
  closed(() => other.set("a", 1));
  closed(() => other.wrap(obj));
  closed(() => toPython(x, other));
  closed(() => fromPython(held));
  closed(() => obj.get("count"));
  closed(() => obj.call());
  closed(() => obj.callWith([]));
  closed(() => obj.toJS());
  closed(() => py.set("a", obj));
  const gone = py.eval("3");
  gone.dispose();
  refused(() => gone.toJS(), "disposed", /disposed/);
  refused(() => py.set("a", gone), "disposed", /disposed/);
  refused(() => fromPython(gone), "disposed", /disposed/);
  held.dispose();
  obj.dispose();
}, skip);

test(
  "a getter the bridge runs while it reads arguments may dispose the objects: refused, nothing freed is used",
  () => {
    const out = isolated(`
const attempt = (f: () => unknown) => {
  try {
    f();
    return "done";
  } catch (error) {
    return (error as { code?: string }).code ?? String(error);
  }
};
// Memory freed by the dispose is reused at once, so a stale handle would point at other objects.
const churn = () => py.exec("import gc; gc.collect(); junk = [bytearray(64) for _ in range(2000)]");
// callWith: a getter on an argument disposes the callee.
{
  const f = py.eval("(lambda: (lambda *a: len(a)))()");
  const args: unknown[] = [1];
  Object.defineProperty(args, 0, { get() { f.dispose(); churn(); return 1; }, enumerable: true });
  out.callWith = attempt(() => f.callWith(args as number[]));
}
// fromPython: an option getter disposes the object.
{
  const obj = py.eval("__import__('numpy').arange(1024.0)");
  const opts = { get maxVersion() { obj.dispose(); churn(); return undefined; } };
  out.fromPython = attempt(() => fromPython(obj, opts as never));
}
// toPython with { as }: a getter the export reads disposes the type.
{
  const T = py.eval("type('T', (), {})");
  const opts = { as: T, get shape() { T.dispose(); churn(); return undefined; } };
  out.toPythonAs = attempt(() => toPython(new Float32Array(4), py, opts as never));
}
const s = stats();
out.live = [s.imports, s.exports, s.pinned];
`);
    assert.deepEqual(out, { callWith: "disposed", fromPython: "disposed", toPythonAs: "disposed", live: [0, 0, 0] });
  },
  skip,
);

test("an export imported raw cannot be taken a second time through a Python capsule (and the reverse)", () => {
  const out = isolated(`
const { exportDLPack, importDLPack } = await import("${repoRoot}/mod.ts");
const before = stats();
py.exec([
  "import ctypes",
  "_new = ctypes.pythonapi.PyCapsule_New",
  "_new.restype = ctypes.py_object",
  "_new.argtypes = [ctypes.c_void_p, ctypes.c_char_p, ctypes.c_void_p]",
  "class Raw:",
  "    def __init__(self, address): self.address = address",
  "    def __dlpack__(self, **kw): return _new(self.address, b'dltensor_versioned', None)",
].join("\\n"));
const x = new Float32Array([1, 2, 3, 4]);
// A raw import takes the export first; the capsule naming the same struct is then refused.
const address = exportDLPack(x).take();
const view = importDLPack({ versioned: address });
py.exec("raw = Raw(" + address + ")");
const raw = py.eval("raw");
try {
  fromPython(raw);
  out.second = "accepted";
} catch (error) {
  out.second = (error as { code?: string }).code;
  out.message = (error as Error).message;
}
out.value = view.get(2);
view.dispose();
raw.dispose();
py.exec("del raw");
const after = stats();
out.balanced = after.imports === before.imports && after.exports === before.exports && after.pinned === before.pinned;
`);
  assert.equal(out.second, "consumed", String(out.message));
  assert.equal(out.value, 3);
  assert.equal(out.balanced, true);
}, skip);
