// Error messages a newcomer meets in the first hour: a write refused on a broadcast says it is a
// broadcast, importDLPack of a Python object points to fromPython, and the article before a dtype
// or rank is the one it is spoken with ("an int32", "a uint8", "an 8-d view").
import assert from "node:assert/strict";
import { arange, type BufferView, DLPackError, exportDLPack, fromArray, importDLPack, zeros } from "../../mod.ts";
import { withArticle } from "../../src/facts/errors.ts";
import { fromPython } from "../../python.ts";
import { test } from "../support/harness.ts";
import { refused } from "../support/assertions.ts";
import { noPython, python } from "../support/python.ts";

test("a write refused on a broadcast says it is a broadcast and how to get a writable copy", () => {
  using row = arange(3, "float32");
  using b = row.broadcastTo([4, 3]);
  const broadcast = /this view is a broadcast \(axis 0 has stride 0: its 4 elements are one\), so read-only; copy\(\)/;
  refused(() => b.set(1, 0, 0), "readonly", broadcast);
  refused(() => b.fill(1), "readonly", /fill\(\) writes this view, which is a broadcast/);
  refused(() => b.copyFrom(zeros([4, 3], "float32")), "readonly", /copyFrom writes this view, which is a broadcast/);
  refused(() => b.assumeWritable(), "readonly", /a broadcast .*assumeWritable\(\) cannot override that/);
  for (const err of [() => b.set(1, 0, 0), () => b.fill(1)]) {
    assert.doesNotMatch(refused(err, "readonly").message, /producer/);
  }
  // A read-only producer's tensor says that instead.
  using ro = importDLPack(exportDLPack(new Float32Array(3), { readonly: true }));
  const readOnly = refused(() => ro.set(1, 0), "readonly", /read-only \(its producer marked the tensor READ_ONLY/);
  assert.doesNotMatch(readOnly.message, /broadcast \(axis/);
  using made = fromArray(new Float32Array(2), { readonly: true });
  refused(() => made.fill(0), "readonly", /readonly: true/);
});

test("importDLPack of a Python object says to use fromPython", () => {
  const py = python();
  using arr = py.eval("__import__('numpy').arange(3.0)");
  const error = refused(() => importDLPack(arr as never), "argument", /a Python object .*fromPython\(obj\)/);
  assert.ok(error instanceof DLPackError);
  using view = fromPython(arr);
  assert.deepEqual(view.toNested(), [0, 1, 2], "and fromPython takes it");
  // Other objects still hear what importDLPack takes.
  refused(() => importDLPack({} as never), "argument", /importDLPack takes \{ versioned: address \}/);
}, { skip: noPython });

test("articles follow how the word is spoken: an int32, a uint8, an Int8Array, an 8-d view", () => {
  const cases: [string, string][] = [
    ["int32", "an int32"],
    ["uint8", "a uint8"],
    ["float32", "a float32"],
    ["bfloat16", "a bfloat16"],
    ["Int8Array", "an Int8Array"],
    ["Uint8Array", "a Uint8Array"],
    ["Float32Array", "a Float32Array"],
    ["BigInt64Array", "a BigInt64Array"],
    ["8-d", "an 8-d"],
    ["11-d", "an 11-d"],
    ["18-d", "an 18-d"],
    ["1-d", "a 1-d"],
    ["2-d", "a 2-d"],
    ["12-d", "a 12-d"],
    ["80-byte", "an 80-byte"],
    ["110-byte", "a 110-byte"],
  ];
  for (const [word, expected] of cases) assert.equal(withArticle(word), expected);
  using v = zeros([2], "int32");
  refused(() => v.set(1.5, 0), "dtype", /^an int32 element takes an integer/);
  using u = zeros([2], "uint8");
  refused(() => u.set(-1, 0), "dtype", /^a uint8 element/);
  using f = zeros([2], "int16");
  refused(() => f.copyFrom(new Int8Array(2)), "dtype", /an int16 view takes an Int16Array .*got an Int8Array/);
  using deep = zeros([1, 1, 1, 1, 1, 1, 1, 1], "int8") as BufferView;
  refused(() => deep.get(0), "shape", /for an 8-d view/);
  refused(() => deep.slice(0, 0, 0, 0, 0, 0, 0, 0, 0), "shape", /for an 8-d view/);
});
