// Hostile JavaScript input to every public function: wrong types, NaN / Infinity / negative /
// fractional numbers, BigInt where numbers belong and the reverse, detached, transferred and
// resizable buffers, disposed objects, forged instances, impossible addresses, and reentrancy
// (disposing inside FinalizationRegistry callbacks and inside the pin sweep's release callbacks).
// Each one is a DLPackError with a fitting code, or the documented behaviour, and never a crash;
// live counters return to where they were.
import assert from "node:assert/strict";
import {
  arrayConstructorOf,
  BufferView,
  Capsule,
  deviceCode,
  dtypeOfArray,
  empty,
  exportDLPack,
  exportDLPackLegacy,
  fromArrayInterface,
  fromDLPack,
  importDLPack,
  share,
  stats,
  toDLDataType,
  zeros,
} from "../../mod.ts";
import { runtime } from "../../ffi/mod.ts";
import { deleted, make, tp } from "../support/producer.ts";
import { collectGarbage, gcUnavailable, test } from "../support/harness.ts";
import { live, refused } from "../support/assertions.ts";

// deno-lint-ignore no-explicit-any
const any = (x: unknown): any => x;

const BAD_NUMBERS: Record<string, unknown> = {
  NaN: NaN,
  Infinity: Infinity,
  "-Infinity": -Infinity,
  "-1": -1,
  "1.5": 1.5,
  "2^53": 2 ** 53,
  "bigint 2n": 2n,
  "string '2'": "2",
  null: null,
  object: {},
};

test("import: every source that is not a tensor is refused and nothing is taken", () => {
  const before = live();
  const proxied = exportDLPack(new Float32Array(1));
  // Values of the wrong type altogether: "argument".
  const notSources: Record<string, unknown> = {
    undefined: undefined,
    null: null,
    number: 5,
    string: "0x1000",
    array: [],
    function: () => 1,
    symbol: Symbol("s"),
    "empty object": {},
    "__dlpack__ not a function": { __dlpack__: 5 },
    "forged Capsule": Object.create(Capsule.prototype),
    "forged BufferView": Object.create(BufferView.prototype),
    "a Proxy around a Capsule": new Proxy(proxied, {}),
  };
  for (const [name, src] of Object.entries(notSources)) {
    refused(() => importDLPack(any(src)), "argument", `importDLPack(${name})`);
    refused(() => fromDLPack(any(src)), "argument", `fromDLPack(${name})`);
  }
  assert.ok(proxied.owned, "a capsule behind a Proxy is not taken");
  proxied.dispose();
  // A provider whose __dlpack__ returns no Capsule hands over a wrong argument type: "argument".
  const providers: Record<string, unknown> = {
    "__dlpack__ returning a number": { __dlpack__: () => 5 },
    "__dlpack__ returning a forged capsule": { __dlpack__: () => Object.create(Capsule.prototype) },
  };
  for (const [name, src] of Object.entries(providers)) {
    refused(() => importDLPack(any(src)), "argument", `importDLPack(${name})`);
    refused(() => fromDLPack(any(src)), "argument", `fromDLPack(${name})`);
  }
  // Objects of the right form whose addresses are not tensors: "null_data".
  const sources: Record<string, unknown> = {};
  for (const [k, v] of Object.entries(BAD_NUMBERS)) sources[`{ versioned: ${k} }`] = { versioned: v };
  for (const [k, v] of Object.entries(BAD_NUMBERS)) sources[`{ legacy: ${k} }`] = { legacy: v };
  sources["{ versioned: -1n }"] = { versioned: -1n };
  sources["{ versioned: 2n ** 64n }"] = { versioned: 2n ** 64n };
  for (const [name, src] of Object.entries(sources)) {
    refused(() => importDLPack(any(src)), "null_data", `importDLPack(${name})`);
    refused(() => fromDLPack(any(src)), "null_data", `fromDLPack(${name})`);
  }
  assert.deepEqual(live(), before);
});

test("import: addresses that cannot be a struct are refused without being read (no crash)", () => {
  // Each of these used to fault or panic inside the native validator and abort the process.
  const before = deleted();
  const made = make({ shape: [2] });
  for (const address of [8, 4095, made.address + 4, made.address + 1, 2n ** 56n, 2n ** 64n - 8n]) {
    for (const key of ["versioned", "legacy"]) {
      refused(() => importDLPack(any({ [key]: address })), "null_data", `{ ${key}: ${address} }`);
    }
  }
  assert.equal(deleted(), before, "no deleter called for an address that is not a struct");
  importDLPack(made.source).dispose();
  assert.equal(deleted(), before + 1);
});

test("import options: a bad option is refused before the tensor is taken", () => {
  const before = deleted();
  const made = make({ shape: [2] });
  const capsule = exportDLPack(new Float32Array(2));
  for (const opts of [5, "x", [], { producer: 5 }, { producer: {} }, { producer: 1n }]) {
    refused(() => importDLPack(made.source, any(opts)), "argument", `options ${String(opts)}`);
    refused(() => importDLPack(capsule, any(opts)), "argument", `options ${String(opts)} (capsule)`);
  }
  assert.equal(deleted(), before, "the tensor is still the caller's");
  assert.ok(!capsule.taken && !capsule.disposed, "the capsule is still the caller's");
  importDLPack(made.source, { producer: "testprod" }).dispose();
  importDLPack(capsule).dispose();
  assert.equal(deleted(), before + 1);
});

test("a producer's own exceptions propagate unchanged and nothing leaks", () => {
  const before = live();
  class ProducerError extends Error {}
  refusedBy(() =>
    importDLPack({
      __dlpack__: () => {
        throw new ProducerError("producer failed");
      },
    }), ProducerError);
  const trap = new Proxy({}, {
    get() {
      throw new ProducerError("trap");
    },
    has() {
      throw new ProducerError("trap");
    },
  });
  refusedBy(() => importDLPack(any(trap)), ProducerError);
  refusedBy(() => exportDLPack(new Float32Array(2), any(trap)), ProducerError);
  assert.deepEqual(live(), before);
});

function refusedBy(f: () => unknown, type: new (...args: never[]) => Error): void {
  assert.throws(f, (e: unknown) => e instanceof type);
}

test("export: wrong types, NaN / Infinity / fractional / BigInt layouts, bad options", () => {
  const before = live();
  const a = new Float32Array(8);
  for (const x of [undefined, null, 5, "x", [1, 2], {}, 5n, new ArrayBuffer(8), new DataView(new ArrayBuffer(8))]) {
    for (const f of [exportDLPack, exportDLPackLegacy, share]) refused(() => f(any(x)), "argument", `${f.name}(${x})`);
  }
  for (const [k, v] of Object.entries(BAD_NUMBERS)) {
    refused(() => exportDLPack(a, any({ shape: [v] })), "shape", `shape [${k}]`);
    refused(
      () => exportDLPack(a, any({ shape: [8], strides: [v] })),
      k === "-1" ? "shape" : "strides",
      `strides [${k}]`,
    );
    // A null offset means the default, like undefined.
    if (k !== "null") refused(() => exportDLPack(a, any({ offset: v })), "byte_offset", `offset ${k}`);
  }
  refused(() => exportDLPack(a, any({ shape: 8 })), "shape", "shape 8");
  refused(() => exportDLPack(a, any({ shape: "8" })), "shape", "shape '8'");
  refused(() => exportDLPack(a, any({ shape: new Array(65).fill(1) })), "rank", "65 dims");
  refused(() => exportDLPack(a, any({ shape: [8], strides: "1" })), "strides", "strides '1'");
  refused(() => exportDLPack(a, any({ dtype: "constructor" })), "dtype", "dtype constructor");
  refused(() => exportDLPack(a, any({ dtype: 5 })), "dtype", "dtype 5");
  for (const opts of [5, "x", []]) refused(() => exportDLPack(a, any(opts)), "argument", `options ${opts}`);
  exportDLPack(a, any(null)).dispose(); // null means no options, like undefined
  refused(() => exportDLPack(a, any({ readonly: "yes" })), "argument", "readonly 'yes'");
  refused(() => exportDLPack(a, any({ readonly: 1 })), "argument", "readonly 1");
  assert.deepEqual(live(), before, "nothing pinned by a refused export");
});

test("export: detached, resizable and growable buffers are refused; SharedArrayBuffer is fine", () => {
  const before = live();
  const detached = new Float32Array(4);
  (detached.buffer as ArrayBuffer).transfer();
  refused(() => exportDLPack(detached), "disposed", "detached");
  const resizable = new ArrayBuffer(16, { maxByteLength: 64 });
  refused(() => exportDLPack(new Float32Array(resizable)), "null_data", "resizable");
  refused(() => exportDLPack(new Float32Array(resizable, 0, 2)), "null_data", "fixed window of a resizable buffer");
  const growable = new (SharedArrayBuffer as unknown as new (n: number, o: object) => SharedArrayBuffer)(16, {
    maxByteLength: 64,
  });
  refused(() => exportDLPack(new Float32Array(growable)), "null_data", "growable SharedArrayBuffer");
  const shared = new Float32Array(new SharedArrayBuffer(16));
  using view = importDLPack(exportDLPack(shared));
  assert.equal(view.access, "readwrite");
  view.set(3, 1);
  assert.equal(shared[1], 3);
  view.dispose();
  assert.deepEqual(live(), before);
});

test("allocation: bad shapes, dtypes, alignments and devices", () => {
  const before = live();
  for (const [k, v] of Object.entries(BAD_NUMBERS)) refused(() => empty(any([v]), "float32"), "shape", `empty([${k}])`);
  refused(() => zeros(any(undefined), "float32"), "shape", "zeros(undefined)");
  refused(() => zeros(any("3"), "float32"), "shape", "zeros('3')");
  refused(() => zeros([2 ** 40, 2 ** 20], "float64"), "overflow", "2^60 elements");
  for (const dtype of ["f32", undefined, 5, "__proto__", "constructor"]) {
    refused(() => zeros([3], any(dtype)), "dtype", `dtype ${String(dtype)}`);
  }
  for (const align of [NaN, 3, 0, -64, 2 ** 30]) {
    refused(() => zeros([3], "float32", any({ align })), "requirements", `align ${String(align)}`);
  }
  for (const align of ["64", 64n, null, {}]) {
    refused(() => zeros([3], "float32", any({ align })), "argument", `align ${String(align)}`);
  }
  for (
    const device of [5, "cpu", { type: "gpu" }, { type: "constructor" }, { type: "cpu", id: -1 }, {
      type: "cpu",
      id: 1.5,
    }]
  ) {
    refused(() => zeros([3], "float32", any({ device })), "device", `device ${JSON.stringify(device)}`);
  }
  for (const opts of [5, "x", []]) {
    refused(() => zeros([3], "float32", any(opts)), "argument", `opts ${opts}`);
  }
  assert.deepEqual(live(), before);
});

test("array interface: bad fields, including device ids that used to be truncated or wrapped", () => {
  const before = live();
  using memory = zeros([4], "float32");
  const base = { data: [memory.address, false], shape: [4], strides: null, typestr: "<f4", version: 3 };
  const cases: Array<[string, unknown, string]> = [
    ["null", null, "null_data"],
    ["a number", 5, "null_data"],
    ["data 'x'", { ...base, data: "x" }, "null_data"],
    ["data ['1', false]", { ...base, data: ["1", false] }, "null_data"],
    ["data [NaN, false]", { ...base, data: [NaN, false] }, "null_data"],
    ["shape [NaN]", { ...base, shape: [NaN] }, "shape"],
    ["shape [4n]", { ...base, shape: [4n] }, "shape"],
    ["shape [Infinity]", { ...base, shape: [Infinity] }, "shape"],
    ["strides [NaN]", { ...base, strides: [NaN] }, "strides"],
    ["strides [4n]", { ...base, strides: [4n] }, "strides"],
    ["strides [2] (not a multiple of 4)", { ...base, strides: [2] }, "strides"],
    ["typestr 5", { ...base, typestr: 5 }, "dtype"],
    ["typestr '<x4'", { ...base, typestr: "<x4" }, "dtype"],
    ["device 5", { ...base, device: 5 }, "device"],
    ["device type 'gpu'", { ...base, device: { type: "gpu" } }, "device"],
    ["device type 'toString'", { ...base, device: { type: "toString" } }, "device"],
    ["device id -1", { ...base, device: { type: "cpu", id: -1 } }, "device"],
    ["device id 1.5", { ...base, device: { type: "cpu", id: 1.5 } }, "device"],
    ["device id NaN", { ...base, device: { type: "cpu", id: NaN } }, "device"],
    ["device id 2^40", { ...base, device: { type: "cpu", id: 2 ** 40 } }, "device"],
    ["device id '1'", { ...base, device: { type: "cpu", id: "1" } }, "device"],
    ["version '3'", { ...base, version: "3" }, "version"],
    ["a mask", { ...base, mask: true }, "null_data"],
  ];
  for (const [name, iface, code] of cases) {
    let released = 0;
    refused(() => fromArrayInterface(any(iface), { dispose: () => released++ }), code, name);
    assert.equal(released, 1, `${name}: keepAlive released once`);
  }
  memory.dispose();
  assert.deepEqual(live(), before);
});

test("views: bad indices, values of the wrong type or range, bad requirements", () => {
  const before = live();
  using v = zeros([2, 3], "int16");
  // Numbers that are not valid indices are "shape"; anything that is not a number is "argument".
  // -1 is an index (the last, as numpy's); -3 is out of range for extent 2.
  for (const [k, i] of [...Object.entries(BAD_NUMBERS).filter(([key]) => key !== "-1"), ["-3", -3] as const]) {
    const code = typeof i === "number" ? "shape" : "argument";
    refused(() => v.get(any(i), 0), code, `get(${k}, 0)`);
    refused(() => v.set(1, any(i), 0), code, `set(1, ${k}, 0)`);
  }
  // @ts-expect-error the typed view wants two indices: the runtime check is under test
  refused(() => v.get(0), "shape", "too few indices");
  // @ts-expect-error as above
  refused(() => v.get(0, 0, 0), "shape", "too many indices");
  for (const value of [1.5, NaN, Infinity, 40000, -40000, 2 ** 53, 1n, "1", true, null, undefined, [1, 2], {}]) {
    refused(() => v.set(any(value), 0, 0), "dtype", `int16 set(${String(value)})`);
  }
  using big = zeros([2], "uint64");
  for (const value of [1, -1n, 2n ** 64n, "1"]) refused(() => big.set(any(value), 0), "dtype", `uint64 ${value}`);
  big.set(2n ** 64n - 1n, 1);
  assert.equal(big.get(1), 2n ** 64n - 1n);
  using f = zeros([2], "float32");
  f.set(NaN, 0); // floats take any number
  f.set(-Infinity, 1);
  assert.ok(Number.isNaN(f.get(0)));
  for (const value of [1n, "1", true]) refused(() => f.set(any(value), 0), "dtype", `float32 set(${String(value)})`);
  const requirements: unknown[] = [
    null,
    undefined,
    5,
    "x",
    [],
    { shape: 5 },
    { shape: [NaN] },
    { shape: [1n] },
    { dtype: 5 },
    { dtype: [5] },
    { dtype: "nope" },
    { ndim: "2" },
    { ndim: 2.5 },
    { size: NaN },
    { contiguous: "X" },
    { alignment: "64" },
    { alignment: 3 },
    { device: "cpu" },
    { device: 5 },
    { device: { type: "cpu", id: "0" } },
    { writable: "yes" },
  ];
  for (const req of requirements) {
    const text = JSON.stringify(req, (_, x) => (typeof x === "bigint" ? `${x}n` : x));
    refused(() => v.require(any(req)), "requirements", `require(${text})`);
    refused(() => v.refusals(any(req)), "requirements", `refusals(${text})`);
  }
  refused(() => v.require(any({ device: { type: "gpu" } })), "device", "require unknown device");
  refused(() => v.as(any("nope"), 2), "requirements", "as('nope')");
  refused(() => v.as("int16", NaN), "requirements", "as(int16, NaN)");
  refused(() => v.as("int16", any("2")), "requirements", "as(int16, '2')");
  refused(() => v.__dlpack__(any(5)), "argument", "__dlpack__(5)");
  refused(() => v.__dlpack__(any({ maxVersion: "1" })), "version", "maxVersion '1'");
  refused(() => v.__dlpack__(any({ maxVersion: [1n, 0n] })), "version", "maxVersion bigints");
  refused(() => v.__dlpack__(any({ dlDevice: "cpu" })), "device", "dlDevice 'cpu'");
  refused(() => v.__dlpack__(any({ dlDevice: [NaN, 0] })), "device", "dlDevice NaN");
  refused(() => v.__dlpack__(any({ copy: "yes" })), "argument", "copy 'yes'");
  refused(() => v.__dlpack__(any({ stream: 5 })), "device", "stream on CPU data");
  v.dispose();
  big.dispose();
  f.dispose();
  assert.deepEqual(live(), before);
});

test("tables: unknown names and impostor keys are refused", () => {
  for (const name of ["nope", "constructor", "__proto__", "toString", 5, undefined]) {
    refused(() => toDLDataType(any(name)), "dtype", `toDLDataType(${String(name)})`);
    refused(() => arrayConstructorOf(any(name)), "dtype", `arrayConstructorOf(${String(name)})`);
    refused(() => deviceCode(any(name)), "device", `deviceCode(${String(name)})`);
  }
  refused(() => dtypeOfArray(any(new DataView(new ArrayBuffer(4)))), "dtype", "dtypeOfArray(DataView)");
});

test("disposed objects refuse every use with 'disposed' (or 'consumed'); metadata stays readable", () => {
  const before = live();
  const v = zeros([4], "float32");
  const share = v.keepAlive.retain();
  v.dispose();
  v.dispose(); // idempotent
  const calls: Array<[string, () => unknown]> = [
    ["array", () => v.array()],
    ["toArray", () => v.toArray()],
    ["copy", () => v.copy()],
    ["get", () => v.get(0)],
    ["set", () => v.set(1, 0)],
    ["assumeWritable", () => v.assumeWritable()],
    ["refusals", () => v.refusals({})],
    ["require", () => v.require({})],
    ["as", () => v.as("float32", 1)],
    ["__dlpack__", () => v.__dlpack__()],
    ["exportDLPack", () => exportDLPack(v)],
    ["exportDLPackLegacy", () => exportDLPackLegacy(v)],
    ["importDLPack", () => importDLPack(v)],
    ["keepAlive.retain", () => v.keepAlive.retain()],
  ];
  for (const [name, call] of calls) refused(call, "disposed", `disposed.${name}`);
  assert.deepEqual(v.shape, [4]);
  assert.equal(v.dtype, "float32");
  assert.deepEqual(v.__dlpack_device__(), [1, 0]);
  assert.equal(stats().allocations, before.allocations + 1, "the retained share keeps the memory");
  share.release();
  share.release();
  refused(() => share.retain(), "disposed", "released share retain");
  const capsule = exportDLPack(new Float32Array(2));
  capsule.dispose();
  refused(() => capsule.take(), "consumed", "take after dispose");
  refused(() => importDLPack(capsule), "consumed", "import after dispose");
  assert.deepEqual(live(), before);
});

test("an array() buffer transferred by other code: the view refuses use, dispose never frees it", () => {
  const before = live();
  const v = zeros([4], "float32");
  const a = v.array() as Float32Array;
  a[2] = 7;
  // Both runtimes move the native memory into the new buffer without copying.
  const moved = new Float32Array((a.buffer as ArrayBuffer).transfer());
  assert.equal(runtime().addressOf(moved), Number(v.address), "the transfer aliases the native memory");
  refused(() => v.get(2), "disposed", "get");
  refused(() => v.set(1, 2), "disposed", "set");
  refused(() => v.toArray(), "disposed", "toArray");
  refused(() => v.array(), "disposed", "array");
  refused(() => exportDLPack(v), "disposed", "export");
  v.dispose(); // used to throw a TypeError (and leak the share by accident)
  zeros([4], "float32").dispose(); // churn the allocator
  assert.equal(moved[2], 7, "the transferred buffer still reads live memory");
  // The documented cost: that one allocation stays for the rest of the process.
  assert.deepEqual(live(), { ...before, allocations: before.allocations + 1 });
});

test("reentrancy: release callbacks that export, import, sweep and dispose during the sweep", () => {
  const before = live();
  const memory = zeros([16], "float32");
  const views: BufferView[] = [];
  const log: string[] = [];
  const taken: bigint[] = [];
  const producerBefore = deleted();
  const extra = importDLPack(make({ shape: [2] }).source);
  for (let i = 0; i < 6; i++) {
    const keepAlive = {
      dispose() {
        log.push(`release ${i}`);
        // Everything here sweeps pins again, inside the outer sweep.
        exportDLPack(new Float32Array(1)).dispose();
        importDLPack(exportDLPack(new Float32Array(2))).dispose();
        stats();
        if (i === 0) extra.dispose();
        if (i === 1) throw new Error("a keepAlive that throws must not strand the others");
      },
    };
    const view = fromArrayInterface(
      { data: [memory.address + BigInt(4 * i), false], shape: [2], typestr: "<f4", version: 3 },
      keepAlive,
    );
    views.push(view);
    taken.push(exportDLPack(view).take());
  }
  for (const view of views) view.dispose();
  // One batch of releases from native threads: all six pins are queued before JS sweeps once.
  assert.equal(tp.tp_consume_many(new Float64Array(taken.map(Number)), taken.length, 1, 4), 0);
  stats();
  assert.deepEqual(log.sort(), [0, 1, 2, 3, 4, 5].map((i) => `release ${i}`));
  assert.ok(extra.disposed);
  assert.equal(deleted() - producerBefore, 1, "the view disposed inside the sweep released its producer");
  memory.dispose();
  assert.deepEqual(live(), before, "no pin stranded by the nested sweeps or the throwing callback");
});

test("reentrancy: views disposed inside FinalizationRegistry callbacks", async () => {
  await collectGarbage(); // earlier tests' garbage must not be collected during the count
  const before = live();
  const producerBefore = deleted();
  let disposedInCallback = 0;
  const registry = new FinalizationRegistry<BufferView>((view) => {
    view.dispose();
    view.dispose();
    disposedInCallback++;
  });
  const held: BufferView[] = [];
  (() => {
    for (let i = 0; i < 20; i++) {
      const view = importDLPack(make({ shape: [8] }).source);
      view.array(); // the view's own backstop must not run while the array could be used
      held.push(view);
      registry.register({ token: i }, view);
    }
  })();
  for (let i = 0; i < 30 && disposedInCallback < 20; i++) await collectGarbage();
  assert.equal(disposedInCallback, 20, "every callback ran");
  assert.equal(deleted() - producerBefore, 20, "each producer released exactly once");
  held.length = 0;
  for (let i = 0; i < 5; i++) await collectGarbage();
  assert.equal(deleted() - producerBefore, 20, "the views' own backstop released nothing twice");
  assert.deepEqual(live(), before);
}, { skip: gcUnavailable() });
