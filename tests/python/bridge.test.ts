// The embedded CPython and the protocol across it: the bridge's calls, fromPython / toPython
// semantics, every bad input of the Python issue, and refcount/deleter balance over many exchanges.
import assert from "node:assert/strict";
import { exportDLPack, importDLPack, stats, zeros } from "../../mod.ts";
import { fromPython, openPython, PyObject, toPython } from "../../python.ts";
import { runtime } from "../../ffi/mod.ts";
import { missing, noPython, python } from "../support/python.ts";
import { collectGarbage, gcUnavailable, runScript, test } from "../support/harness.ts";
import { live, refused } from "../support/assertions.ts";

const skip = { skip: noPython };

test("call(obj) with one PyObject: every kind of callable, exceptions, and the argument's references balanced", () => {
  const py = python();
  py.exec(
    "import sys\n" +
      "class CallOne:\n" +
      "    def __call__(self, x): return ('instance', len(x))\n" +
      "    def method(self, x): return ('method', len(x))\n" +
      "def call_one_fn(x): return ('function', len(x))\n" +
      "def call_one_kw(*, x=None): return x\n" +
      "def call_one_raises(x): raise KeyError('no ' + str(len(x)))\n" +
      "call_one_arg = [1, 2, 3]",
  );
  using arg = py.eval("call_one_arg");
  using refs = py.eval("lambda: sys.getrefcount(call_one_arg)");
  const before = refs.call().toJS() as number;
  const callables: [string, unknown][] = [
    ["len", 3],
    ["call_one_fn", ["function", 3]],
    ["CallOne()", ["instance", 3]],
    ["CallOne().method", ["method", 3]],
    ["tuple", [1, 2, 3]],
  ];
  for (const [expression, expected] of callables) {
    using f = py.eval(expression);
    for (let i = 0; i < 3; i++) {
      using result = f.call(arg);
      assert.deepEqual(result.toJS(), expected, expression);
    }
  }
  using raises = py.eval("call_one_raises");
  refused(() => raises.call(arg), "python", /KeyError: 'no 3'/);
  using keywordOnly = py.eval("call_one_kw");
  refused(() => keywordOnly.call(arg), "python", /TypeError/);
  assert.equal(refs.call().toJS(), before, "the argument is lent to the call, neither kept nor released");
  py.exec("del CallOne, call_one_fn, call_one_kw, call_one_raises, call_one_arg");
}, skip);

test("exec, eval, import, set, get, call, toJS", () => {
  const py = python();
  py.exec("import math\nvalue = 6 * 7");
  assert.equal(py.eval("value").toJS(), 42);
  using math = py.import("math");
  assert.equal(math.get("sqrt").call(16).toJS(), 4);
  py.set("xs", [1, 2.5, "three", true, null, [4n ** 30n]]);
  assert.deepEqual(py.eval("[type(x).__name__ for x in xs]").toJS(), [
    "int",
    "float",
    "str",
    "bool",
    "NoneType",
    "tuple",
  ]);
  assert.equal(py.eval("xs[5][0] == 4 ** 30").toJS(), true);
  assert.deepEqual(py.eval("(float('nan'), float('inf'), -float('inf'))").toJS(), [NaN, Infinity, -Infinity]);
  using dict = py.eval("dict");
  assert.deepEqual(dict.callWith([], { a: 1, b: "x" }).toJS(), { a: 1, b: "x" });
  assert.equal(typeof math.handle, "bigint");
  // Objects of other bridges come in as { handle }.
  using again = py.wrap({ handle: math.handle });
  assert.equal(again.get("pi").toJS(), Math.PI);
  assert.strictEqual(openPython().library, py.library, "one interpreter per process");
}, skip);

test("Python exceptions become DLPackError code python with type and message", () => {
  const py = python();
  refused(() => py.exec("raise ValueError('boom')"), "python", /ValueError: boom/);
  refused(() => py.eval("undefined_name"), "python", /NameError: name 'undefined_name' is not defined/);
  refused(() => py.import("no_such_module_here"), "python", /ModuleNotFoundError/);
  refused(() => py.eval("1").get("nope"), "python", /AttributeError/);
  assert.equal(py.eval("1 + 1").toJS(), 2, "the error state was cleared");
}, skip);

test("numpy -> JS is zero-copy, versioned, writable, named", () => {
  const py = python();
  py.exec("import numpy as np\nm = np.arange(6, dtype=np.float32).reshape(2, 3)");
  using m = py.eval("m");
  using v = fromPython(m);
  assert.equal(v.producer, "numpy.ndarray");
  assert.equal(v.version?.major, 1, "numpy answers max_version=(1, 3) with a versioned capsule");
  assert.equal(v.address, BigInt(py.eval("m.ctypes.data").toJS() as number));
  assert.equal(v.access, "readwrite");
  v.set(99, 1, 2);
  assert.equal(py.eval("float(m[1, 2])").toJS(), 99, "writes land in numpy's memory");
  using legacy = fromPython(m, { maxVersion: null });
  assert.equal(legacy.version, null);
  assert.equal(legacy.access, "unknown");
}, skip);

test("JS -> numpy is zero-copy, both ways visible, numpy writes in place", () => {
  const py = python();
  const x = new Float32Array([1, 2, 3, 4]);
  using t = toPython(x, py, { shape: [2, 2] });
  py.set("t", t);
  py.exec("import numpy as np\nb = np.from_dlpack(t)\nb += 10");
  assert.deepEqual(Array.from(x), [11, 12, 13, 14]);
  assert.equal(py.eval("b.ctypes.data").toJS(), runtime().addressOf(x));
  assert.deepEqual(py.eval("b.shape").toJS(), [2, 2]);
  assert.equal(py.eval("b.flags.writeable").toJS(), true);
  assert.match(String(py.eval("repr(t)").toJS()), /DLPackTensor\(shape=\(2, 2\), dtype='float32'/);
  py.exec("del b, t");
}, skip);

test("toPython protocol: legacy for old consumers, READ_ONLY, copy, dl_device, stream", () => {
  const py = python();
  const x = new Int32Array([5, 6, 7]);
  using t = toPython(x, py);
  py.set("t", t);
  py.exec("import numpy as np");
  assert.equal(py.eval("type(t.__dlpack__()).__name__").toJS(), "PyCapsule");
  assert.deepEqual(py.eval("t.__dlpack_device__()").toJS(), [1, 0]);
  // Capsule names tell the generation; unconsumed capsules are freed by their destructor.
  assert.match(String(py.eval("repr(t.__dlpack__())").toJS()), /"dltensor"/);
  assert.match(String(py.eval("repr(t.__dlpack__(max_version=(1, 0)))").toJS()), /"dltensor_versioned"/);
  py.exec("c = np.from_dlpack(t, copy=True)\nc[0] = 100");
  assert.equal(x[0], 5, "copy=True made a copy");
  refused(
    () => py.exec("t.__dlpack__(dl_device=(2, 0))"),
    "python",
    /BufferError: .*cannot export data on device \(1, 0\) to device \(2, 0\)/,
  );
  refused(() => py.exec("t.__dlpack__(dl_device=(2, 0), copy=False)"), "python", /without a copy/);
  refused(() => py.exec("t.__dlpack__(stream=1)"), "python", /RuntimeError: .*stream must be None/);

  using ro = toPython(x, py, { readonly: true });
  py.set("ro", ro);
  refused(
    () => py.exec("ro.__dlpack__()"),
    "python",
    /BufferError: .*read-only data cannot be exported through the legacy/,
  );
  assert.equal(py.eval("np.from_dlpack(ro).flags.writeable").toJS(), false, "numpy honours READ_ONLY");
  assert.equal(py.eval("np.from_dlpack(ro, copy=True).flags.writeable").toJS(), true);
  py.exec("del c, t, ro");
}, skip);

test("DLPackTensor.__dlpack__ reads its keywords in C as Python would", () => {
  const py = python();
  const x = new Float32Array([1, 2]);
  using t = toPython(x, py);
  py.set("t", t);
  py.exec("import numpy as np, sys");
  refused(() => py.exec("t.__dlpack__(None)"), "python", /TypeError: __dlpack__\(\) takes no positional arguments/);
  refused(() => py.exec("t.__dlpack__(device=1)"), "python", /TypeError: .*unexpected keyword argument 'device'/);
  refused(() => py.exec("t.__dlpack__(copy=np.array([1, 2]))"), "python", /ValueError: .*ambiguous/);
  // Keyword names that are not interned match too; tuple subclasses are tuples.
  const kw = "{ ''.join(['max_', 'version']): (1, 0) }";
  assert.match(String(py.eval(`repr(t.__dlpack__(**${kw}))`).toJS()), /_versioned"/);
  py.exec("class Pair(tuple): pass");
  assert.match(
    String(py.eval("repr(t.__dlpack__(max_version=Pair((1, 0)), dl_device=Pair((1, 0))))").toJS()),
    /_versioned"/,
  );
  assert.match(String(py.eval("repr(t.__dlpack__(max_version=(True, 0)))").toJS()), /_versioned"/);
  assert.match(String(py.eval("repr(t.__dlpack__(max_version=(-1, 0)))").toJS()), /"dltensor"/);
  assert.equal(
    py.eval("t.__dlpack__(stream=None, copy=None, dl_device=None, max_version=None) is not None").toJS(),
    true,
  );
  py.exec("a = np.from_dlpack(t, copy=False)\na[1] = 7\ndel a, t");
  assert.equal(x[1], 7, "copy=False shares the JS memory");
}, skip);

/** `__dlpack__` arguments that are wrong, and one that asks for a device the data is not on. */
const WRONG_ARGUMENTS = [
  "stream=1",
  "stream=-1",
  "stream='x'",
  "max_version=()",
  "max_version=(1,)",
  "max_version=(1, 2, 3)",
  "max_version=[1, 0]",
  "max_version=(1.5, 0)",
  "max_version=('a', 0)",
  "max_version=3",
  "max_version=(2**70, 0)",
  "dl_device='cpu'",
  "dl_device=5",
  "dl_device=(1,)",
  "dl_device=(1, 0, 0)",
  "dl_device=[1, 0]",
  "dl_device=(1.0, 0)",
  "dl_device=(1, 2**40)",
  "dl_device=(2, 0)",
  "dl_device=(2, 0), copy=False",
  "copy='yes'",
  "copy=''",
];

test("__dlpack__ argument errors are the exceptions numpy 2.4 raises; BufferError only for the device", () => {
  const py = python();
  using t = toPython(new Float32Array([1, 2]), py);
  py.set("t", t);
  py.exec(`
import numpy as np
def kind(f):
    try:
        f()
    except Exception as e:
        return type(e).__name__
    return "ok"
n = np.arange(2.0)
kinds = [(a, kind(lambda: eval("n.__dlpack__(" + a + ")")), kind(lambda: eval("t.__dlpack__(" + a + ")")))
         for a in ${JSON.stringify(WRONG_ARGUMENTS)}]
`);
  const kinds = py.eval("kinds").toJS() as Array<[string, string, string]>;
  for (const [argument, numpy, ours] of kinds) {
    assert.notEqual(ours, "ok", `${argument}: refused`);
    assert.equal(ours, numpy, `${argument}: numpy raises ${numpy}, DLPackTensor ${ours}`);
  }
  assert.deepEqual(
    kinds.filter(([, , ours]) => ours === "BufferError").map(([a]) => a),
    ["dl_device=(2, 0)", "dl_device=(2, 0), copy=False"],
    "BufferError only for data that cannot be exported where it is asked to go",
  );
  // The one place stricter than numpy, which reads only the major: the minor must be an int too.
  refused(() => py.exec("t.__dlpack__(max_version=(1, 0.5))"), "python", /TypeError: .*integer/);
  assert.equal(py.eval("kind(lambda: n.__dlpack__(max_version=(1, 0.5)))").toJS(), "ok");
  py.exec("del t, kinds");
}, skip);

test("fromPython negotiates in C: old producers, producers that return no capsule, __dlpack__ = None", () => {
  const py = python();
  py.exec(
    "import numpy as np\n" +
      "class Old:\n" +
      "    def __init__(self): self.a = np.arange(3.0); self.calls = []\n" +
      "    def __dlpack__(self, stream=None):\n" +
      "        self.calls.append(stream)\n" +
      "        return self.a.__dlpack__()\n" +
      "class NoCapsule:\n" +
      "    def __dlpack__(self, **kw): return 42\n" +
      "class Disabled:\n" +
      "    __dlpack__ = None\n" +
      "    def __init__(self): self.a = np.arange(2.0)\n" +
      "    @property\n" +
      "    def __array_interface__(self): return self.a.__array_interface__\n" +
      "old = Old()\nnone = NoCapsule()\ndisabled = Disabled()",
  );
  using old = py.eval("old");
  using v = fromPython(old);
  assert.deepEqual(Array.from(v.array() as Float64Array), [0, 1, 2]);
  assert.deepEqual(py.eval("old.calls").toJS(), [null], "retried as the pre-2023 call: no keywords at all");
  refused(() => fromPython(old, { copy: true }), "python", /Old\.__dlpack__ does not accept dl_device or copy/);
  using none = py.eval("none");
  refused(() => fromPython(none), "python", /TypeError: __main__\.NoCapsule\.__dlpack__ returned 42, not a PyCapsule/);
  using disabled = py.eval("disabled");
  using d = fromPython(disabled);
  assert.equal(d.producer, "__main__.Disabled");
  assert.deepEqual(Array.from(d.array() as Float64Array), [0, 1]);
}, skip);

test("fromPython falls back to __array_interface__ and keeps the object alive", () => {
  const py = python();
  py.exec(
    "import numpy as np\n" +
      "class OnlyInterface:\n" +
      "    def __init__(self):\n" +
      "        self.a = np.arange(4, dtype=np.int16)\n" +
      "        self.__array_interface__ = self.a.__array_interface__\n" +
      "oi = OnlyInterface()",
  );
  py.exec("import sys");
  const before = py.eval("sys.getrefcount(oi)").toJS() as number;
  using o = py.eval("oi");
  const v = fromPython(o);
  assert.equal(v.producer, "__main__.OnlyInterface");
  assert.deepEqual(Array.from(v.array() as Int16Array), [0, 1, 2, 3]);
  assert.equal(v.address, BigInt(py.eval("oi.a.ctypes.data").toJS() as number));
  assert.equal(py.eval("sys.getrefcount(oi)").toJS(), before + 2, "o and the view's keep-alive");
  v.dispose();
  stats();
  assert.equal(py.eval("sys.getrefcount(oi)").toJS(), before + 1, "the view's reference was dropped");
  refused(() => fromPython(py.eval("42")), "python", /int supports neither __dlpack__ nor __array_interface__/);
}, skip);

test("bad input: consumed capsule, raising __dlpack__, wrong name, too-new major; nothing leaks", () => {
  const py = python();
  py.exec(
    "import numpy as np, sys, ctypes\n" +
      "arr = np.arange(3.0)\n" +
      "base = sys.getrefcount(arr)\n" +
      "cap = arr.__dlpack__(max_version=(1, 0))",
  );
  using cap = py.eval("cap");
  const first = fromPython(cap);
  assert.deepEqual(Array.from(first.array() as Float64Array), [0, 1, 2]);
  refused(() => fromPython(cap), "consumed", /already consumed/);
  first.dispose();
  py.exec("del cap");

  py.exec("class Raises:\n    def __dlpack__(self, **kw):\n        raise RuntimeError('producer failed')\n");
  refused(() => fromPython(py.eval("Raises()")), "python", /__dlpack__: RuntimeError: producer failed/);

  // A capsule of the wrong name: refused, not renamed (its own destructor stays in charge).
  py.exec(
    "set_name = ctypes.pythonapi.PyCapsule_SetName\n" +
      "set_name.argtypes = [ctypes.py_object, ctypes.c_char_p]\n" +
      "get_ptr = ctypes.pythonapi.PyCapsule_GetPointer\n" +
      "get_ptr.restype = ctypes.c_void_p\n" +
      "get_ptr.argtypes = [ctypes.py_object, ctypes.c_char_p]\n" +
      "wrong = arr.__dlpack__(max_version=(1, 0))\n" +
      "set_name(wrong, b'not_a_tensor')",
  );
  using wrong = py.eval("wrong");
  refused(() => fromPython(wrong), "python", /not named "dltensor"/);
  py.exec("set_name(wrong, b'dltensor_versioned')\ndel wrong"); // numpy's destructor frees it now
  wrong.dispose();

  // Major version 2: refused before anything else is read; numpy's destructor still frees it.
  py.exec(
    "newer = arr.__dlpack__(max_version=(1, 0))\n" +
      "ctypes.c_uint32.from_address(get_ptr(newer, b'dltensor_versioned')).value = 2",
  );
  using newer = py.eval("newer");
  refused(() => fromPython(newer), "version", /major version 2 is not supported.*the capsule keeps ownership/);
  assert.equal(py.eval("repr(newer)").toJS()!.toString().includes('"dltensor_versioned"'), true, "not renamed");
  py.exec("del newer");
  newer.dispose();
  py.exec("import gc; gc.collect()");
  assert.equal(py.eval("sys.getrefcount(arr) - base").toJS(), 0, "every capsule released its array");
}, skip);

test("numpy's read-only arrays import read-only; writes are refused", () => {
  const py = python();
  py.exec("import numpy as np\nfrozen = np.arange(4.0)\nfrozen.flags.writeable = False");
  using v = fromPython(py.eval("frozen"));
  assert.equal(v.access, "readonly");
  refused(() => v.set(1, 0), "readonly");
  refused(() => v.assumeWritable(), "readonly");
}, skip);

test("exporting a disposed view to Python is refused; calls after close() are refused", () => {
  const py = python();
  const view = zeros([2], "float32");
  view.dispose();
  refused(() => toPython(view, py), "disposed");
  const other = openPython();
  using obj = other.eval("[1, 2]");
  other.close();
  refused(() => other.eval("1"), "disposed", /closed/);
  refused(() => obj.toJS(), "disposed", /closed/);
  assert.equal(py.eval("3").toJS(), 3, "other handles keep working");
}, skip);

test("Python dropping a JS export frees the pin, also when its GC runs on another thread", () => {
  const py = python();
  const before = live();
  const x = new Float64Array([1, 2, 3]);
  const t = toPython(x, py);
  py.set("shared", t);
  t.dispose();
  py.exec(
    "import threading, numpy as np\n" +
      "def work(holder):\n" +
      "    a = np.from_dlpack(holder.pop())\n" +
      "    a *= 2\n" +
      "    del a\n" +
      "box = [shared]\n" +
      "del shared\n" +
      "th = threading.Thread(target=work, args=(box,))\n" +
      "th.start(); th.join()",
  );
  assert.deepEqual(Array.from(x), [2, 4, 6]);
  assert.deepEqual(live(), before, "the deleter ran on the Python thread and JS swept the pin");
}, skip);

test("100,000 numpy <-> JS exchanges: stats() at zero, refcounts back to their start", () => {
  const py = python();
  py.exec("import numpy as np, sys\nsrc = np.arange(8, dtype=np.float32)\nsrc_base = sys.getrefcount(src)");
  const before = live();
  using src = py.eval("src");
  using fromDlpack = py.eval("np.from_dlpack");
  const x = new Float32Array(8);
  for (let i = 0; i < 50_000; i++) {
    fromPython(src).dispose();
    using t = toPython(x, py);
    fromDlpack.call(t).dispose();
  }
  assert.deepEqual(live(), before);
  assert.equal(py.eval("sys.getrefcount(src) - src_base").toJS(), 1, "only `src` (the JS handle) remains");
}, { ...skip, timeout: 300_000 });

test("a Python without a shared library, or none at all: a clear error saying how to point at one", () => {
  const dir = new URL("../support/", import.meta.url).pathname;
  const script = `${dir}python_probe.ts`;
  const missingLib = runScript(script, { DLPACK_PYTHON: "/nonexistent/libpython3.so" });
  assert.match(missingLib.stdout, /python: DLPACK_PYTHON=\/nonexistent\/libpython3\.so: no such file/);
  const fake = `${dir}fake_static_python.sh`;
  const noShared = runScript(script, { DLPACK_PYTHON: fake });
  assert.match(noShared.stdout, /has no shared library.*Point at one with openPython\(\{ library:/s);
}, skip);

test("PyObject handles are released by dispose and by GC", async () => {
  const py = python();
  py.exec("import sys\nprobe = object()\nprobe_base = sys.getrefcount(probe)");
  const h = py.eval("probe");
  assert.equal(py.eval("sys.getrefcount(probe) - probe_base").toJS(), 1);
  h.dispose();
  h.dispose();
  assert.equal(py.eval("sys.getrefcount(probe) - probe_base").toJS(), 0);
  assert.ok(h instanceof PyObject);
  refused(() => h.get("x"), "disposed", /disposed/);
  (() => void py.eval("probe"))();
  for (let i = 0; i < 20 && py.eval("sys.getrefcount(probe) - probe_base").toJS() !== 0; i++) await collectGarbage();
  assert.equal(py.eval("sys.getrefcount(probe) - probe_base").toJS(), 0, "the GC backstop released it");
}, { skip: noPython || gcUnavailable() });

test("pyarrow and JAX producers", () => {
  const py = python();
  py.exec("import pyarrow as pa\nints = pa.array([1, 2, 3], type=pa.int32())");
  using ints = fromPython(py.eval("ints"));
  assert.equal(ints.producer, "pyarrow.lib.Int32Array");
  assert.deepEqual(Array.from(ints.array() as Int32Array), [1, 2, 3]);
}, { skip: missing("pyarrow") });

test("a JS view goes to numpy and comes back as the same memory (chain through Python)", () => {
  const py = python();
  const before = live();
  using m = zeros([3], "int64");
  m.set(7n, 2);
  using t = toPython(m, py);
  py.set("t", t);
  py.exec("import numpy as np\nviaNumpy = np.from_dlpack(t)");
  const viaNumpy = py.eval("viaNumpy");
  using back = fromPython(viaNumpy);
  assert.equal(back.address, m.address);
  assert.equal(back.get(2), 7n);
  const capsule = exportDLPack(back);
  using again = importDLPack(capsule);
  assert.equal(again.address, m.address);
  py.exec("del viaNumpy, t");
  viaNumpy.dispose();
  again.dispose();
  back.dispose();
  t.dispose();
  m.dispose();
  assert.deepEqual(live(), before);
}, skip);
