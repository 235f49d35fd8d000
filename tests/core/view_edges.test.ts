// The edges of the view operations: copies too large for a JS array, layouts whose strides pass
// 2^53, broadcasts of views of unknown access, and BufferView's methods called on something that
// is no view. Each ends in a DLPackError naming the mistake, never the engine's raw RangeError or
// TypeError, and never a writable broadcast.
import assert from "node:assert/strict";
import { BufferView, Capsule, empty, exportDLPack, exportDLPackLegacy, importDLPack, Owner, zeros } from "../../mod.ts";
import { consumerValues, tp } from "../support/producer.ts";
import { test } from "../support/harness.ts";
import { live, refused } from "../support/assertions.ts";
import { I32, scratch, Status } from "../../src/native/scratch.ts";
import { refusalError } from "../../src/native/refusals.ts";

// deno-lint-ignore no-explicit-any
const any = (x: unknown): any => x;

test("toArray() and toNested() of views too large for a JS array are DLPackErrors", () => {
  using one = zeros([1], "uint8");
  // 2^40 elements over one byte (stride 0): no memory behind it, no JS array can hold it.
  using huge = one.broadcastTo([2 ** 40]);
  refused(() => huge.toArray(), "library", /toArray\(\) needs a JS ArrayBuffer of 1099511627776 bytes.*copy\(\)/);
  refused(() => huge.toNested(), "overflow", /toNested\(\) of 1099511627776 elements.*2\^32 - 1/);
  // One element more than a JS array holds, refused before anything is copied.
  using over = one.broadcastTo([2 ** 16, 2 ** 16 + 1]);
  refused(() => over.toNested(), "overflow", /4295032832 elements/);
  // copy() goes to library memory, which says so in its own words.
  refused(() => huge.copy(), "library", /allocating 1099511627776 bytes/);
});

test("copyFrom(nested) into a view too large for a JS array is a DLPackError", () => {
  using one = zeros([1], "float32");
  // A writable view of 2^40 elements over 4 bytes: an export with a zero stride, imported again.
  using wide = importDLPack(exportDLPack(one, { shape: [2 ** 40], strides: [0] }));
  assert.equal(wide.access, "readwrite");
  refused(() => wide.copyFrom([1, 2, 3]), "library", /copyFrom\(\) needs a JS ArrayBuffer/);
});

test("reshape of an empty view refuses shapes whose strides pass 2^53", () => {
  const before = live();
  reshapes();
  assert.deepEqual(live(), before);
});

function reshapes(): void {
  using view = empty([0], "float64");
  refused(
    () => view.reshape([2 ** 30, 2 ** 30, 2 ** 30, 0]),
    "overflow",
    /^reshape\(\) would give shape \[1073741824, 1073741824, 1073741824, 0\] the strides .*stride .* of dimension 0 is beyond 2\^53 - 1/,
  );
  refused(() => view.reshape([2 ** 27, 2 ** 27, 2 ** 27, 0]), "overflow", /stride 18014398509481984 of dimension 0/);
  // Strides up to 2^53 - 1 make a view like any other, which exports.
  using fits = view.reshape([2 ** 26, 2 ** 26, 2 ** 26, 0]);
  assert.deepEqual(fits.strides, [2 ** 52, 2 ** 26, 1, 1]);
  using again = importDLPack(exportDLPack(fits));
  assert.deepEqual(again.shape, [2 ** 26, 2 ** 26, 2 ** 26, 0]);
  // A slice step multiplies a stride too, empty or not.
  using rows = zeros([4, 4], "float32");
  refused(() => rows.slice("0:1:4503599627370496"), "overflow", /^slice\(\) would give shape \[1, 4\]/);
}

test("a native refusal of an export, copy or allocation never speaks of a capsule: none exists", () => {
  // The export's backstop (what JS checks first never lets a view reach it): a refusal read from
  // the scratch, as the export, copy, allocation and array-interface paths report it.
  scratch.i32[I32.dim] = -1;
  const error = refusalError(Status.strides, scratch, null);
  assert.equal(error.code, "strides");
  assert.doesNotMatch(error.message, /capsule|deleter/);
  assert.match(refusalError(Status.strides, scratch, false).message, /the capsule keeps ownership/, "Python's");
});

test("broadcastTo of a view of unknown access is read-only: assumeWritable() cannot make it writable", () => {
  const before = live();
  broadcasts();
  assert.deepEqual(live(), before);
});

function broadcasts(): void {
  using base = zeros([3], "float32");
  using legacy = importDLPack(exportDLPackLegacy(base));
  assert.equal(legacy.access, "unknown");
  using wide = legacy.broadcastTo([2, 3]);
  assert.equal(wide.access, "readonly");
  refused(() => wide.assumeWritable(), "readonly", /broadcast/);
  refused(() => wide.set(1, 0, 0), "readonly", /broadcast/);
  refused(() => wide.fill(1), "readonly");
  assert.equal(wide.writable, false);
  // The base itself can still be declared writable, and its broadcasts stay read-only.
  legacy.assumeWritable();
  using later = legacy.broadcastTo([2, 3]);
  assert.equal(later.access, "readonly");
}

/** Every method and getter of BufferView.prototype, by name. */
function members(): { name: string; call: (self: unknown) => unknown }[] {
  const proto = BufferView.prototype as unknown as Record<PropertyKey, unknown>;
  const out: { name: string; call: (self: unknown) => unknown }[] = [];
  for (const key of Reflect.ownKeys(proto)) {
    if (key === "constructor") continue;
    const d = Object.getOwnPropertyDescriptor(proto, key)!;
    const name = typeof key === "symbol" ? `[${key.description}]` : key;
    if (d.get !== undefined) out.push({ name, call: (self) => Reflect.apply(d.get!, self, []) });
    else if (typeof d.value === "function") out.push({ name, call: (self) => Reflect.apply(d.value, self, [0]) });
  }
  return out;
}

test("BufferView methods and getters called on something that is no view are DLPackErrors", () => {
  using view = zeros([2], "float32");
  const receivers: [string, unknown][] = [
    ["a plain object", {}],
    ["an impostor", Object.create(BufferView.prototype)],
    ["null", null],
    ["undefined", undefined],
    ["a number", 5],
    ["a string", "view"],
    ["a TypedArray", new Float32Array(2)],
    ["a Proxy of a view", new Proxy(view, {})],
    ["a capsule", exportDLPack(new Float32Array(2))],
  ];
  const all = members();
  assert.ok(all.length > 50, `${all.length} members`);
  for (const [what, self] of receivers) {
    for (const { name, call } of all) {
      if (name === "[Deno.customInspect]" || name === "[nodejs.util.inspect.custom]") {
        assert.match(String(call(self)), /pretends to be a BufferView/, `${name} of ${what}`);
        continue;
      }
      if (name === "[Jupyter.display]") {
        // Displaying never throws either: a notebook cell must still show something.
        const bundle = call(self) as Record<string, string>;
        assert.match(bundle["text/plain"]!, /pretends to be a BufferView/, `${name} of ${what}`);
        continue;
      }
      refused(() => call(self), "argument", `${name} of ${what}`, /needs a BufferView as this/);
    }
  }
  any(receivers.at(-1)![1]).dispose();
});

test("new BufferView() is refused, whatever it is given: no view over an address a caller chose", () => {
  using view = zeros([2], "float32");
  const facts = { info: { name: "float32" }, shape: [1], strides: [1], size: 1 };
  const forms: [string, () => unknown][] = [
    [
      "new with a forged owner, address and facts",
      () => new (any(BufferView))(1, Number(view.address), facts, "readwrite"),
    ],
    ["Reflect.construct", () => Reflect.construct(any(BufferView), [1, 8, facts, "readwrite", {}])],
    ["the constructor of a real view", () => new (any(view).constructor)(1, 8, facts, "readwrite")],
    ["a subclass", () => new (any(class extends any(BufferView) {}))(1, 8, facts, "readwrite")],
  ];
  const before = live();
  for (const [what, make] of forms) refused(make, "argument", what, /no public constructor/);
  assert.deepEqual(live(), before, "nothing was retained or released");
  assert.equal(view.get(0), 0, "the real view is untouched");
});

test("new Owner() and new Capsule() are refused: no share or capsule of a record a caller names", () => {
  using view = zeros([2], "float32");
  view.set(7, 1);
  const record = Number(view.keepAlive.address);
  const exported = new Float32Array([1, 2]);
  const struct = exportDLPack(exported).takeAddress();
  const before = live();
  // A forged share's release would free the live view's memory; a forged capsule's dispose would
  // unpin an export its consumer still holds.
  refused(() => new (any(Owner))(record, undefined).release(), "argument", "new Owner", /no public constructor/);
  refused(() => Reflect.construct(any(Owner), [record, undefined, {}]), "argument", "Reflect.construct(Owner)");
  refused(() => new (any(Capsule))(struct, true).dispose(), "argument", "new Capsule", /no public constructor/);
  assert.deepEqual(live(), before, "nothing was released");
  assert.equal(view.get(1), 7, "the view's memory is still its own");
  assert.deepEqual(consumerValues(struct, true), [1, 2], "the export is still pinned");
  tp.tp_consume(struct, 1);
});
