// Wrong argument types through every public function of mod.ts, cuda.ts and io.ts: each call returns
// normally or throws a DLPackError whose code names the mistake ("argument" where no other code
// fits), never a TypeError, RangeError or a misleading code. Also: copyFrom() of a TypedArray, index
// types in get/set, and the message of an allocation that cannot be satisfied.
import assert from "node:assert/strict";
import * as dl from "../../mod.ts";
import * as cuda from "../../cuda.ts";
import * as io from "../../io.ts";
import { DLPackError, empty, exportDLPack, importDLPack, zeros } from "../../mod.ts";
import { make } from "../support/producer.ts";
import { repoRoot, runIsolated, test } from "../support/harness.ts";
import { live, refused } from "../support/assertions.ts";
import { fakeDriverPath } from "../support/fakecuda.ts";

// deno-lint-ignore no-explicit-any
type AnyFn = (...args: any[]) => unknown;

/** A TypedArray's elements as a plain array. */
function values(x: ArrayLike<number | bigint>): unknown[] {
  return Array.from(x as ArrayLike<unknown>);
}

/** Disposes whatever a call returned that holds something. */
function release(value: unknown): void {
  if (value instanceof dl.BufferView || value instanceof dl.Capsule) value.dispose();
  else if (value instanceof dl.Owner) value.release();
  else if (value !== null && typeof value === "object" && "view" in value) release((value as { view: unknown }).view);
}

/** Values of every wrong type (none of them throws when touched). */
const JUNK: Record<string, unknown> = {
  undefined: undefined,
  null: null,
  true: true,
  "number 3": 3,
  NaN: NaN,
  "-1": -1,
  "1.5": 1.5,
  "bigint 3n": 3n,
  'string "3"': "3",
  "empty string": "",
  symbol: Symbol("s"),
  "empty object": {},
  "object with nulls": { type: null, id: null, shape: null, data: null, stream: null, dtype: null },
  "empty array": [],
  "array of strings": ["a", "b"],
  "a function": () => 1,
  "a Float64Array": new Float64Array(2),
  "a DataView": new DataView(new ArrayBuffer(8)),
  "an ArrayBuffer": new ArrayBuffer(8),
  "a Proxy": new Proxy({}, {}),
  "a Map": new Map([[1, 2]]),
  "a Date": new Date(0),
};

/** Calls `f` with `args`: it must return or throw a DLPackError. Returns the error's code. */
function check(name: string, f: AnyFn, args: unknown[], thisArg?: unknown): string {
  try {
    release(f.apply(thisArg, args));
    return "ok";
  } catch (e) {
    if (e instanceof DLPackError) {
      assert.ok(e.message.length > 10, `${name}: the message says nothing`);
      return e.code;
    }
    const shownArgs = args.map((a) => (typeof a === "symbol" ? "symbol" : typeof a === "bigint" ? `${a}n` : typeof a))
      .join(", ");
    assert.fail(`${name}(${shownArgs}) threw ${e instanceof Error ? `${e.name}: ${e.message}` : String(e)}`);
  }
}

/** The functions the audit covers: every exported function of mod.ts, cuda.ts and io.ts except the
 * loader's (`ready`, `useLibrary`), each with the arguments it takes (junk goes in each slot). */
function publicFunctions(): Array<[string, AnyFn, number]> {
  const out: Array<[string, AnyFn, number]> = [];
  for (const [module, entries] of [["mod", dl], ["cuda", cuda], ["io", io]] as const) {
    for (const [name, value] of Object.entries(entries)) {
      if (typeof value !== "function" || name === "ready" || name === "useLibrary") continue;
      // Classes are covered through their instances below.
      if (/^[A-Z]/.test(name)) continue;
      out.push([`${module}.${name}`, value as AnyFn, Math.max((value as AnyFn).length, 2)]);
    }
  }
  return out;
}

test("every public function of mod.ts, cuda.ts and io.ts: junk in any argument is a DLPackError, never a crash", () => {
  const before = live();
  const functions = publicFunctions();
  assert.ok(functions.length > 30, `found ${functions.length} functions`);
  const codes = new Map<string, Set<string>>();
  for (const [name, f, arity] of functions) {
    for (const [junkName, junk] of Object.entries(JUNK)) {
      for (let slot = 0; slot < arity; slot++) {
        const args = new Array(arity).fill(undefined);
        args[slot] = junk;
        const code = check(`${name} (${junkName} in argument ${slot})`, f, args);
        const key = `${name}#${slot}`;
        if (!codes.has(key)) codes.set(key, new Set());
        codes.get(key)!.add(code);
      }
    }
  }
  // A source of the wrong type is an argument error, never "the data pointer is NULL".
  for (const name of ["mod.importDLPack#0", "mod.fromDLPack#0"]) assert.deepEqual([...codes.get(name)!], ["argument"]);
  // Options objects of the wrong type likewise.
  for (const name of ["mod.importDLPack#1", "mod.exportDLPack#1"]) {
    assert.ok(codes.get(name)!.has("argument") && !codes.get(name)!.has("requirements"), name);
  }
  assert.deepEqual(live(), before);
});

test("every method of a view, a capsule and an owner share: junk arguments are DLPackErrors", () => {
  const before = live();
  const names = Object.getOwnPropertyNames(dl.BufferView.prototype).filter((n) => n !== "constructor");
  assert.ok(names.length > 40);
  for (const name of names) {
    const descriptor = Object.getOwnPropertyDescriptor(dl.BufferView.prototype, name)!;
    for (const [junkName, junk] of Object.entries(JUNK)) {
      for (let slot = 0; slot < 2; slot++) {
        // A fresh view each time: dispose(), assumeWritable() and friends change it.
        using view = zeros([2, 3], "float32");
        const args = [0, 0];
        args[slot] = junk as number;
        if (descriptor.get !== undefined) check(`view.${name}`, descriptor.get, [], view);
        else check(`view.${name}(${junkName} in argument ${slot})`, descriptor.value, args, view);
      }
    }
  }
  for (const name of Object.getOwnPropertyNames(dl.Capsule.prototype).filter((n) => n !== "constructor")) {
    const descriptor = Object.getOwnPropertyDescriptor(dl.Capsule.prototype, name)!;
    for (const junk of Object.values(JUNK)) {
      const capsule = exportDLPack(new Float32Array(2));
      check(`capsule.${name}`, descriptor.get ?? descriptor.value, [junk], capsule);
      if (capsule.taken) importDLPack({ versioned: capsule.address }).dispose();
      capsule.dispose();
    }
  }
  using memory = zeros([2], "float32");
  for (const name of Object.getOwnPropertyNames(dl.Owner.prototype).filter((n) => n !== "constructor")) {
    const descriptor = Object.getOwnPropertyDescriptor(dl.Owner.prototype, name)!;
    for (const junk of Object.values(JUNK)) {
      const share = memory.keepAlive.retain();
      check(`owner.${name}`, descriptor.get ?? descriptor.value, [junk], share);
      share.release();
    }
  }
  memory.dispose();
  assert.deepEqual(live(), before);
});

test("get/set: an index of the wrong type is an argument error naming the type", () => {
  const before = live();
  using v = zeros([2, 3], "float32");
  v.set(5, 1, 0);
  assert.equal(v.get(1, 0), 5);
  refused(() => v.get("1" as never, 0), "argument", 'get("1", 0)', /index 0 must be a number, got string "1"/);
  refused(() => v.get(1n as never, 0), "argument", "get(1n, 0)", /index 0 must be a number, got bigint 1n/);
  refused(() => v.set(1, 0, null as never), "argument", "set(1, 0, null)", /index 1 must be a number, got null/);
  refused(() => v.get(1, 3), "shape", "get(1, 3)", /index 3 is out of range for dimension 1 of extent 3/);
  v.dispose();
  assert.deepEqual(live(), before);
});

test("an allocation that cannot be satisfied says how many bytes failed", () => {
  // Other test files share this process (bun test): compare with what was live before.
  const before = live().allocations;
  let view: dl.BufferView | undefined;
  try {
    view = empty([2 ** 40], "float64");
  } catch (e) {
    assert.ok(e instanceof DLPackError, String(e));
    assert.equal(e.code, "library");
    assert.match(e.message, /allocating 8796093022208 bytes \(8\.0 TiB\) failed: out of memory/);
    assert.doesNotMatch(e.message, /import/);
  }
  // A system that overcommits may grant it (untouched pages cost nothing): then it is a real view.
  if (view !== undefined) {
    assert.equal(view.nbytes, 2 ** 43);
    view.dispose();
  }
  assert.equal(live().allocations, before);
});

test("copyFrom(typedArray): the form toArray() returns, for every kind of dtype and layout", () => {
  const before = live();
  // float32, C order.
  using f = zeros([2, 3], "float32");
  f.copyFrom(new Float32Array([1, 2, 3, 4, 5, 6]));
  assert.deepEqual(values(f.toArray()), [1, 2, 3, 4, 5, 6]);
  // A strided destination (a transposed import): values land in C order of the view.
  const made = make({ shape: [3, 2], strides: [1, 3], dtype: "float64" });
  using t = importDLPack(made.source);
  t.copyFrom(new Float64Array([1, 2, 3, 4, 5, 6]));
  assert.deepEqual(values(t.toArray()), [1, 2, 3, 4, 5, 6]);
  assert.deepEqual(values(t.array()), [1, 3, 5, 2, 4, 6]);
  // complex (interleaved), bfloat16 (bits), int64 (bigint), bool (bytes), a packed 4-bit float.
  using c = zeros([2], "complex64");
  c.copyFrom(new Float32Array([1, -1, 2, -2]));
  assert.deepEqual([c.get(0), c.get(1)], [[1, -1], [2, -2]]);
  using b = zeros([2], "bfloat16");
  b.copyFrom(new Uint16Array([0x3f80, 0x4000]));
  assert.deepEqual([b.get(0), b.get(1)], [1, 2]);
  using i = zeros([2], "int64");
  i.copyFrom(new BigInt64Array([-5n, 7n]));
  assert.deepEqual([i.get(0), i.get(1)], [-5n, 7n]);
  using bools = zeros([3], "bool");
  bools.copyFrom(new Uint8Array([1, 0, 1]));
  assert.deepEqual([bools.get(0), bools.get(1), bools.get(2)], [true, false, true]);
  using fp4 = zeros([3], "float4_e2m1fn");
  fp4.copyFrom(new Uint8Array([0x2, 0x4, 0xa]));
  assert.deepEqual(values(fp4.toArray()), [0x2, 0x4, 0xa]);
  assert.deepEqual([fp4.get(0), fp4.get(1), fp4.get(2)], [1, 2, -1]);
  // A Uint8ClampedArray fills a uint8 view; a SharedArrayBuffer-backed array works too.
  using u8 = zeros([2], "uint8");
  u8.copyFrom(new Uint8ClampedArray([9, 8]));
  assert.deepEqual(values(u8.toArray()), [9, 8]);
  const shared = new Float32Array(new SharedArrayBuffer(24));
  shared.set([6, 5, 4, 3, 2, 1]);
  f.copyFrom(shared);
  assert.deepEqual(values(f.toArray()), [6, 5, 4, 3, 2, 1]);
  // Mistakes: the wrong TypedArray type, the wrong length, a read-only view, not a TypedArray.
  refused(() => f.copyFrom(new Float64Array(6)), "dtype", "Float64Array into float32", /takes a Float32Array/);
  refused(() => f.copyFrom(new Float32Array(5)), "shape", "5 elements", /has 5 elements.*needs 6/);
  refused(() => c.copyFrom(new Float32Array(2)), "shape", "complex needs twice", /needs 4/);
  // Plain arrays are nested values shaped like the view (tests/core/shape_ops.test.ts): a flat one does not fit.
  refused(() => f.copyFrom([1, 2, 3, 4, 5, 6]), "shape", "a flat plain array", /depth 0 has number 6 entries/);
  refused(() => f.copyFrom({ length: 6 } as never), "argument", "an array-like", /BufferView, a TypedArray/);
  refused(() => f.copyFrom(new DataView(new ArrayBuffer(24)) as never), "argument", "a DataView");
  refused(() => f.copyFrom(undefined as never), "argument", "undefined", /got undefined/);
  const resizable = new Float32Array(new ArrayBuffer(24, { maxByteLength: 48 }));
  refused(() => f.copyFrom(resizable), "null_data", "a resizable buffer", /resizable/);
  const readonlyMade = make({ shape: [2], dtype: "float32", flags: 1 });
  using ro = importDLPack(readonlyMade.source);
  refused(() => ro.copyFrom(new Float32Array(2)), "readonly", "read-only view");
  const legacy = make({ shape: [2], dtype: "float32", versioned: false });
  using unknown = importDLPack(legacy.source);
  refused(() => unknown.copyFrom(new Float32Array(2)), "readonly", "legacy view", /assumeWritable/);
  unknown.assumeWritable().copyFrom(new Float32Array([3, 4]));
  assert.deepEqual(values(unknown.toArray()), [3, 4]);
  for (const view of [f, t, c, b, i, bools, fp4, u8, ro, unknown]) view.dispose();
  assert.deepEqual(live(), before, "nothing pinned or allocated is left");
});

test("copyFrom(typedArray) into CUDA device memory (fake driver)", () => {
  const run = runIsolated(
    `
import { zeros, stats } from "${repoRoot}/mod.ts";
const d = zeros([2, 3], "float32", { device: { type: "cuda", id: 0 } });
d.copyFrom(new Float32Array([1, 2, 3, 4, 5, 6]));
const host = d.toHost();
const values = Array.from(host.toArray());
const fp4 = zeros([3], "float4_e2m1fn", { device: { type: "cuda", id: 0 } });
fp4.copyFrom(new Uint8Array([2, 4, 10]));
const fp4Host = fp4.toHost();
const codes = Array.from(fp4Host.toArray());
for (const v of [d, host, fp4, fp4Host]) v.dispose();
const s = stats();
console.log("RESULT " + JSON.stringify({ values, codes, live: [s.allocations, s.exports, s.pinned] }));
`,
    { env: { DLPACK_CUDA_LIB: fakeDriverPath(), FAKECUDA_DEVICES: "2" } },
  );
  const line = run.stdout.split("\n").find((l) => l.startsWith("RESULT "));
  assert.ok(run.code === 0 && line !== undefined, `exit ${run.code}: ${run.stderr.slice(-2000)}`);
  const out = JSON.parse(line.slice(7));
  assert.deepEqual(out.values, [1, 2, 3, 4, 5, 6]);
  assert.deepEqual(out.codes, [2, 4, 10]);
  assert.deepEqual(out.live, [0, 0, 0]);
});

test("wrong types get codes that name the mistake across the API", () => {
  const before = live();
  using v = zeros([2, 3], "float32");
  // Import sources and options.
  refused(() => importDLPack(5 as never), "argument", "importDLPack(5)", /got number 5/);
  refused(() => importDLPack("0x10" as never), "argument", "importDLPack(string)");
  refused(() => importDLPack({} as never), "argument", "importDLPack({})");
  const notTaken = make();
  refused(() => importDLPack(notTaken.source, 5 as never), "argument", "import options 5");
  importDLPack(notTaken.source).dispose();
  // Views: as() needs a dtype and a rank; options objects; copy options.
  refused(() => v.as(undefined as never, undefined as never), "argument", "as()", /dtype and a rank/);
  refused(() => v.__dlpack__(5 as never), "argument", "__dlpack__(5)");
  refused(() => v.toHost(5 as never), "argument", "toHost(5)");
  refused(() => v.copyFrom(v, "x" as never), "argument", "copyFrom options");
  // Tables.
  refused(() => dl.fromDLDataType(undefined as never), "argument", "fromDLDataType(undefined)");
  refused(() => dl.formatDevice(5 as never), "argument", "formatDevice(5)");
  refused(() => dl.toDLDataType(5n as never), "dtype", "toDLDataType(5n)", /bigint 5n/);
  refused(() => dl.deviceCode(5n as never), "device", "deviceCode(5n)", /bigint 5n/);
  // cuda.ts: views and capsules that are not, handles and ordinals of the wrong type (no driver
  // needed: the arguments are checked first).
  const fake = { device: { type: "cuda", id: 0 }, nativeOwner: 1, addressNumber: 4096, rawShape: [1] };
  refused(() => cuda.copyInto(fake as never, v), "argument", "copyInto(fake, view)");
  refused(() => cuda.copyInto(v, fake as never), "argument", "copyInto(view, fake)");
  refused(() => cuda.toHost(fake as never), "argument", "toHost(fake)");
  refused(() => cuda.setProducerStream(fake as never, 1), "argument", "setProducerStream(fake)");
  refused(() => cuda.producerStream(fake as never), "argument", "producerStream(fake)");
  refused(() => cuda.fenceForConsumer(fake as never, 1), "argument", "fenceForConsumer(fake)");
  refused(() => cuda.fenceExport({ address: 4096n, versioned: true } as never, 1), "argument", "fenceExport(fake)");
  const taken = exportDLPack(new Float32Array(2));
  importDLPack(taken).dispose();
  refused(() => cuda.fenceExport(taken, 1), "consumed", "fenceExport(taken capsule)");
  refused(() => cuda.synchronize("1" as never), "argument", "synchronize('1')");
  refused(() => cuda.consumerStream({} as never), "argument", "consumerStream({})");
  refused(() => cuda.createStream("0" as never), "argument", "createStream('0')");
  refused(() => cuda.createStream(-1), "device", "createStream(-1)");
  v.dispose();
  assert.deepEqual(live(), before);
});
