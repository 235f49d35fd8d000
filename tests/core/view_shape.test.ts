// The view's shape: layout facts built once and shared between views of one layout, derived views
// made through the one construction function, and addresses in the form each runtime's FFI hands
// them out (a Deno.PointerObject goes to native code as it is).
import assert from "node:assert/strict";
import { BufferView, Capsule, exportDLPack, exportDLPackLegacy, importDLPack, stats, zeros } from "../../mod.ts";
import { realmAddress } from "../../src/native/owner.ts";
import { core, runtime } from "../../ffi/mod.ts";
import { addressOf, factsOf, newView, ownerOf } from "../../src/view/view.ts";
import { deleted, make, type TensorSpec } from "../support/producer.ts";
import type { ImportOptions } from "../../src/ops/import.ts";
import { test } from "../support/harness.ts";
import { live, refused } from "../support/assertions.ts";

/** The address as this runtime's FFI returns it from a C function: a pointer object in Deno. */
function asFfiReturns(address: number): unknown {
  return runtime().pointerObjects ? Deno.UnsafePointer.create(BigInt(address)) : address;
}

function filled(shape: number[], strides?: number[]) {
  const made = make({ shape, strides, dtype: "float32" });
  const n = strides === undefined ? shape.reduce((a, b) => a * b, 1) : 1 +
    shape.reduce((a, e, d) => a + (e - 1) * strides[d]!, 0);
  const values = new Float32Array(made.bytes(n * 4).buffer);
  for (let i = 0; i < n; i++) values[i] = i;
  return made;
}

test("import of an address as the runtime's FFI returns it (Deno pointer object, Bun number)", () => {
  const before = deleted();
  const alive = live();
  for (const versioned of [true, false]) {
    const made = make({ shape: [3], versioned });
    const pointer = asFfiReturns(made.address);
    const view = importDLPack((versioned ? { versioned: pointer } : { legacy: pointer }) as { versioned: number });
    assert.equal(view.address, BigInt(made.data));
    assert.deepEqual(view.shape, [3]);
    assert.equal(view.access, versioned ? "readwrite" : "unknown");
    view.dispose();
  }
  assert.equal(deleted(), before + 2, "each deleter once");
  // A refused tensor behind a pointer object goes back to its producer once, as with a number.
  const bad = make({ shape: [2], dtype: { code: 3, bits: 8, lanes: 1 } });
  refused(() => importDLPack({ versioned: asFfiReturns(bad.address) as number }), "dtype");
  assert.equal(deleted(), before + 3);
  assert.deepEqual(live(), alive);
});

test("objects that are not pointers are refused as addresses, nothing read or called", () => {
  const before = deleted();
  const made = make({ shape: [2] });
  const fakes: Record<string, unknown> = {
    "empty object": {},
    "a Proxy around a pointer": runtime().pointerObjects ? new Proxy(asFfiReturns(made.address) as object, {}) : {},
    "a TypedArray": new Float64Array([made.address]),
    "an array": [made.address],
  };
  for (const [name, fake] of Object.entries(fakes)) {
    refused(() => importDLPack({ versioned: fake as number }), "null_data", name);
    refused(() => importDLPack({ legacy: fake as number }), "null_data", name);
  }
  // A pointer object at an address that cannot be a struct: refused before anything is read.
  refused(() => importDLPack({ versioned: asFfiReturns(made.address + 4) as number }), "null_data");
  assert.equal(deleted(), before);
  importDLPack(made.source).dispose();
  assert.equal(deleted(), before + 1);
});

test("views of one layout share their facts; every other layout gets its own", () => {
  const cases: [number[], number[] | undefined][] = [
    [[2, 3], undefined],
    [[2, 3], undefined],
    [[3, 2], undefined],
    [[2, 3], [1, 2]],
    [[6], undefined],
    [[6], [2]],
    [[2, 1, 3], undefined],
  ];
  const views = cases.map(([shape, strides]) => importDLPack(filled(shape, strides).source));
  assert.equal(factsOf(views[0]!), factsOf(views[1]!), "the same layout twice: one facts record");
  for (let i = 0; i < cases.length; i++) {
    const [shape, strides] = cases[i]!;
    const v = views[i]!;
    assert.deepEqual(v.shape, shape);
    assert.deepEqual(v.strides, strides ?? (shape.length === 2 ? [shape[1], 1] : shape.length === 1 ? [1] : [3, 3, 1]));
    assert.ok(Object.isFrozen(v.shape) && Object.isFrozen(v.strides));
    assert.equal(v.shape, v.shape, "built once");
    assert.equal(v.cContiguous, strides === undefined);
    // Element values through the view's own layout.
    const last = shape.map((e) => e - 1);
    const expected = last.reduce((a, e, d) => a + e * (strides ?? v.strides)[d]!, 0);
    assert.equal(v.get(...last), expected);
  }
  for (const v of views) v.dispose();
  // An import after a disposal still reads its own layout.
  using again = importDLPack(filled([3, 2]).source);
  assert.deepEqual([again.shape, again.strides], [[3, 2], [2, 1]]);
});

test("an import differing from the last in one fact only gets facts of its own", () => {
  const before = deleted();
  // Each pair: a base layout, then the same with one thing the facts derive from changed.
  const variants: [string, TensorSpec, ImportOptions | undefined][] = [
    ["dtype code", { shape: [2, 3], dtype: "int32" }, undefined],
    ["dtype bits", { shape: [2, 3], dtype: "float64" }, undefined],
    ["flags", { shape: [2, 3], flags: 1 }, undefined],
    ["version", { shape: [2, 3], version: [1, 1] }, undefined],
    ["generation", { shape: [2, 3], versioned: false }, undefined],
    ["second extent", { shape: [2, 2], dataBytes: 24 }, undefined],
    ["second stride", { shape: [2, 3], strides: [4, 1], dataBytes: 40 }, undefined],
    ["rank", { shape: [6] }, undefined],
    ["producer", { shape: [2, 3] }, { producer: "other" }],
  ];
  for (const [name, spec, opts] of variants) {
    const base = importDLPack(make({ shape: [2, 3] }).source);
    const other = importDLPack(make(spec).source, opts);
    const again = importDLPack(make({ shape: [2, 3] }).source);
    assert.notEqual(factsOf(other), factsOf(base), name);
    assert.notEqual(factsOf(again), factsOf(other), name);
    assert.deepEqual([base.dtype, base.shape, base.strides, base.access, base.producer], [
      "float32",
      [2, 3],
      [3, 1],
      "readwrite",
      null,
    ], name);
    assert.deepEqual(
      [other.dtype, other.shape, other.strides, other.producer, other.version, other.flags.readOnly],
      [
        spec.dtype ?? "float32",
        spec.shape,
        spec.strides ?? (spec.shape!.length === 2 ? [spec.shape![1], 1] : [1]),
        opts?.producer ?? null,
        spec.versioned === false ? null : { major: 1, minor: spec.version?.[1] ?? 3 },
        spec.flags === 1,
      ],
      name,
    );
    assert.deepEqual([again.dtype, again.shape, again.strides, again.producer], ["float32", [2, 3], [3, 1], null]);
    for (const v of [base, other, again]) v.dispose();
  }
  assert.equal(deleted(), before + 3 * variants.length);
});

test("keyed imports share facts for an equal description of any rank, and a change past the second axis is seen", () => {
  const before = deleted();
  const alive = live();
  // Ranks 0-4: the same layout twice shares its facts; with an allocation and a capsule import
  // between (other native calls writing the scratch), the next raw import still gets the right ones.
  for (const shape of [[], [5], [2, 3], [2, 3, 4], [2, 1, 3, 2]]) {
    const first = importDLPack(make({ shape }).source);
    const second = importDLPack(make({ shape }).source);
    assert.equal(factsOf(second), factsOf(first), `rank ${shape.length}`);
    using z = zeros([7, 7], "int8");
    using back = importDLPack(exportDLPack(z));
    const third = importDLPack(make({ shape }).source);
    assert.deepEqual([back.shape, back.dtype, third.shape, third.dtype], [[7, 7], "int8", shape, "float32"]);
    for (const v of [first, second, third]) v.dispose();
  }
  // One fact changed beyond the first two axes, or the flags: facts of its own, each time.
  const base: TensorSpec = { shape: [2, 3, 4] };
  const variants: [string, TensorSpec, number[]][] = [
    ["third extent", { shape: [2, 3, 5] }, [15, 5, 1]],
    ["third stride", { shape: [2, 3, 4], strides: [12, 4, 2], dataBytes: 200 }, [12, 4, 2]],
    ["fourth axis", { shape: [2, 3, 4, 1] }, [12, 4, 1, 1]],
    ["read-only", { shape: [2, 3, 4], flags: 1 }, [12, 4, 1]],
  ];
  for (const [name, spec, strides] of variants) {
    const a = importDLPack(make(base).source);
    const b = importDLPack(make(spec).source);
    const c = importDLPack(make(base).source);
    assert.notEqual(factsOf(b), factsOf(a), name);
    assert.notEqual(factsOf(c), factsOf(b), name);
    assert.deepEqual([b.shape, b.strides, b.flags.readOnly, b.access], [
      spec.shape,
      strides,
      spec.flags === 1,
      spec.flags === 1 ? "readonly" : "readwrite",
    ], name);
    assert.deepEqual([c.shape, c.strides, c.access], [[2, 3, 4], [12, 4, 1], "readwrite"], name);
    for (const v of [a, b, c]) v.dispose();
  }
  assert.equal(deleted(), before + 15 + 3 * variants.length);
  assert.deepEqual(live(), alive);
});

test("a bigint address goes to native code as a word; one beyond [0, 2^53) is refused, even one that wraps to the tensor", () => {
  const before = deleted();
  const alive = live();
  const made = make({ shape: [2, 3] });
  // A runtime passes a bigint beyond 64 bits modulo 2^64: these would land on the tensor itself.
  const big = BigInt(made.address);
  for (const wrapped of [big + 2n ** 64n, big - 2n ** 64n, big + 2n ** 53n, -big]) {
    refused(() => importDLPack({ versioned: wrapped }), "null_data", String(wrapped));
    refused(() => importDLPack({ legacy: wrapped }), "null_data", String(wrapped));
  }
  assert.equal(deleted(), before, "nothing was read or released");
  const view = importDLPack({ versioned: big });
  assert.deepEqual([view.shape, view.strides, view.dtype, view.access], [[2, 3], [3, 1], "float32", "readwrite"]);
  const again = importDLPack(make({ shape: [2, 3] }).source);
  assert.equal(factsOf(again), factsOf(view), "the word import is keyed like the others");
  view.dispose();
  again.dispose();
  refused(() => importDLPack({ versioned: 0n }), "null_data");
  assert.equal(deleted(), before + 2);
  assert.deepEqual(live(), alive);
});

test("newView: a derived view shares the owner share by share, the deleter runs once after both", () => {
  const before = deleted();
  const base = importDLPack(filled([4]).source);
  const owner = ownerOf(base);
  core().dlpk_owner_retain(owner);
  const facts = factsOf(base);
  const derived = newView(owner, addressOf(base) + 4, { ...facts, shape: [3], size: 3, nbytes: 12 }, "readonly");
  base.dispose();
  assert.equal(deleted(), before, "the derived view keeps the memory");
  assert.deepEqual([derived.get(0), derived.get(2), derived.access], [1, 3, "readonly"]);
  derived.dispose();
  assert.equal(deleted(), before + 1);
});

test("library allocations and exports keep their facts through an import", () => {
  using z = zeros([2, 2], "float64");
  z.set(5, 1, 1);
  using back = importDLPack(exportDLPack(z));
  assert.deepEqual([back.shape, back.owner, z.owner, back.get(1, 1)], [[2, 2], "external", "dlpack-ts", 5]);
  assert.equal(back.version?.major, 1);
  assert.equal(z.version, null);
});

test("instanceof cannot be made to lie about the library's classes: impostors stay refused", () => {
  for (const ctor of [Capsule, BufferView]) {
    assert.throws(() => Object.defineProperty(ctor, Symbol.hasInstance, { value: () => false }), TypeError);
    assert.throws(() => {
      (ctor as unknown as Record<symbol, unknown>)[Symbol.hasInstance] = () => false;
    }, TypeError);
  }
  const forged = { capsule: Object.create(Capsule.prototype), view: Object.create(BufferView.prototype) };
  for (const [name, src] of Object.entries(forged)) refused(() => importDLPack(src), "argument", name);
  // The library's own objects whose prototype a caller replaced are still recognised by their brand.
  const before = live();
  const capsule = exportDLPack(new Float32Array(2));
  Object.setPrototypeOf(capsule, Object.prototype);
  const view = importDLPack(capsule);
  assert.deepEqual(view.shape, [2]);
  Object.setPrototypeOf(view, null);
  const again = importDLPack(view as BufferView);
  assert.deepEqual(again.shape, [2]);
  again.dispose();
  BufferView.prototype.dispose.call(view);
  assert.deepEqual(live(), before);
});

test("a capsule disposed from JS frees its struct and its pin at once (nothing queued for a sweep)", () => {
  const before = live();
  const arrays = Array.from({ length: 10 }, (_, k) => new Float64Array([k, k + 1]));
  const capsules = arrays.map((a, k) => (k % 2 === 0 ? exportDLPack(a) : exportDLPackLegacy(a)));
  assert.equal(stats().pinned, before.pinned + 10);
  for (const c of capsules) c.dispose();
  const drained = new Float64Array(16);
  assert.equal(core().dlpk_pins_drain(realmAddress(), runtime().addressOf(drained), 16), 0, "no id queued");
  assert.deepEqual(live(), before);
  // The ids are free again: later exports pin and release as before.
  const again = arrays.map((a) => exportDLPack(a));
  const views = again.map((c) => importDLPack(c));
  assert.deepEqual(views.map((v) => v.get(1)), arrays.map((_, k) => k + 1));
  for (const v of views) v.dispose();
  assert.deepEqual(live(), before);
});
