// JS values that lie: TypedArrays with own length / byteLength / buffer / constructor properties,
// replaced prototypes and Proxies; caller arrays whose Symbol.species, getters or Proxy traps
// change values between reads; built-ins replaced after the library loaded; and exceptions (an
// exhausted stack) right after the library took native ownership. Each case ends in the true
// result or a DLPackError, never a crash (those run in a child process), with every count back
// at zero and every producer deleter called once.
import assert from "node:assert/strict";
import { empty, exportDLPack, exportDLPackLegacy, fromArrayInterface, importDLPack, zeros } from "../../mod.ts";
import { repoRoot, runIsolated, test } from "../support/harness.ts";
import { live, refused } from "../support/assertions.ts";

// deno-lint-ignore no-explicit-any
const any = (x: unknown): any => x;

/** Runs `body` (module source after the imports) in a child process; it prints one JSON line. */
function child(body: string, env: Record<string, string> = {}): Record<string, unknown> {
  const source = `
import * as dl from "${repoRoot}/mod.ts";
import * as cuda from "${repoRoot}/cuda.ts";
import { tp, make, deleted, inspect } from "${repoRoot}/tests/support/producer.ts";
import { collectGarbage } from "${repoRoot}/tests/support/harness.ts";
const out = {};
${body}
console.log("RESULT " + JSON.stringify(out, (_, v) => typeof v === "bigint" ? String(v) : v));
`;
  const run = runIsolated(source, { env, gc: true });
  const line = run.stdout.split("\n").find((l) => l.startsWith("RESULT "));
  assert.ok(
    run.code === 0 && line !== undefined,
    `child exited with ${run.code}\nstdout: ${run.stdout.slice(-2000)}\nstderr: ${run.stderr.slice(-3000)}`,
  );
  return JSON.parse(line.slice(7));
}

// ---------------------------------------------------------------------------------------------
// 1. TypedArrays that lie about themselves

test("export: own length / byteLength / byteOffset / buffer / constructor properties change nothing", () => {
  const out = child(`
const exported = (x, opts) => {
  try {
    const capsule = dl.exportDLPack(x, opts);
    const seen = inspect(capsule.address, true);
    const view = dl.importDLPack(capsule);
    const r = { shape: view.shape, dtype: view.dtype, nbytes: view.nbytes, consumerShape: seen.shape };
    view.dispose();
    return r;
  } catch (e) {
    return { error: e instanceof dl.DLPackError ? e.code : String(e) };
  }
};
const lie = (x, key, value) => (Object.defineProperty(x, key, { value }), x);
out.length = exported(lie(new Float64Array(4), "length", 2 ** 26));
out.byteLength = exported(lie(new Float64Array(4), "byteLength", 2 ** 29));
out.byteOffset = exported(lie(new Float64Array(4), "byteOffset", 1 << 20));
out.buffer = exported(lie(new Float64Array(4), "buffer", new ArrayBuffer(1 << 20)));
out.constructor = exported(lie(new Uint8Array(16), "constructor", Float64Array));
out.getters = exported(Object.defineProperties(new Float32Array(4), {
  length: { get: () => 1 << 28 },
  byteLength: { get: () => 1 << 30 },
}));
out.shaped = exported(lie(new Float64Array(4), "length", 2 ** 26), { shape: [2, 2] });
out.reinterpreted = exported(lie(new Float64Array(4), "byteLength", 2 ** 29), { dtype: "uint8" });
out.tooFar = exported(lie(new Float64Array(4), "length", 8), { shape: [8] });
out.stats = dl.stats();
`);
  const f64 = { shape: [4], dtype: "float64", nbytes: 32, consumerShape: [4] };
  assert.deepEqual(out.length, f64);
  assert.deepEqual(out.byteLength, f64);
  assert.deepEqual(out.byteOffset, f64);
  assert.deepEqual(out.buffer, f64);
  assert.deepEqual(out.constructor, { shape: [16], dtype: "uint8", nbytes: 16, consumerShape: [16] });
  assert.deepEqual(out.getters, { shape: [4], dtype: "float32", nbytes: 16, consumerShape: [4] });
  assert.deepEqual(out.shaped, { shape: [2, 2], dtype: "float64", nbytes: 32, consumerShape: [2, 2] });
  assert.deepEqual(out.reinterpreted, { shape: [32], dtype: "uint8", nbytes: 32, consumerShape: [32] });
  assert.deepEqual(out.tooFar, { error: "shape" }, "a shape past the true end is refused");
  const s = out.stats as { imports: number; exports: number; pinned: number };
  assert.deepEqual([s.imports, s.exports], [0, 0]);
});

test("export: a replaced prototype or a Proxy never changes the element type or size", () => {
  const before = live();
  const u8 = Object.setPrototypeOf(new Uint8Array(16), Float64Array.prototype);
  using view = importDLPack(exportDLPack(u8));
  assert.equal(view.dtype, "uint8");
  assert.deepEqual(view.shape, [16]);
  assert.equal(view.nbytes, 16);
  const f32 = Object.setPrototypeOf(new Float32Array(4), Int8Array.prototype);
  using other = importDLPack(exportDLPackLegacy(f32));
  assert.deepEqual([other.dtype, other.shape, other.nbytes], ["float32", [4], 16]);
  // A Proxy around a TypedArray is not a TypedArray: refused, nothing pinned.
  for (const proxy of [new Proxy(new Float32Array(4), {}), new Proxy(new Uint8Array(8), { get: () => 1 << 30 })]) {
    refused(() => exportDLPack(any(proxy)), "argument", "Proxy around a TypedArray");
  }
  // An object posing as a TypedArray (the prototype and every getter of one).
  const forged = Object.create(Float64Array.prototype, { length: { value: 4 }, byteLength: { value: 32 } });
  refused(() => exportDLPack(any(forged)), "argument", "forged TypedArray");
  // Empty arrays over shared and detached memory: a NULL tensor, and a refusal.
  using emptyShared = importDLPack(exportDLPack(new Float32Array(new SharedArrayBuffer(0))));
  assert.deepEqual([emptyShared.shape, emptyShared.address], [[0], 0n]);
  const detached = new Float32Array(4);
  (detached.buffer as ArrayBuffer).transfer();
  Object.defineProperty(detached, "buffer", { value: new ArrayBuffer(16) });
  refused(() => exportDLPack(detached), "disposed", "detached behind an own buffer");
  emptyShared.dispose();
  view.dispose();
  other.dispose();
  assert.deepEqual(live(), before);
});

test("export: an own `buffer` cannot hide a resizable ArrayBuffer; resize(0) afterwards is harmless", () => {
  const out = child(`
const rab = new ArrayBuffer(64, { maxByteLength: 1 << 20 });
const x = new Float64Array(rab);
Object.defineProperty(x, "buffer", { value: new ArrayBuffer(64) });
const tracking = new Float32Array(new ArrayBuffer(64, { maxByteLength: 1 << 20 }));
Object.defineProperty(tracking, "buffer", { get: () => new ArrayBuffer(64) });
const growable = new Float32Array(new SharedArrayBuffer(64, { maxByteLength: 1 << 20 }));
Object.defineProperty(growable, "buffer", { value: new SharedArrayBuffer(64) });
for (const [name, array] of [["own buffer", x], ["buffer getter", tracking], ["growable", growable]]) {
  let view;
  try {
    view = dl.importDLPack(dl.exportDLPack(array));
    out[name] = "exported";
  } catch (e) {
    out[name] = e instanceof dl.DLPackError ? e.code : String(e);
  }
  // Shrink the real buffer; a view that slipped through would now read unmapped memory.
  if (name === "own buffer") rab.resize(0);
  if (view !== undefined) {
    let sum = 0;
    for (const v of view.toArray()) sum += v;
    out[name + " sum"] = sum;
    view.dispose();
  }
}
out.stats = dl.stats();
`);
  assert.equal(out["own buffer"], "null_data");
  assert.equal(out["buffer getter"], "null_data");
  assert.equal(out.growable, "null_data");
  const s = out.stats as { exports: number; pinned: number };
  assert.deepEqual([s.exports, s.pinned], [0, 0]);
});

// ---------------------------------------------------------------------------------------------
// 2. Caller arrays that change between reads

/** A Proxy around `target` that counts every property read (by key) into `reads`. */
function counted<T extends object>(target: T, reads: Map<PropertyKey, number>): T {
  return new Proxy(target, {
    get(t, key, receiver) {
      reads.set(key, (reads.get(key) ?? 0) + 1);
      return Reflect.get(t, key, receiver);
    },
  });
}

/** A Symbol.species constructor whose "copy" ignores what is copied into it and reads 2^26 for
 * every element. */
function LyingCopy(): unknown {
  return new Proxy([] as number[], {
    defineProperty: () => true,
    get: (target, key, receiver) =>
      typeof key === "symbol" ? Reflect.get(target, key, receiver) : key === "length" ? 1 : 2 ** 26,
  });
}

function onlyOnce(reads: Map<PropertyKey, number>, keys: PropertyKey[], what: string): void {
  const seen = [...reads].map(([k, n]) => [String(k), n]);
  assert.deepEqual(seen.sort(), keys.map((k) => [String(k), 1]).sort(), `${what}: each element read exactly once`);
}

test("shapes: a Symbol.species 'copy', getters that change and Proxies are read once, into a copy", () => {
  const before = live();
  // The copy a species constructor makes claims 2^26 elements; the copy must never be used.
  const speciesShape = [2];
  Object.defineProperty(speciesShape, "constructor", { value: { [Symbol.species]: LyingCopy } });
  using a = empty(speciesShape, "float64");
  assert.deepEqual([a.shape, a.nbytes], [[2], 16]);
  // A getter that says 2 once, then 2^26.
  let reads = 0;
  const flipping = [0];
  Object.defineProperty(flipping, 0, { get: () => (reads++ === 0 ? 2 : 2 ** 26) });
  using b = zeros(flipping, "float64");
  assert.deepEqual([b.shape, b.nbytes, reads], [[2], 16, 1]);
  // A Proxy: length once, each element once, nothing else (no constructor, no iterator).
  const keys = new Map<PropertyKey, number>();
  using c = empty(counted([2, 3], keys), "float32");
  assert.deepEqual(c.shape, [2, 3]);
  onlyOnce(keys, ["length", "0", "1"], "empty(Proxy)");
  // Holes and array-likes are refused, not read through a prototype as numbers.
  refused(() => empty(any([2, , 3]), "float32"), "shape", "a hole");
  refused(() => empty(any({ length: 1, 0: 2 }), "float32"), "shape", "an array-like");
  refused(() => empty(any(new Int32Array([2])), "float32"), "shape", "a TypedArray shape");
  refused(
    () => empty(any(new Proxy([2], { get: (_, k) => (k === "length" ? -1 : 2) })), "float32"),
    "shape",
    "length -1",
  );
  refused(
    () => empty(any(new Proxy([2], { get: (_, k) => (k === "length" ? 1e9 : 2) })), "float32"),
    "rank",
    "length 1e9",
  );
  a.dispose();
  b.dispose();
  c.dispose();
  assert.deepEqual(live(), before);
});

test("export options, requirements, array interfaces and element values are each read exactly once", () => {
  const before = live();
  const x = new Float32Array(12);
  // Export options: every field once, the shape and strides arrays once per element.
  const optionReads = new Map<PropertyKey, number>();
  const shapeReads = new Map<PropertyKey, number>();
  const strideReads = new Map<PropertyKey, number>();
  const opts = counted({
    shape: counted([3, 2], shapeReads),
    strides: counted([4, 1], strideReads),
    dtype: "float32",
    offset: 1,
    readonly: true,
  }, optionReads);
  using exported = importDLPack(exportDLPack(x, any(opts)));
  assert.deepEqual([exported.shape, exported.strides, exported.access], [[3, 2], [4, 1], "readonly"]);
  onlyOnce(optionReads, ["shape", "strides", "dtype", "offset", "readonly"], "export options");
  onlyOnce(shapeReads, ["length", "0", "1"], "export shape");
  onlyOnce(strideReads, ["length", "0", "1"], "export strides");
  // Strides whose species copy would reach past the end are never used either.
  const strides = [1];
  Object.defineProperty(strides, "constructor", { value: { [Symbol.species]: LyingCopy } });
  using strided = importDLPack(exportDLPack(x, { shape: [12], strides }));
  assert.deepEqual(strided.strides, [1]);
  // Requirements: the shape (with nulls) and the dtype list.
  const reqReads = new Map<PropertyKey, number>();
  const reqShape = new Map<PropertyKey, number>();
  const reqDtypes = new Map<PropertyKey, number>();
  const req = counted(
    { shape: counted([3, null], reqShape), dtype: counted(["float32"], reqDtypes), ndim: 2 },
    reqReads,
  );
  assert.deepEqual(exported.refusals(any(req)), []);
  onlyOnce(reqShape, ["length", "0", "1"], "require shape");
  onlyOnce(reqDtypes, ["length", "0"], "require dtypes");
  for (const key of ["shape", "dtype", "ndim"]) assert.equal(reqReads.get(key), 1, `requirement ${key}`);
  // as(dtype, ndim): refused or accepted from one read of each argument.
  assert.equal(exported.as("float32", 2), exported);
  // fromArrayInterface: the data tuple, shape and byte strides.
  using memory = zeros([8], "float64");
  const dataReads = new Map<PropertyKey, number>();
  const ifaceShape = new Map<PropertyKey, number>();
  const ifaceStrides = new Map<PropertyKey, number>();
  const iface = {
    data: counted([memory.address, false], dataReads),
    shape: counted([4, 2], ifaceShape),
    strides: counted([16, 8], ifaceStrides),
    typestr: "<f8",
  };
  using fromIface = fromArrayInterface(any(iface));
  assert.deepEqual([fromIface.shape, fromIface.strides], [[4, 2], [2, 1]]);
  onlyOnce(dataReads, ["length", "0", "1"], "data tuple");
  onlyOnce(ifaceShape, ["length", "0", "1"], "interface shape");
  onlyOnce(ifaceStrides, ["length", "0", "1"], "interface strides");
  // A complex element whose parts change between reads.
  using c = zeros([2], "complex64");
  const pair = new Map<PropertyKey, number>();
  c.set(any(counted([1.5, -2], pair)), 1);
  assert.deepEqual(c.get(1), [1.5, -2]);
  onlyOnce(pair, ["length", "0", "1"], "complex value");
  let flips = 0;
  const flipping = [0, 0];
  Object.defineProperty(flipping, 0, { get: () => (flips++ === 0 ? 1 : {}) });
  c.set(any(flipping), 0);
  assert.deepEqual([c.get(0), flips], [[1, 0], 1]);
  // __dlpack__ options: maxVersion read once per element.
  const versionReads = new Map<PropertyKey, number>();
  c.__dlpack__({ maxVersion: counted([1, 0] as [number, number], versionReads) }).dispose();
  onlyOnce(versionReads, ["length", "0", "1"], "maxVersion");
  for (const v of [exported, strided, memory, fromIface, c]) v.dispose();
  assert.deepEqual(live(), before);
});

// ---------------------------------------------------------------------------------------------
// 3. Built-ins replaced after the library loaded

test("caller code an option runs may dispose the view: refused as disposed, never memory freed meanwhile", () => {
  const out = child(`
const deletedBefore = deleted();
const attempt = (fn) => {
  try {
    fn();
    return "done";
  } catch (e) {
    return e instanceof dl.DLPackError ? e.code : String(e);
  }
};
// Large enough that the producer's free gives the pages back to the system.
const made = () => make({ shape: [1 << 20] });
// exportDLPack(view, { strides }): a getter on the strides disposes the view.
{
  const view = dl.importDLPack(made().source);
  const strides = [];
  Object.defineProperty(strides, 0, { get() { view.dispose(); return 1; }, enumerable: true });
  out.exportStrides = attempt(() => dl.exportDLPack(view, { strides }).dispose());
}
// exportDLPack(view, { readonly }): the same from a plain option getter.
{
  const view = dl.importDLPack(made().source);
  out.exportReadonly = attempt(() => dl.exportDLPack(view, { get readonly() { view.dispose(); return false; } }).dispose());
}
// copyFrom(src, { stream }): the getter disposes the destination, or the source.
for (const which of ["dst", "src"]) {
  const dst = dl.importDLPack(made().source);
  const src = dl.importDLPack(made().source);
  const victim = which === "dst" ? dst : src;
  out["copy_" + which] = attempt(() => dst.copyFrom(src, { get stream() { victim.dispose(); return undefined; } }));
  dst.dispose();
  src.dispose();
}
// __dlpack__({ copy: true }) of a view disposed before, or by a getter of the options.
{
  const view = dl.importDLPack(made().source);
  view.dispose();
  out.dlpackCopy = attempt(() => view.__dlpack__({ maxVersion: [1, 0], copy: true }).dispose());
  const other = dl.importDLPack(made().source);
  const maxVersion = [0, 0];
  Object.defineProperty(maxVersion, 0, { get() { other.dispose(); return 1; }, enumerable: true });
  out.dlpackCopyGetter = attempt(() => other.__dlpack__({ maxVersion, copy: true }).dispose());
}
// copyFrom(typedArray, { stream }): the getter moves the array's memory (transfer) before the copy.
{
  const dst = dl.zeros([1 << 16], "float32");
  const src = new Float32Array(1 << 16).fill(7);
  out.copyTransferred = attempt(() => dst.copyFrom(src, { get stream() { src.buffer.transfer(8); return undefined; } }));
  out.copyTransferredValues = dst.toArray()[0];
  dst.dispose();
}
out.deleted = deleted() - deletedBefore;
out.imports = dl.stats().imports;
out.exports = dl.stats().exports;
`);
  assert.deepEqual(out, {
    exportStrides: "disposed",
    exportReadonly: "disposed",
    copy_dst: "disposed",
    copy_src: "disposed",
    dlpackCopy: "disposed",
    dlpackCopyGetter: "disposed",
    copyTransferred: "disposed",
    copyTransferredValues: 0,
    deleted: 8,
    imports: 0,
    exports: 0,
  });
});

test("prototype pollution after load: dispose still detaches, exports report true sizes, nothing crashes", () => {
  const out = child(`
// Loaded (libdlpack opened, this realm's pin queue made) before anything is replaced.
dl.stats();
dl.exportDLPack(new Float32Array(1)).dispose();
const producerBefore = deleted();
const tensor = make({ shape: [2, 3], dtype: "float32" });
const keep = new Float32Array(6);
for (let i = 0; i < 6; i++) keep[i] = i;
// Everything the library could have looked up at call time, replaced with lies. The test itself
// uses only index loops and plain property writes while they are in place.
const TA = Object.getPrototypeOf(Uint8Array.prototype);
const lies = [
  [ArrayBuffer.prototype, "transfer", { value() { return new ArrayBuffer(0); } }],
  [ArrayBuffer.prototype, "detached", { get() { return false; } }],
  [ArrayBuffer.prototype, "resizable", { get() { return false; } }],
  [SharedArrayBuffer.prototype, "growable", { get() { return false; } }],
  [TA, "length", { get() { return 1 << 26; } }],
  [TA, "byteLength", { get() { return 1 << 29; } }],
  [TA, "byteOffset", { get() { return 1 << 20; } }],
  [TA, "buffer", { get() { return new ArrayBuffer(1 << 20); } }],
  [TA, Symbol.toStringTag, { get() { return "Float64Array"; } }],
  [TA, "slice", { value() { return new Float64Array(1); } }],
  [TA, "subarray", { value() { return new Float64Array(1); } }],
  [TA, "fill", { value() { return this; } }],
  [Float32Array.prototype, "constructor", { value: Float64Array }],
  [Array.prototype, "map", { value() { return [1 << 26]; } }],
  [Array.prototype, "slice", { value() { return [1 << 26]; } }],
  [Array.prototype, "some", { value() { return false; } }],
  [Array.prototype, "every", { value() { return true; } }],
  [Array.prototype, "includes", { value() { return false; } }],
  [Array.prototype, "filter", { value() { return []; } }],
  [Array.prototype, "sort", { value() { return this; } }],
  [Array.prototype, "fill", { value() { return this; } }],
  [Array.prototype, "join", { value() { return "x"; } }],
  [Array.prototype, "push", { value() { return 0; } }],
  [Array.prototype, Symbol.iterator, { value: function* () { yield 1 << 26; yield 1 << 26; } }],
  [Map.prototype, "get", { value() { return undefined; } }],
  [Map.prototype, "set", { value() { return this; } }],
  [Map.prototype, "has", { value() { return false; } }],
  [Map.prototype, "delete", { value() { return false; } }],
  [Set.prototype, "has", { value() { return false; } }],
  [Set.prototype, "add", { value() { return this; } }],
  [WeakMap.prototype, "get", { value() { return 1n; } }],
  [WeakMap.prototype, "set", { value() { return this; } }],
  [FinalizationRegistry.prototype, "register", { value() {} }],
  [FinalizationRegistry.prototype, "unregister", { value() { return false; } }],
  [Number, "isSafeInteger", { value() { return true; } }],
  [Number, "isInteger", { value() { return true; } }],
  [Math, "floor", { value() { return 0; } }],
  [Math, "ceil", { value() { return 0; } }],
  [Math, "abs", { value() { return 0; } }],
  [Math, "min", { value() { return 0; } }],
  [Math, "max", { value() { return 1 << 30; } }],
  [Array, "isArray", { value() { return true; } }],
  [Array, "from", { value() { return [1 << 26]; } }],
  [Object, "getPrototypeOf", { value() { return null; } }],
  [Object, "freeze", { value(x) { return x; } }],
  [Reflect, "apply", { value() { throw new Error("Reflect.apply was called"); } }],
  [Reflect, "get", { value() { throw new Error("Reflect.get was called"); } }],
  [Function.prototype, "call", { value() { throw new Error("Function.prototype.call was called"); } }],
  [Function.prototype, "apply", { value() { throw new Error("Function.prototype.apply was called"); } }],
  [globalThis, "queueMicrotask", { value() {} }],
  [dl.BufferView.prototype, "addressNumber", { get() { return 8; } }],
  [dl.BufferView.prototype, "rawShape", { get() { return [1 << 26]; } }],
  [dl.BufferView.prototype, "rawStrides", { get() { return [1]; } }],
  [dl.BufferView.prototype, "nativeOwner", { get() { return 8; } }],
  [dl.BufferView.prototype, "disposed", { get() { return false; } }],
  [dl.BufferView.prototype, "copy", { value() { return this; } }],
  [dl.Capsule.prototype, "takeAddress", { value() { return 8; } }],
  [dl.Capsule.prototype, "versioned", { get() { return false; } }],
  [dl.Capsule.prototype, "owned", { get() { return true; } }],
];
const n = lies.length;
const saved = [];
for (let i = 0; i < n; i++) saved[i] = Object.getOwnPropertyDescriptor(lies[i][0], lies[i][1]);
const defineProperty = Object.defineProperty;
const indexKeys = ["0", "1", "2", "3", "4", "5"];
function pollute() {
  for (let i = 0; i < n; i++) {
    const d = lies[i][2];
    defineProperty(lies[i][0], lies[i][1], "value" in d ? { configurable: true, writable: true, value: d.value } : { configurable: true, get: d.get });
  }
  // Index setters: internal arrays written through them would silently stay empty.
  for (let i = 0; i < 6; i++) defineProperty(Object.prototype, indexKeys[i], { configurable: true, set() {}, get() { return 1 << 26; } });
}
function restore() {
  for (let i = 0; i < 6; i++) delete Object.prototype[indexKeys[i]];
  for (let i = 0; i < n; i++) {
    if (saved[i] === undefined) delete lies[i][0][lies[i][1]];
    else defineProperty(lies[i][0], lies[i][1], saved[i]);
  }
}
const notes = Object.create(null);
let failure = null;
let v, a, back, kept, w, exported, shapes, refusalsOk, refusalsBad, copied, shifted;
pollute();
try {
  // An import, its array, dispose: the array must be detached afterwards.
  v = dl.importDLPack(tensor.source);
  a = v.array();
  notes.get = v.get(1, 2);
  v.dispose();
  // TypedArray exports: the consumer and the library see the true extent.
  back = dl.importDLPack(dl.exportDLPack(keep));
  notes.roundTrip = back.get(5);
  kept = dl.exportDLPack(keep);
  // A view's export uses the view's own fields, not the replaced getters.
  w = dl.zeros([4], "float64");
  w.set(7, 3);
  exported = dl.importDLPack(dl.exportDLPack(w));
  notes.viewGet = exported.get(3);
  copied = w.toArray();
  // Overlapping host views of one allocation: the copy is staged through a temporary.
  const lo = dl.fromArrayInterface({ data: [w.address, false], shape: [3], typestr: "<f8" });
  const hi = dl.fromArrayInterface({ data: [w.address + 8n, false], shape: [3], typestr: "<f8" });
  for (let i = 0; i < 4; i++) w.set(i, i);
  lo.copyFrom(hi);
  shifted = [w.get(0), w.get(1), w.get(2), w.get(3)];
  lo.dispose();
  hi.dispose();
  shapes = dl.empty([2, 3], "int32");
  refusalsOk = shapes.refusals({ shape: [2, null], dtype: ["int32"], contiguous: "C" });
  refusalsBad = shapes.refusals({ dtype: "float32", writable: false });
} catch (e) {
  failure = String(e && e.stack || e);
}
restore();
out.failure = failure;
if (failure === null) {
  out.get = notes.get;
  out.disposed = v.disposed;
  out.arrayLengthAfterDispose = a.length;
  out.roundTrip = notes.roundTrip;
  out.imported = [back.shape, back.nbytes, back.dtype];
  const seen = inspect(kept.address, true);
  out.consumer = [seen.shape, seen.dtype.bits, seen.dtype.code];
  kept.dispose();
  out.viewExport = [exported.shape, notes.viewGet, exported.address === w.address, exported.nbytes];
  out.toArray = [copied.length, copied[3]];
  out.shifted = shifted;
  out.empty = [shapes.shape, shapes.size, shapes.nbytes];
  out.refusals = [refusalsOk.length, refusalsBad.length];
  for (const x of [back, exported, shapes, w]) x.dispose();
}
out.stats = dl.stats();
out.deleted = deleted() - producerBefore;
`);
  assert.equal(out.failure, null);
  assert.equal(out.get, 0);
  assert.equal(out.disposed, true);
  assert.equal(out.arrayLengthAfterDispose, 0, "dispose detached the array through the captured transfer");
  assert.equal(out.roundTrip, 5);
  assert.deepEqual(out.imported, [[6], 24, "float32"]);
  assert.deepEqual(out.consumer, [[6], 32, 2]);
  assert.deepEqual(out.viewExport, [[4], 7, true, 32]);
  assert.deepEqual(out.toArray, [4, 7]);
  assert.deepEqual(out.shifted, [1, 2, 3, 3]);
  assert.deepEqual(out.empty, [[2, 3], 6, 24]);
  assert.deepEqual(out.refusals, [0, 2]);
  const s = out.stats as { imports: number; exports: number; allocations: number; pinned: number };
  assert.deepEqual([s.imports, s.exports, s.allocations, s.pinned], [0, 0, 0, 0]);
  assert.equal(out.deleted, 1);
});

// ---------------------------------------------------------------------------------------------
// 4. Exceptions right after the library took native ownership

test("an exhausted stack at any point of import, export, allocation or copy leaks nothing", () => {
  const out = child(`
dl.stats();
const ta = new Float32Array(16);
const base = dl.zeros([4], "float32");
const src = { versioned: tp.tp_static_tensor(1024, 1) };
// Producer tensors only: every deleter the library calls is the test producer's.
const imports = [
  () => dl.importDLPack(src),
  () => dl.fromDLPack(src).view,
];
// The capsules a round trip makes, kept (a store into a slot made beforehand, nothing that can
// throw) so that the test knows which ones the caller dropped: made, and then the import could not
// even start (the stack ran out at its call), so neither the import nor this code holds it.
const made = [];
const madePin = new Uint8Array(20000);
let madeCount = 0;
for (let i = 0; i < 20000; i++) made[i] = null;
// Everything else that takes native ownership and then runs JavaScript.
const others = [
  () => dl.exportDLPack(ta),
  () => dl.exportDLPackLegacy(ta),
  () => {
    const c = dl.exportDLPack(ta);
    madePin[madeCount] = 1;
    made[madeCount++] = c;
    return dl.importDLPack(c);
  },
  () => dl.empty([4], "float32"),
  () => dl.zeros([2, 2], "float64"),
  () => base.copy(),
  () => base.toHost(),
  () => dl.exportDLPack(base),
  () => {
    const c = dl.exportDLPack(base, { shape: [2, 2] });
    madePin[madeCount] = 0;
    made[madeCount++] = c;
    return dl.importDLPack(c);
  },
  () => dl.importDLPack(base),
  () => dl.fromArrayInterface({ data: [base.address, false], shape: [4], typestr: "<f4" }),
  () => dl.fromArrayInterface({ data: [base.address, false], shape: [4], typestr: "<f4" }, { dispose() {} }),
  () => base.keepAlive.retain(),
  () => base.copyFrom(ta.subarray(0, 4)),
];
const held = [];
for (let i = 0; i < 200000; i++) held[i] = null;
let count = 0;
let errors = 0;
let unwound = 0;
let deepest = 0;
function attempt(op) {
  let r = null;
  try {
    r = op();
  } catch {
    errors++;
    return;
  }
  held[count++] = r;
  try {
    if (r !== base) r.dispose?.() ?? r.release?.();
  } catch {
    // Disposed again below, at a shallow depth.
  }
}
function deep(depth, ops) {
  if (depth > deepest) deepest = depth;
  try {
    deep(depth + 1, ops);
  } catch {
    // The stack ran out below: every frame on the way back tries everything once more, each
    // with a little more stack than the one below it.
  }
  if (unwound++ < 1500) for (let k = 0; k < ops.length; k++) attempt(ops[k]);
}
function scan(ops) {
  errors = 0;
  unwound = 0;
  count = 0;
  deep(0, ops);
  for (let i = 0; i < count; i++) {
    const r = held[i];
    if (r !== base) { if (typeof r.dispose === "function") r.dispose(); else r.release(); }
  }
  return [errors, count];
}
const before = dl.stats();
const producerBefore = deleted();
out.importScan = scan(imports);
await new Promise((resolve) => setTimeout(resolve, 20));
const afterImports = dl.stats();
out.imports = afterImports.imports;
out.deleted = deleted() - producerBefore;
out.deletersCalled = afterImports.deletersCalled - before.deletersCalled;
out.otherScan = scan(others);
await new Promise((resolve) => setTimeout(resolve, 20));
// What the library took and failed to hand over is released at once; what is left is exactly the
// capsules the caller dropped (each an export of its own, and the TypedArray ones a pin each).
let dropped = 0;
let droppedPins = 0;
for (let i = 0; i < madeCount; i++) {
  if (made[i].owned) {
    dropped++;
    droppedPins += madePin[i];
  }
}
const beforeCollection = dl.stats();
out.dropped = dropped;
out.beforeCollection = [
  beforeCollection.imports,
  beforeCollection.exports - dropped,
  beforeCollection.allocations - 1,
  beforeCollection.pinned - droppedPins,
];
// A capsule the caller dropped is released by the garbage-collection backstop.
for (let i = 0; i < madeCount; i++) made[i] = null;
await collectGarbage(6);
const after = dl.stats();
out.after = [after.imports, after.exports, after.allocations - 1, after.pinned];
base.dispose();
const end = dl.stats();
out.end = [end.imports, end.exports, end.allocations, end.pinned];
out.deepest = deepest;
`);
  const [importErrors, importResults] = out.importScan as [number, number];
  const [otherErrors, otherResults] = out.otherScan as [number, number];
  assert.ok(importErrors > 0 && otherErrors > 0, "the scans reached the stack limit inside the library");
  assert.ok(importResults > 0 && otherResults > 0, "and succeeded further up");
  assert.equal(out.imports, 0, "no imported tensor is left behind");
  assert.equal(out.deleted, out.deletersCalled, "every producer deleter the library called ran exactly once");
  assert.ok((out.deleted as number) >= importResults, "one release per view at least");
  assert.deepEqual(out.beforeCollection, [0, 0, 0, 0], "nothing the library took is left behind but dropped capsules");
  assert.deepEqual(out.after, [0, 0, 0, 0], "the collector released every dropped capsule");
  assert.deepEqual(out.end, [0, 0, 0, 0]);
});

test("imports at an exhausted stack while no backstop flush waits: every producer released once", () => {
  // The backstop schedules its flush on the first view it holds after a flush. Here that first
  // view's registration itself runs out of stack: the import must then release the producer and
  // the backstop must hold nothing that a later flush could register and release again.
  const out = child(`
import { makeMany } from "${repoRoot}/tests/support/producer.ts";
const total = 120000;
const addresses = makeMany({ shape: [4] }, total);
const views = [];
const fate = new Uint8Array(total); // 0 kept, 1 disposed, 2 dropped undisposed
for (let i = 0; i < total; i++) views[i] = null;
let next = 0;
let got = 0;
let errors = 0;
let roundStart = 0;
function attempt(k) {
  if (next >= total) return;
  let v = null;
  try {
    v = dl.importDLPack({ versioned: addresses[next++] });
  } catch {
    errors++;
    return;
  }
  const f = k % 3;
  fate[got] = f;
  views[got++] = f === 2 ? null : v;
  if (f === 1) {
    try {
      v.dispose();
    } catch {
      fate[got - 1] = 0; // disposed again below, at a shallow depth
    }
  }
}
function pad(k) {
  if (k > 0) return pad(k - 1);
  attempt(k);
}
function deep(depth) {
  try {
    deep(depth + 1);
  } catch {
    // The stack ran out below; each frame on the way back imports with a little more stack.
  }
  if (next - roundStart < 4000) for (let k = 0; k < 16; k++) pad(k);
}
const producerBefore = dl.stats().deletersCalled;
const deletedBefore = deleted();
for (let round = 0; round < 20; round++) {
  await new Promise((resolve) => setTimeout(resolve, 1)); // the backstop flushed: none scheduled
  roundStart = next;
  deep(0);
}
out.taken = next;
out.got = got;
out.errors = errors;
for (let i = 0; i < got; i++) if (views[i] !== null && fate[i] === 0) views[i].dispose();
for (let i = 0; i < got; i++) views[i] = null;
await collectGarbage(10);
const after = dl.stats();
out.imports = after.imports;
out.deletersCalled = after.deletersCalled - producerBefore;
out.producerDeleted = deleted() - deletedBefore;
`);
  assert.ok((out.errors as number) > 0, "imports reached the stack limit");
  assert.ok((out.got as number) > 0, "and succeeded further up");
  assert.equal(out.imports, 0, "no imported tensor is left behind");
  // An import whose own call ran out of stack never took its tensor, so up to `taken` are released;
  // a second release of one would free the producer's block twice and abort the child.
  assert.equal(out.deletersCalled, out.producerDeleted, "each deleter the library called ran once");
  assert.ok((out.deletersCalled as number) >= (out.got as number), "every view released");
  assert.ok((out.deletersCalled as number) <= (out.taken as number), "nothing released twice");
});

test("a release callback that imports while the backstop flushes: that view is released once", () => {
  // The flush at a microtask checkpoint first runs releases deferred earlier; one of them may run
  // caller code that imports (and disposes) a view. The backstop must register that view as it
  // does any other.
  const out = child(`
import { LazyBackstop } from "${repoRoot}/src/native/backstop.ts";
import { deferredDisposalCount, deferredDisposals } from "${repoRoot}/src/native/journal.ts";
const cleaned = [0, 0, 0];
class Handle {
  live = true;
  constructor(id) { this.id = id; }
}
const backstop = new LazyBackstop((id) => { cleaned[id]++; }, (h) => h.live);
let inner = null;
let innerEpoch = 0;
backstop.add(new Handle(1), 1); // dropped undisposed: the collector releases it; schedules the flush
// A parked disposal whose release callback adds a handle.
deferredDisposals[deferredDisposalCount[0]++] = () => {
  inner = new Handle(2);
  innerEpoch = backstop.add(inner, 2);
};
await Promise.resolve(); // the checkpoint: the deferred releases (the parked one adds a handle), then the flush
backstop.remove(inner, innerEpoch); // its owner disposed it
inner.live = false;
inner = null;
await collectGarbage(10);
out.cleaned = cleaned;
`);
  assert.deepEqual(out.cleaned, [0, 1, 0], "the dropped handle released once, the disposed one never");
});
