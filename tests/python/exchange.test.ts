// The DLPack C exchange API (DLPack 1.3 `__dlpack_c_exchange_api__`) on both sides of the bridge:
// DLPackTensor's table field by field and under hostile calls, fromPython through producers' tables
// (torch, tvm-ffi, a ctypes-made fake) and toPython({ as }) through theirs. Counters kept by the
// native side (`dlpack_ts._native_exchange_counts()`) and producers whose `__dlpack__` raises show
// that the table was used, not the `__dlpack__` fallback.
import assert from "node:assert/strict";
import { fromPython, toPython } from "../../python.ts";
import { producerStream } from "../../cuda.ts";
import { missing, noPython, python } from "../support/python.ts";
import { collectGarbage, repoRoot, runIsolated, test } from "../support/harness.ts";
import { live, refused, settledLive } from "../support/assertions.ts";
import { fakeDriverPath } from "../support/fakecuda.ts";
import { runtime } from "../../ffi/mod.ts";
import { COUNTER_NAMES, INSTALL_XT } from "./exchange_ctypes.ts";
import { childEnv, PEERS } from "../support/peers.ts";

const skip = { skip: noPython };
const noTorch = missing("torch");
const noTvm = missing("tvm_ffi");
const withTorch = { skip: noTorch };
const withTvm = { skip: noTvm };

type Counts = Record<(typeof COUNTER_NAMES)[number], number>;

function counts(): Counts {
  const py = python();
  const values = py.eval("__import__('dlpack_ts')._native_exchange_counts()").toJS() as number[];
  return Object.fromEntries(COUNTER_NAMES.map((name, i) => [name, values[i]])) as Counts;
}

/** What changed in the counters while `fn` ran. */
function delta(fn: () => void): Partial<Counts> {
  const before = counts();
  fn();
  const after = counts();
  const changed: Partial<Counts> = {};
  for (const name of COUNTER_NAMES) if (after[name] !== before[name]) changed[name] = after[name] - before[name];
  return changed;
}

function setup(): ReturnType<typeof python> {
  const py = python();
  py.exec(INSTALL_XT);
  return py;
}

/**
 * The counters once nothing earlier files left behind is still coming down. JS and Python garbage
 * feed each other (a collected JS handle drops a Python reference, which may leave a cycle only
 * Python's collector frees, whose export then unpins JS memory), so both collect in turns until a
 * whole round changes nothing.
 */
async function settled(): Promise<ReturnType<typeof live>> {
  const py = python();
  let previous = await settledLive();
  for (let round = 0; round < 10; round++) {
    py.exec("import gc\ngc.collect()");
    const now = await settledLive();
    if (JSON.stringify(now) === JSON.stringify(previous)) return now;
    previous = now;
  }
  return previous;
}

/** Drops Python's references and JS's, then expects the counters back where they were. */
async function balanced(before: ReturnType<typeof live>, names: string): Promise<void> {
  const py = python();
  py.exec(
    `for _n in ${
      JSON.stringify(names.split(" ").filter(Boolean))
    }:\n    globals().pop(_n, None)\nimport gc\ngc.collect()`,
  );
  await collectGarbage();
  const after = await settled();
  const { pinned, ...counts } = after;
  const { pinned: pinnedBefore, ...countsBefore } = before;
  assert.deepEqual(counts, countsBefore, "every import, export and allocation released");
  // Pins are process-wide, and in a shared test process memory earlier files exported to a
  // framework can come back while this test runs (seen in full runs only, about one in three):
  // none may be left over, fewer is another file's release. This test's own exports are live
  // export records, which the exact check above covers.
  assert.ok(pinned <= pinnedBefore, `pins released: ${pinned} live, ${pinnedBefore} before`);
}

test("DLPackTensor's table: every 1.3 field at its offset, each function called there", async () => {
  const py = setup();
  const before = await settled();
  const x = new Float32Array([1, 2, 3, 4, 5, 6]);
  using d = toPython(x, py, { shape: [2, 3] });
  py.set("d", d);
  const seen = delta(() =>
    py.exec(`
import ctypes, numpy as np, dlpack_ts
from ctypes import byref, c_void_p, c_int64
f = xt.Functions(xt.table_of(type(d)))
assert type(d).__dlpack_c_exchange_api__ is dlpack_ts.DLPackTensor.__dlpack_c_exchange_api__
fields = f.fields
assert (fields["major"], fields["minor"], fields["prev_api"]) == (1, 3, 0), fields
assert all(fields[n] for n, _, _ in xt.LAYOUT[3:]), fields
address = np.from_dlpack(d).ctypes.data
out = c_void_p()
assert f.from_object(id(d), byref(out)) == 0
m = xt.Managed.from_address(out.value)
t = m.dl_tensor
assert (m.major, m.minor, m.flags) == (1, 3, 0)
assert (t.data, t.device_type, t.device_id, t.code, t.bits, t.lanes, t.byte_offset) == (address, 1, 0, 2, 32, 1, 0)
assert xt.shape_of(m) == ([2, 3], [3, 1])
made = c_void_p()
assert f.to_object(out.value, byref(made)) == 0  # takes the struct over
back = xt.take_object(made.value)
assert type(back) is dlpack_ts.DLPackTensor and back.shape == (2, 3)
np.from_dlpack(back)[1, 2] = 60
lent = xt.DLTensor()
assert f.dltensor(id(d), byref(lent)) == 0
assert (lent.data, lent.ndim, lent.shape[0], lent.shape[1]) == (address, 2, 2, 3)
stream = c_void_p(1234)
assert f.stream(2, 0, byref(stream)) == 0 and stream.value is None
assert f.stream(1, 0, byref(stream)) == 0 and stream.value is None
extents = (c_int64 * 2)(3, 5)
proto = xt.DLTensor(None, 1, 0, 2, 2, 64, 1, extents, None, 0)
fresh = c_void_p()
assert f.allocate(byref(proto), byref(fresh), None, None) == 0
n = xt.Managed.from_address(fresh.value)
assert (n.major, n.flags, n.dl_tensor.code, n.dl_tensor.bits) == (1, 0, 2, 64)
assert xt.shape_of(n) == ([3, 5], [5, 1])
assert all(v == 0 for v in (ctypes.c_double * 15).from_address(n.dl_tensor.data))
xt.release(fresh.value)
del m, t, n
`)
  );
  assert.deepEqual(seen, {
    fromPyObject: 1,
    toPyObject: 1,
    dltensorFromPyObject: 1,
    currentWorkStream: 2,
    allocator: 1,
    dunderDlpack: 2, // the two np.from_dlpack calls
  });
  assert.equal(x[5], 60, "the object made by managed_tensor_to_py_object_no_sync shares the JS memory");
  d.dispose();
  await balanced(before, "d f fields address out made back lent stream extents proto fresh");
}, skip);

test("DLPackTensor's table survives hostile calls from Python (child process)", () => {
  const source = `
import { openPython, toPython } from "${repoRoot}/python.ts";
const py = openPython();
py.exec(${JSON.stringify(INSTALL_XT)});
py.set("d", toPython(new Float32Array(4), py));
py.set("ro", toPython(new Float32Array(4), py, { readonly: true }));
py.exec(${JSON.stringify(HOSTILE)});
console.log(py.eval("result").toJS());
`;
  const out = runIsolated(source);
  assert.equal(out.code, 0, `exit ${out.code}: ${out.stderr.slice(-3000)}`);
  assert.match(out.stdout, /hostile calls refused: 25/, out.stdout + out.stderr.slice(-2000));
}, skip);

// Each hostile call must fail with the named exception (or succeed where noted), never crash.
const HOSTILE = `
import ctypes, numpy as np, dlpack_ts
from ctypes import byref, c_void_p, c_int64
f = xt.Functions(xt.table_of(dlpack_ts.DLPackTensor))
out = c_void_p()
refused = 0

def expect(kind, call):
    global refused
    try:
        call()
    except kind:
        refused += 1
        return
    raise AssertionError("no %s from %r" % (kind.__name__, call))

expect(TypeError, lambda: f.from_object(id(d), None))
expect(TypeError, lambda: f.from_object(None, byref(out)))
expect(TypeError, lambda: f.from_object(8, byref(out)))
expect(TypeError, lambda: f.from_object(id(42), byref(out)))
expect(TypeError, lambda: f.from_object(id(np.zeros(3)), byref(out)))
assert out.value is None
expect(TypeError, lambda: object.__new__(dlpack_ts.DLPackTensor))  # only dlpack-ts makes them
other = np.zeros(2).__dlpack__(max_version=(1, 0))
expect(TypeError, lambda: f.from_object(id(other), byref(out)))  # a DLPack capsule is no tensor
junk = ctypes.create_string_buffer(256)
# Read-only data is lent as a versioned struct marked READ_ONLY, never as a bare DLTensor.
assert f.from_object(id(ro), byref(out)) == 0 and xt.Managed.from_address(out.value).flags == 1
xt.release(out.value)
out = c_void_p()
expect(BufferError, lambda: f.dltensor(id(ro), byref(xt.DLTensor())))
expect(TypeError, lambda: f.dltensor(id(d), None))
expect(TypeError, lambda: f.dltensor(id([]), byref(xt.DLTensor())))
expect(TypeError, lambda: f.stream(2, 0, None))
expect(TypeError, lambda: f.to_object(None, byref(out)))
expect(TypeError, lambda: f.to_object(16, byref(out)))
bad = xt.Managed(9, 0, None, None, 0)  # a future major: refused, its (NULL) deleter not called
expect(BufferError, lambda: f.to_object(ctypes.addressof(bad), byref(out)))
deleted = []
deleter = xt.DELETER(lambda address: deleted.append(address))
extents = (c_int64 * 1)(4)
odd = xt.Managed(1, 3, None, ctypes.cast(deleter, c_void_p).value, 0,
                 xt.DLTensor(ctypes.addressof(junk), 1, 0, 1, 99, 32, 1, extents, None, 0))
expect(BufferError, lambda: f.to_object(ctypes.addressof(odd), byref(out)))  # dtype code 99
assert deleted == [ctypes.addressof(odd)], deleted  # ownership passed: released exactly once
good = xt.Managed(1, 3, None, ctypes.cast(deleter, c_void_p).value, 0,
                  xt.DLTensor(ctypes.addressof(junk), 1, 0, 1, 2, 32, 1, extents, None, 0))
expect(TypeError, lambda: f.to_object(ctypes.addressof(good), None))
proto = xt.DLTensor(None, 1, 0, 1, 2, 32, 1, extents, None, 0)
expect(ValueError, lambda: f.allocate(None, byref(out), None, None))
expect(ValueError, lambda: f.allocate(byref(proto), None, None, None))
for change in ({"ndim": -1}, {"ndim": 1000}, {"code": 3}, {"bits": 4, "code": 17}, {"shape": None}):
    p = xt.DLTensor(None, 1, 0, 1, 2, 32, 1, extents, None, 0)
    for k, v in change.items():
        setattr(p, k, v)
    expect(ValueError, lambda: f.allocate(byref(p), byref(out), None, None))
huge = (c_int64 * 2)(1 << 40, 1 << 40)
expect(ValueError, lambda: f.allocate(byref(xt.DLTensor(None, 1, 0, 2, 2, 32, 1, huge, None, 0)), byref(out), None, None))
reported = []
set_error = xt.SET_ERROR(lambda ctx, kind, message: reported.append((ctx, kind, message)))
gpu = xt.DLTensor(None, 2, 0, 1, 2, 32, 1, extents, None, 0)
assert f.allocate(byref(gpu), byref(out), 77, ctypes.cast(set_error, c_void_p).value) == -1
assert len(reported) == 1 and reported[0][0] == 77 and reported[0][1] == b"BufferError", reported
# Without SetError the same kind is raised.
expect(BufferError, lambda: f.allocate(byref(gpu), byref(out), None, None))
# The same refusal with the GIL released by ctypes: the function takes it to set the exception.
try:
    f.from_object_nogil(id(42), byref(out))
except (TypeError, SystemError):
    pass
result = "hostile calls refused: %d" % refused
`;

test("fromPython takes a producer's table: no __dlpack__ call, stream and refusals (ctypes fake)", async () => {
  const py = setup();
  const before = await settled();
  py.exec("xt.Fake.behaviour = 'ok'; xt.Fake.device_type = 1; xt.Fake.code = 2; fake = xt.FakeTensor()");
  using fake = py.eval("fake");
  const deletedBefore = py.eval("xt.Fake.deleted").toJS() as number;
  const madeBefore = py.eval("xt.Fake.made").toJS() as number;
  let seen = delta(() => {
    using v = fromPython(fake);
    assert.equal(v.producer, "xt.FakeTensor");
    assert.deepEqual(Array.from(v.array() as Float32Array), [1, 2, 3, 4]);
  });
  assert.deepEqual(seen, { consumerImports: 1 });
  // A table of a newer major is followed through prev_api to the 1.x one.
  using newer = py.eval("xt.FakeNewerTensor()");
  seen = delta(() => fromPython(newer).dispose());
  assert.deepEqual(seen, { consumerImports: 1 });
  // A newer major with nothing older, and the 1.2 integer form, are not used: __dlpack__ is.
  using unusable = py.eval("xt.FakeUnusableTensor()");
  refused(() => fromPython(unusable), "python", /FakeTensor.__dlpack__ must not be called/);
  using intForm = py.eval("xt.IntTableTensor(__import__('numpy').arange(3.0))");
  seen = delta(() => {
    using v = fromPython(intForm);
    assert.deepEqual(Array.from(v.array() as Float64Array), [0, 1, 2]);
  });
  assert.deepEqual(seen, {});
  // The same table on a class left mutable: nothing ties its code to the class, so __dlpack__.
  using loose = py.eval("xt.LooseTensor(__import__('numpy').arange(2.0))");
  seen = delta(() => {
    using v = fromPython(loose);
    assert.deepEqual(Array.from(v.array() as Float64Array), [0, 1]);
  });
  assert.deepEqual(seen, {});
  // Options the table cannot serve go through __dlpack__ (which this producer refuses).
  refused(() => fromPython(fake, { maxVersion: null }), "python", /must not be called/);
  refused(() => fromPython(fake, { copy: true }), "python", /must not be called/);
  refused(() => fromPython(fake, { device: { type: "cpu" } }), "python", /must not be called/);
  // CUDA data: the producer's current work stream becomes the view's producer stream.
  py.exec("xt.Fake.device_type = 2; xt.Fake.streams_asked.clear()");
  {
    using v = fromPython(fake);
    assert.equal(v.device.type, "cuda");
    assert.equal(producerStream(v), 0x5000n);
    assert.deepEqual(py.eval("xt.Fake.streams_asked").toJS(), [[2, 0]]);
  }
  py.exec("xt.Fake.device_type = 1");
  // A tensor the validator refuses is released at once, exactly once, with the validator's code.
  py.exec("xt.Fake.code = 99");
  const deleted = py.eval("xt.Fake.deleted").toJS() as number;
  refused(() => fromPython(fake), "dtype");
  assert.equal(py.eval("xt.Fake.deleted").toJS(), deleted + 1);
  py.exec("xt.Fake.code = 2; xt.Fake.behaviour = 'null'");
  refused(() => fromPython(fake), "python", /returned no tensor/);
  py.exec("xt.Fake.behaviour = 'fail'");
  refused(() => fromPython(fake), "python", /without setting an exception/);
  py.exec("xt.Fake.behaviour = 'ok'");
  assert.equal((py.eval("xt.Fake.made").toJS() as number) - madeBefore, 4);
  assert.equal((py.eval("xt.Fake.deleted").toJS() as number) - deletedBefore, 4, "each tensor released once");
  fake.dispose();
  newer.dispose();
  unusable.dispose();
  intForm.dispose();
  loose.dispose();
  await balanced(before, "fake");
}, skip);

test("CUDA exports with a producer stream never go through the table (fake driver, child process)", () => {
  const source = `
import assert from "node:assert/strict";
import { empty, stats } from "${repoRoot}/mod.ts";
import * as cuda from "${repoRoot}/cuda.ts";
import { bindFakeDriver } from "${repoRoot}/tests/support/fakecuda.ts";
import { fromPython, openPython, toPython } from "${repoRoot}/python.ts";
const fake = bindFakeDriver(${JSON.stringify(fakeDriverPath())});
const py = openPython();
const counts = () => py.eval("__import__('dlpack_ts')._native_exchange_counts()").toJS() as number[];
const diff = (a: number[], b: number[]) => b.map((v, i) => v - a[i]);
const d = empty([4], "float32", { device: { type: "cuda", id: 0 } });
// Data ready on the legacy default stream: the table lends it (the view's stream is NULL).
let obj = toPython(d, py);
let before = counts();
let v = fromPython(obj);
// from_py_object, then current_work_stream (CUDA data), one import through the table.
assert.deepEqual(diff(before, counts()), [0, 1, 0, 0, 1, 1, 0, 0, 0]);
assert.equal(v.address, d.address);
assert.equal(cuda.producerStream(v), null);
v.dispose();
obj.dispose();
// Data ready on a stream of its own: the table refuses, __dlpack__ fences the consumer on it.
const producer = cuda.createStream();
cuda.setProducerStream(d, producer);
obj = toPython(d, py);
before = counts();
const waits = fake.stats().waits;
v = fromPython(obj);
assert.deepEqual(diff(before, counts()), [0, 1, 0, 0, 0, 0, 1, 0, 1]);
assert.equal(fake.stats().waits, waits + 1, "__dlpack__(stream=None) made the legacy stream wait");
assert.equal(v.address, d.address);
v.dispose();
obj.dispose();
const DLPackTensor = py.eval("__import__('dlpack_ts').DLPackTensor");
assert.throws(() => toPython(d, py, { as: DLPackTensor }), /producer stream/);
DLPackTensor.dispose();
d.dispose();
cuda.destroyStream(producer);
py.exec("import gc; gc.collect()");
const s = stats();
console.log("RESULT", s.imports, s.exports, s.pinned);
`;
  const out = runIsolated(source, { env: { DLPACK_CUDA_LIB: fakeDriverPath(), FAKECUDA_DEVICES: "1" } });
  assert.equal(out.code, 0, `exit ${out.code}: ${out.stderr.slice(-3000)}`);
  assert.match(out.stdout, /RESULT 0 0 0/, out.stdout + out.stderr.slice(-2000));
}, skip);

test("fromPython of a DLPackTensor takes its own table, read-only data marked READ_ONLY there", async () => {
  const py = setup();
  const before = await settled();
  const x = new Int32Array([1, 2, 3]);
  using d = toPython(x, py);
  let seen = delta(() => {
    using v = fromPython(d);
    assert.equal(v.producer, "dlpack_ts.DLPackTensor");
    assert.equal(v.access, "readwrite");
    (v.array() as Int32Array)[0] = 10;
  });
  assert.deepEqual(seen, { fromPyObject: 1, consumerImports: 1 });
  assert.equal(x[0], 10);
  using ro = toPython(x, py, { readonly: true });
  seen = delta(() => {
    using v = fromPython(ro);
    assert.equal(v.access, "readonly", "the table's struct says READ_ONLY");
    assert.equal(v.flags.readOnly, true);
  });
  assert.deepEqual(seen, { fromPyObject: 1, consumerImports: 1 });
  d.dispose();
  ro.dispose();
  await balanced(before, "");
}, skip);

test("torch's table: every 1.3 field at its offset, each function called there", () => {
  const py = setup();
  py.exec(`
import torch
from ctypes import byref, c_void_p, c_int64
f = xt.Functions(xt.table_of(torch.Tensor))
fields = f.fields
assert (fields["major"], fields["minor"], fields["prev_api"]) == (1, 3, 0), fields
assert all(fields[n] for n, _, _ in xt.LAYOUT[3:]), fields
src = torch.arange(6, dtype=torch.float32).reshape(2, 3)
out = c_void_p()
assert f.from_object(id(src), byref(out)) == 0
m = xt.Managed.from_address(out.value)
assert (m.major, m.dl_tensor.data, m.dl_tensor.code, m.dl_tensor.bits) == (1, src.data_ptr(), 2, 32)
assert xt.shape_of(m) == ([2, 3], [3, 1])
made = c_void_p()
assert f.to_object(out.value, byref(made)) == 0
back = xt.take_object(made.value)
assert isinstance(back, torch.Tensor) and back.data_ptr() == src.data_ptr()
lent = xt.DLTensor()
assert f.dltensor(id(src), byref(lent)) == 0 and lent.data == src.data_ptr()
stream = c_void_p(99)
assert f.stream(1, 0, byref(stream)) == 0 and not stream.value
extents = (c_int64 * 1)(7)
proto = xt.DLTensor(None, 1, 0, 1, 0, 64, 1, extents, None, 0)
fresh = c_void_p()
assert f.allocate(byref(proto), byref(fresh), None, None) == 0
assert xt.shape_of(xt.Managed.from_address(fresh.value))[0] == [7]
xt.release(fresh.value)
del f, fields, src, out, m, made, back, lent, stream, extents, proto, fresh
`);
}, withTorch);

test("fromPython of torch tensors goes through torch's table (a subclass whose __dlpack__ raises)", async () => {
  const py = setup();
  const before = await settled();
  py.exec(`
import torch
class NoDlpack(torch.Tensor):
    def __dlpack__(self, *args, **kwargs):
        raise RuntimeError("NoDlpack.__dlpack__ must not be called")
base = torch.arange(12, dtype=torch.float32).reshape(3, 4)
sub = base.as_subclass(NoDlpack)
`);
  using sub = py.eval("sub");
  let seen = delta(() => {
    using v = fromPython(sub);
    assert.equal(v.producer, "__main__.NoDlpack");
    assert.deepEqual(v.shape, [3, 4]);
    assert.equal(v.access, "readwrite");
    assert.equal(v.version?.major, 1);
    assert.equal(v.address, BigInt(py.eval("base.data_ptr()").toJS() as number));
    v.set(-1, 2, 3);
  });
  assert.deepEqual(seen, { consumerImports: 1 });
  assert.equal(py.eval("float(base[2, 3])").toJS(), -1, "zero-copy: the write landed in torch's memory");
  // Transposed and sliced tensors keep their strides; torch's const table marks read-only data.
  using t = py.eval("base.t()[1:]");
  seen = delta(() => {
    using v = fromPython(t);
    assert.deepEqual(v.shape, [3, 3]);
    assert.deepEqual(v.strides, [1, 4]);
  });
  assert.deepEqual(seen, { consumerImports: 1 });
  using wrapped = py.eval("torch.utils.dlpack.ReadOnlyTensorWrapper(base)");
  seen = delta(() => {
    using v = fromPython(wrapped);
    assert.equal(v.access, "readonly");
  });
  assert.deepEqual(seen, { consumerImports: 1 });
  // Options the table cannot serve take __dlpack__, which this subclass refuses.
  refused(() => fromPython(sub, { copy: true }), "python", /must not be called/);
  refused(() => fromPython(sub, { maxVersion: null }), "python", /must not be called/);
  // A torch tensor torch's table refuses (no storage) reports torch's error.
  using sparse = py.eval("torch.ones(2, 2).to_sparse()");
  refused(() => fromPython(sparse), "python", /storage/);
  sub.dispose();
  t.dispose();
  wrapped.dispose();
  sparse.dispose();
  await balanced(before, "base sub NoDlpack");
}, withTorch);

test("toPython({ as: torch.Tensor }) makes a torch tensor through torch's table", async () => {
  const py = setup();
  const before = await settled();
  const x = new Float64Array([1, 2, 3, 4, 5, 6]);
  using Tensor = py.eval("__import__('torch').Tensor");
  let t!: ReturnType<typeof toPython>;
  const seen = delta(() => (t = toPython(x, py, { as: Tensor, shape: [2, 3] })));
  assert.deepEqual(seen, { consumerToPyObject: 1 });
  py.set("t", t);
  assert.equal(py.eval("type(t).__name__ + str(tuple(t.shape)) + str(t.dtype)").toJS(), "Tensor(2, 3)torch.float64");
  py.exec("t.mul_(10)");
  assert.deepEqual(Array.from(x), [10, 20, 30, 40, 50, 60], "torch wrote into the JS memory");
  x[0] = -1;
  assert.equal(py.eval("float(t[0, 0])").toJS(), -1);
  refused(() => toPython(x, py, { as: Tensor, readonly: true }), "readonly", /READ_ONLY/);
  using int = py.eval("int");
  refused(() => toPython(x, py, { as: int }), "python", /int has no DLPack C exchange API/);
  using three = py.eval("3");
  refused(() => toPython(x, py, { as: three }), "python", /must be a type/);
  refused(() => toPython(x, py, { as: { handle: 1 } as never }), "argument", /must be a PyObject/);
  assert.equal(live().exports, before.exports + 1, "refusals released their exports");
  t.dispose();
  await balanced(before, "t");
}, withTorch);

test("tvm-ffi takes JS exports through DLPackTensor's table, __dlpack__ never called", async () => {
  const py = setup();
  const before = await settled();
  const x = new Float32Array([1, 2, 3, 4]);
  const r = new Float32Array([5, 6]);
  using d = toPython(x, py);
  using ro = toPython(r, py, { readonly: true });
  py.set("d", d);
  py.set("ro", ro);
  py.exec("import tvm_ffi, tvm_ffi.testing, numpy as np, dlpack_ts");
  let seen = delta(() => {
    py.exec("t = tvm_ffi.from_dlpack(d)\nnp.from_dlpack(t)[0] = 10");
    // A tvm-ffi function call takes the argument through the table and gives its result back
    // as a DLPackTensor made by the table's managed_tensor_to_py_object_no_sync.
    py.exec("r = tvm_ffi.testing._ffi_api.schema_id_tensor(d)");
  });
  assert.deepEqual(seen, { fromPyObject: 2, toPyObject: 1 }, "no __dlpack__ call");
  assert.equal(x[0], 10, "tvm-ffi's tensor shares the JS memory");
  assert.equal(py.eval("type(r).__name__").toJS(), "DLPackTensor");
  // Read-only data goes through the table too, its struct marked READ_ONLY (tvm-ffi drops the
  // flag: its tensor is writable, as it is when tvm-ffi imports a read-only capsule).
  seen = delta(() => py.exec("tr = tvm_ffi.from_dlpack(ro)\nassert tr.shape == (2,)"));
  assert.deepEqual(seen, { fromPyObject: 1 }, "no __dlpack__ call");
  assert.equal(
    py.eval("tr.data_ptr()").toJS(),
    Number(runtime().addressOf(r)),
    "tvm-ffi's tensor shares the read-only JS memory",
  );
  d.dispose();
  ro.dispose();
  await balanced(before, "d ro t r tr");
}, withTvm);

test("fromPython and toPython({ as }) use tvm-ffi's table", async () => {
  const py = setup();
  const before = await settled();
  py.exec(`
import tvm_ffi, numpy as np
class NoDlpackWrapper(tvm_ffi.core.DLTensorTestWrapper):
    def __dlpack__(self, **kwargs):
        raise RuntimeError("NoDlpackWrapper.__dlpack__ must not be called")
source = np.arange(5, dtype=np.int32)
w = NoDlpackWrapper(tvm_ffi.from_dlpack(source))
`);
  using w = py.eval("w");
  let seen = delta(() => {
    using v = fromPython(w);
    assert.equal(v.producer, "__main__.NoDlpackWrapper");
    assert.deepEqual(Array.from(v.array() as Int32Array), [0, 1, 2, 3, 4]);
    assert.equal(v.address, BigInt(py.eval("source.ctypes.data").toJS() as number));
  });
  assert.deepEqual(seen, { consumerImports: 1 });
  const x = new Float64Array([5, 6]);
  using Wrapper = py.eval("tvm_ffi.core.DLTensorTestWrapper");
  seen = delta(() => {
    using made = toPython(x, py, { as: Wrapper });
    py.set("made", made);
    py.exec("np.from_dlpack(made)[1] = 60");
  });
  assert.deepEqual(seen, { consumerToPyObject: 1 });
  assert.equal(x[1], 60);
  w.dispose();
  await balanced(before, "w source made NoDlpackWrapper");
}, withTvm);

/** Runs `source` in a fresh process and returns the JSON it printed after "RESULT ", or fails with
 * the child's output (a crash fails the test, not the runner). */
// deno-lint-ignore no-explicit-any
function childResult(source: string, env?: Record<string, string>): Record<string, any> {
  const run = runIsolated(source, env === undefined ? {} : { env });
  const line = run.stdout.split("\n").find((l) => l.startsWith("RESULT "));
  assert.ok(
    run.code === 0 && line !== undefined,
    `exit ${run.code}: ${run.stdout.slice(-1000)}${run.stderr.slice(-3000)}`,
  );
  return JSON.parse(line.slice("RESULT ".length));
}

/** Why a module's test skips, found without importing it (paddle must not load into the process
 * that loads the other peers), or false. */
function findable(name: string): string | false {
  if (noPython) return noPython;
  using found = python().eval(`__import__('importlib.util').util.find_spec('${name}') is not None`);
  return found.toJS() === true ? false : `${name} is not installed for this Python (tools/python.sh installs it)`;
}

test(
  "one export is adopted once through managed_tensor_to_py_object_no_sync, whichever way it returns (child process)",
  () => {
    const source = `
import { exportDLPack, importDLPack, stats } from "${repoRoot}/mod.ts";
import { openPython, toPython } from "${repoRoot}/python.ts";
const py = openPython();
py.exec(${JSON.stringify(INSTALL_XT)});
const out: Record<string, unknown> = {};
const x = new Float32Array([1, 2, 3, 4]);
const d = toPython(x, py);
py.set("d", d);
d.dispose();
py.exec(${JSON.stringify(TWICE)});
out.second = py.eval("second").toJS();
// An export a raw import took cannot be adopted, and one adopted cannot be imported raw.
const taken = exportDLPack(x).take();
const view = importDLPack({ versioned: taken });
py.exec("third = adopt(" + taken + ")");
out.third = py.eval("third").toJS();
out.value = view.get(0);
view.dispose();
const adopted = exportDLPack(x).take();
py.exec("fourth = adopt(" + adopted + ")");
try {
  importDLPack({ versioned: adopted });
  out.raw = "accepted";
} catch (error) {
  out.raw = (error as { code?: string }).code;
}
py.exec("np.from_dlpack(fourth)[1] = 20\\ndel fourth, third, second\\ngc.collect()");
out.x = Array.from(x);
const s = stats();
out.live = [s.imports, s.exports, s.pinned];
console.log("RESULT " + JSON.stringify(out));
`;
    const out = childResult(source);
    assert.match(out.second, /BufferError: .*refused \(already_imported\)/, "the second adoption is refused");
    assert.match(out.third, /BufferError: .*already_imported/);
    assert.equal(out.value, 10, "the raw import still reads the JS memory");
    assert.equal(out.raw, "consumed");
    assert.deepEqual(out.x, [10, 20, 3, 4]);
    assert.deepEqual(out.live, [0, 0, 0], "every export released once, every pin swept");
  },
  skip,
);

// One export of DLPackTensor's table handed to its own managed_tensor_to_py_object_no_sync twice.
const TWICE = `
import ctypes, gc, numpy as np, dlpack_ts
from ctypes import byref, c_void_p
f = xt.Functions(xt.table_of(dlpack_ts.DLPackTensor))
def adopt(address):
    made = c_void_p()
    try:
        assert f.to_object(address, byref(made)) == 0
    except BufferError as error:
        assert made.value is None
        return "BufferError: " + str(error)
    return xt.take_object(made.value)
e = c_void_p()
assert f.from_object(id(d), byref(e)) == 0
first = adopt(e.value)
second = adopt(e.value)
np.from_dlpack(first)[0] = 10
del d, first
gc.collect()
`;

test(
  "fromPython uses a table only where it belongs to the object's type; copied capsules take __dlpack__ (child process)",
  () => {
    const source = `
import { fromPython, openPython, toPython } from "${repoRoot}/python.ts";
import { stats } from "${repoRoot}/mod.ts";
const py = openPython();
py.exec(${JSON.stringify(FORGED)});
const counts = () => py.eval("__import__('dlpack_ts')._native_exchange_counts()").toJS() as number[];
const out: Record<string, unknown> = {};
const before = counts();
for (const name of ["Forge()", "ForgeBytes()", "ForgeTorch()", "Later()", "ByMeta()", "MixedTorch()", "OnDLPackTensor()"]) {
  const o = py.eval(name);
  const v = fromPython(o);
  out[name] = [v.producer, ...Array.from(v.array() as Float64Array)];
  v.dispose();
  o.dispose();
}
const after = counts();
out.tableImports = after[5] - before[5];
for (const name of ["Forge", "Later"]) {
  const kind = py.eval(name);
  try {
    toPython(new Float64Array(2), py, { as: kind });
    out["as " + name] = "made";
  } catch (error) {
    out["as " + name] = (error as Error).message.split("\\n")[0];
  }
  kind.dispose();
}
py.exec("import gc; gc.collect()");
const s = stats();
out.live = [s.imports, s.exports, s.pinned];
console.log("RESULT " + JSON.stringify(out));
`;
    const out = childResult(source);
    for (
      const name of [
        "Forge()",
        "ForgeBytes()",
        "ForgeTorch()",
        "Later()",
        "ByMeta()",
        "MixedTorch()",
        "OnDLPackTensor()",
      ]
    ) {
      assert.deepEqual(out[name].slice(1), [0, 1, 2], `${name}: imported through __dlpack__`);
    }
    assert.equal(out.tableImports, 0, "no foreign table ran on an object it was not made for");
    assert.match(out["as Forge"], /Forge has no DLPack C exchange API/);
    assert.match(out["as Later"], /Later has no DLPack C exchange API/);
    assert.deepEqual(out.live, [0, 0, 0]);
  },
  { skip: noTorch || noTvm },
);

// Classes carrying genuine capsules of other types: tvm-ffi's test wrapper (whose functions cast
// the object unchecked), torch's and DLPackTensor's. Each has a __dlpack__ over numpy memory.
const FORGED = `
import numpy as np, torch, tvm_ffi, dlpack_ts
wrapper_api = tvm_ffi.core.DLTensorTestWrapper.__dlpack_c_exchange_api__
torch_api = torch.Tensor.__dlpack_c_exchange_api__
def _dlpack(self, **kw):
    return np.arange(3.0).__dlpack__(**kw)
class Forge:
    __dlpack_c_exchange_api__ = wrapper_api
    __dlpack__ = _dlpack
class ForgeBytes(bytearray):
    __dlpack_c_exchange_api__ = torch_api
    __dlpack__ = _dlpack
class ForgeTorch(torch.Tensor):
    __dlpack_c_exchange_api__ = wrapper_api
    def __new__(cls):
        return torch.arange(3.0, dtype=torch.float64).as_subclass(cls)
class Later:
    __dlpack__ = _dlpack
Later.__dlpack_c_exchange_api__ = torch_api
class Meta(type):
    __dlpack_c_exchange_api__ = wrapper_api
class ByMeta(metaclass=Meta):
    __dlpack__ = _dlpack
class Mixin:
    __dlpack_c_exchange_api__ = wrapper_api
class MixedTorch(Mixin, torch.Tensor):
    def __new__(cls):
        return torch.arange(3.0, dtype=torch.float64).as_subclass(cls)
class OnDLPackTensor:
    __dlpack_c_exchange_api__ = dlpack_ts.DLPackTensor.__dlpack_c_exchange_api__
    __dlpack__ = _dlpack
`;

test("torch's conjugate and negative bits are resolved or refused, tensors requiring gradients refused", async () => {
  const py = setup();
  const before = await settled();
  py.exec(`
import torch
c = torch.tensor([1+2j, 3-4j])
cj = torch.conj(c)                 # the conjugate bit over c's memory
ng = cj.imag                       # the negative bit over c's memory
nr = torch._neg_view(torch.tensor([1., 2.]))
class Sub(torch.Tensor):
    pass
cjs = cj.as_subclass(Sub)
rg = torch.tensor([1., 2.], requires_grad=True)
assert cj.is_conj() and ng.is_neg() and nr.is_neg() and cjs.is_conj()
`);
  const expected: Record<string, unknown> = {
    cj: [[1, -2], [3, 4]],
    ng: [-2, 4],
    nr: [-1, -2],
    cjs: [[1, -2], [3, 4]],
  };
  const memory = BigInt(py.eval("c.data_ptr()").toJS() as number);
  for (const [name, values] of Object.entries(expected)) {
    using o = py.eval(name);
    for (const opts of [undefined, { maxVersion: null }, { copy: true }, { copy: null }]) {
      using v = fromPython(o, opts);
      assert.deepEqual(v.toNested(), values, `${name} ${JSON.stringify(opts)}: the values torch stands for`);
      assert.equal(v.flags.isCopied, true, `${name}: a copy torch made`);
      assert.notEqual(v.address, memory);
    }
    refused(() => fromPython(o, { copy: false }), "python", /BufferError: .*conjugate or negative bit set/);
  }
  using rg = py.eval("rg");
  for (const opts of [undefined, { maxVersion: null }, { copy: true }]) {
    refused(() => fromPython(rg, opts), "python", /BufferError: Can't export tensors that require gradient/);
  }
  // A tensor with none of these still goes through torch's table, without a copy.
  using plain = py.eval("c");
  const seen = delta(() => {
    using v = fromPython(plain);
    assert.equal(v.address, memory);
    assert.equal(v.flags.isCopied, false);
  });
  assert.deepEqual(seen, { consumerImports: 1 });
  await balanced(before, "c cj ng nr cjs rg Sub");
}, withTorch);

test("PaddlePaddle tensors requiring gradients are refused as paddle refuses them (child process)", () => {
  const paddle = PEERS.find((p) => p.name === "PaddlePaddle")!;
  const source = `
import { fromPython, openPython } from "${repoRoot}/python.ts";
const py = openPython();
py.exec("import paddle, numpy as np\\ng = paddle.to_tensor(np.arange(3.0), stop_gradient=False)\\np = paddle.to_tensor(np.arange(3.0))");
const counts = () => py.eval("__import__('dlpack_ts')._native_exchange_counts()").toJS() as number[];
const out: Record<string, unknown> = { grad: [] };
for (const opts of [undefined, { maxVersion: null }, { copy: true }]) {
  try {
    fromPython(py.eval("g"), opts);
    (out.grad as string[]).push("imported");
  } catch (error) {
    (out.grad as string[]).push((error as Error).message.split("\\n")[0]);
  }
}
const before = counts()[5];
const v = fromPython(py.eval("p"));
out.plain = [Array.from(v.array() as Float64Array), v.access, counts()[5] - before];
v.dispose();
console.log("RESULT " + JSON.stringify(out));
`;
  const out = childResult(source, childEnv(paddle));
  for (const g of out.grad) assert.match(g, /BufferError: Can't get __dlpack__ from Tensor that requires gradients/);
  assert.deepEqual(out.plain, [[0, 1, 2], "readwrite", 1], "other paddle tensors go through paddle's table");
}, { skip: findable("paddle") });
