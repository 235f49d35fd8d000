// Deleters that call back into the library. A producer's deleter may be a JS function (a runtime's
// FFI callback) that runs while the release that called it is still under way, and calls the
// library from there (stats(), an import, an export, a refused import), or throws. Every release
// path that ends in a producer's deleter is covered (a view's dispose, an owner share released
// last, a capsule of a re-exported import, the GC backstop, the deferred buffer), each in a child
// process, so a crash (a release replayed twice) fails the test instead of killing the runner.
import assert from "node:assert/strict";
import { repoRoot, runIsolated, runtimeName, test } from "../support/harness.ts";

/** A JS function the runtime's FFI hands native code as a `void (*)(void *)`, per runtime. */
const callback = runtimeName === "deno"
  ? `
const native = new Deno.UnsafeCallback({ parameters: ["pointer"], result: "void" }, (p) =>
  onDelete(Number(Deno.UnsafePointer.value(p))));
const deleterAddress = BigInt(Deno.UnsafePointer.value(native.pointer));
`
  : `
import { JSCallback } from "bun:ffi";
const native = new JSCallback((p) => onDelete(Number(p)), { args: ["ptr"], returns: "void" });
const deleterAddress = BigInt(native.ptr);
`;

/** What every child starts with: the library, the test producer, and `withJsDeleter()`, a producer
 * tensor whose deleter is the JS function `onDelete` (set by each test; it must free the struct). */
const prelude = `
import assert from "node:assert/strict";
import { DLPackError, exportDLPack, importDLPack, stats } from "${repoRoot}/mod.ts";
import { deleted, make } from "${repoRoot}/tests/support/producer.ts";
import { freeUncounted, OFFSETS, setWord } from "${repoRoot}/tests/support/hostile_memory.ts";
import { collectGarbage } from "${repoRoot}/tests/support/harness.ts";

function live() {
  const s = stats();
  return { imports: s.imports, exports: s.exports, pinned: s.pinned, allocations: s.allocations };
}
let onDelete = (address) => freeUncounted(address, true);
${callback}
function withJsDeleter(spec = { shape: [4] }) {
  const made = make(spec);
  setWord(made.address, OFFSETS.versioned.deleter, deleterAddress);
  return made;
}
const settle = () => new Promise((resolve) => setTimeout(resolve, 20));
const before = live();
const deletedBefore = deleted();
`;

const epilogue = `
assert.deepEqual(live(), before, "stats() back where it was");
native.close();
console.log("DONE");
`;

/** Runs \`body\` after the prelude in a fresh process; fails on a crash or a failed assert. */
function isolated(body: string, allowAll = false): void {
  const run = runIsolated(prelude + body + epilogue, { gc: true, allowAll });
  assert.equal(run.code, 0, `child exited with ${run.code}\n${run.stderr}\n${run.stdout}`);
  assert.match(run.stdout, /DONE/);
}

test("a deleter that calls back into the library (stats, import, export, a refused import) runs once per release path", () => {
  isolated(`
const deleterCalls = [];
const innerErrors = [];
onDelete = (address) => {
  deleterCalls.push(address);
  // Calls the library while the release that called this is under way.
  assert.equal(typeof stats().imports, "number");
  const inner = importDLPack(make({ shape: [3] }).source);
  assert.deepEqual(inner.shape, [3]);
  inner.dispose();
  exportDLPack(new Float32Array(4)).dispose();
  // Refused after the native import took it (element 0 of an empty tensor beyond 2^53): its owner
  // is parked and released once this deleter has returned.
  try {
    importDLPack(make({ shape: [0], data: 2n ** 53n + 4096n }).source);
  } catch (error) {
    innerErrors.push(error);
  }
  freeUncounted(address, true);
};

// A view's dispose.
const a = withJsDeleter();
importDLPack(a.source).dispose();
assert.deepEqual(deleterCalls, [a.address], "dispose: the deleter ran once");

// An independent owner share released after the view.
const b = withJsDeleter();
const viewB = importDLPack(b.source);
const share = viewB.keepAlive.retain();
viewB.dispose();
assert.equal(deleterCalls.length, 1, "the share keeps the tensor");
share.release();
share.release();
assert.deepEqual(deleterCalls, [a.address, b.address], "share: the deleter ran once");

// A capsule of a re-exported import, disposed last.
const c = withJsDeleter();
const viewC = importDLPack(c.source);
const capsule = exportDLPack(viewC);
viewC.dispose();
assert.equal(deleterCalls.length, 2, "the capsule keeps the tensor");
capsule.dispose();
capsule.dispose();
assert.deepEqual(deleterCalls, [a.address, b.address, c.address], "capsule: the deleter ran once");

// The GC backstop, for a view nobody disposed.
const d = withJsDeleter();
(() => {
  importDLPack(d.source);
})();
for (let i = 0; i < 50 && deleterCalls.length < 4; i++) {
  await collectGarbage();
  await settle();
}
assert.deepEqual(deleterCalls, [a.address, b.address, c.address, d.address], "backstop: the deleter ran once");

// What the deleters parked is released once they returned (a timer, then the next call).
await settle();
assert.equal(innerErrors.length, 4);
for (const error of innerErrors) {
  assert.ok(error instanceof DLPackError, String(error));
  assert.equal(error.code, "overflow", error.message);
}
assert.equal(deleted() - deletedBefore, 8, "each inner tensor's deleter ran exactly once");
`);
});

test("a deleter that throws: dispose() throws it, the tensor was released once, and nothing is released again", () => {
  isolated(`
let calls = 0;
onDelete = (address) => {
  calls++;
  freeUncounted(address, true);
  throw new Error("deleter failed " + calls);
};
for (let i = 1; i <= 3; i++) {
  const view = importDLPack(withJsDeleter().source);
  let error;
  try {
    view.dispose();
  } catch (e) {
    error = e;
  }
  // Whether the runtime passes the callback's exception on is its own affair; the release is not.
  if (error !== undefined) assert.match(String(error), /deleter failed/);
  assert.equal(calls, i);
  assert.ok(view.disposed);
  view.dispose();
  // The next calls replay what is deferred: nothing of this release may run again.
  stats();
  importDLPack(make({ shape: [2] }).source).dispose();
  assert.equal(calls, i);
}
await settle();
stats();
assert.equal(calls, 3);
assert.equal(deleted() - deletedBefore, 3);
`);
});

/** A second copy of the module's files, as a second version would be, loaded as `second` on the
 * same library (after this copy has loaded it). */
const secondCopy = `
const { cpSync, mkdtempSync, rmSync } = await import("node:fs");
const { tmpdir } = await import("node:os");
const { corePath } = await import("${repoRoot}/ffi/mod.ts");
const copy = mkdtempSync(tmpdir() + "/dlpack-copy-");
for (const part of ["mod.ts", "src", "ffi"]) cpSync("${repoRoot}/" + part, copy + "/" + part, { recursive: true });
const second = await import(copy + "/mod.ts");
rmSync(copy, { recursive: true });
second.useLibrary(corePath());
assert.notEqual(second.importDLPack, importDLPack, "a second copy of the module");
`;

test("two copies of the module in one realm share one journal: a throwing deleter is never replayed by either", () => {
  // A program may load the module twice (two versions, two URLs). Releases journal themselves in
  // the native side's journal of this thread, which both copies see, so each copy's replay finds
  // only entries that are still owed, whichever copy wrote them.
  isolated(
    `${secondCopy}
let calls = 0;
onDelete = (address) => {
  calls++;
  freeUncounted(address, true);
  // The other copy imports and releases while this release is under way.
  second.importDLPack(make({ shape: [2] }).source).dispose();
  throw new Error("deleter failed " + calls);
};
for (let i = 1; i <= 4; i++) {
  const view = (i % 2 === 1 ? importDLPack : second.importDLPack)(withJsDeleter().source);
  try {
    view.dispose();
  } catch (error) {
    assert.match(String(error), /deleter failed/);
  }
  assert.equal(calls, i);
  // Both copies replay what is deferred: nothing of the releases above may run again.
  stats();
  second.stats();
  importDLPack(make({ shape: [2] }).source).dispose();
  second.importDLPack(make({ shape: [2] }).source).dispose();
  assert.equal(calls, i);
}
await settle();
stats();
second.stats();
assert.equal(calls, 4);
assert.equal(deleted() - deletedBefore, 12, "each counted tensor released exactly once");
`,
    true,
  );
});

test("two copies of the module in one realm share one scratch: each builds its views from its own imports", () => {
  // The scratch is the library's, one per thread: both copies write it, and each keeps its own
  // record of the last layout it built, so neither may take the other's facts for its own.
  isolated(
    `${secondCopy}
// The second copy's first call, inside the deleter of a tensor this copy refuses, loads the
// library for it and copies its placeholder over the scratch: the refusal still reports itself.
let firstCalls = 0;
onDelete = (address) => {
  firstCalls++;
  freeUncounted(address, true);
  second.importDLPack(make({ shape: [5], dtype: "uint16" }).source).dispose();
};
assert.throws(
  () => importDLPack(withJsDeleter({ shape: [4], dtype: { code: 2, bits: 12, lanes: 1 } }).source),
  /dtype code 2 needs bits 16, 32 or 64 .got code 2, bits 12, lanes 1.; the producer's deleter was called/,
);
assert.equal(firstCalls, 1);
const layouts = [
  { shape: [2, 3], dtype: "float32" },
  { shape: [4], dtype: "float64" },
  { shape: [2, 3], dtype: "float32" },
  { shape: [3, 2], dtype: "int8" },
  { shape: [3, 2], dtype: "int8", versioned: false },
];
const facts = (v) => [v.dtype, v.shape, v.strides];
const expected = (spec) => [spec.dtype, spec.shape, spec.shape.length === 2 ? [spec.shape[1], 1] : [1]];
// A release by one copy runs a deleter that imports and exports through the other.
onDelete = (address) => {
  freeUncounted(address, true);
  const inner = second.importDLPack(make({ shape: [5], dtype: "uint16" }).source);
  assert.deepEqual(facts(inner), ["uint16", [5], [1]]);
  second.importDLPack(second.exportDLPack(new Int8Array(3))).dispose();
  inner.dispose();
};
for (let i = 0; i < 20; i++) {
  const [a, b] = i % 3 === 0 ? [second, { importDLPack }] : [{ importDLPack }, second];
  const specA = layouts[i % layouts.length];
  const specB = layouts[(i * 7 + 1) % layouts.length];
  const viewA = a.importDLPack(make(specA).source);
  const viewB = b.importDLPack(make(specB).source);
  assert.deepEqual(facts(viewA), expected(specA), "view " + i + " of the first import");
  assert.deepEqual(facts(viewB), expected(specB), "view " + i + " of the second import");
  viewA.dispose();
  viewB.dispose();
  if (i % 4 === 0) importDLPack(withJsDeleter({ shape: [6] }).source).dispose();
}
// A refusal reads what its own import wrote, right after the other copy's import.
second.importDLPack(make({ shape: [2] }).source).dispose();
assert.throws(() => importDLPack(make({ dtype: { code: 2, bits: 12, lanes: 1 } }).source), /bits/);
await settle();
// The second copy's pins are its own to sweep; the epilogue then finds nothing left.
second.stats();
stats();
`,
    true,
  );
});

test("a release owed from before runs before the next import takes its tensor, even when its deleter throws", () => {
  isolated(`
const { core } = await import("${repoRoot}/ffi/mod.ts");
const journal = await import("${repoRoot}/src/native/journal.ts");
// A share whose release is owed, as a release that could not start (an exhausted stack) leaves it.
let calls = 0;
onDelete = (address) => {
  calls++;
  freeUncounted(address, true);
  throw new Error("owed deleter failed");
};
const view = importDLPack(withJsDeleter().source);
const record = Number(view.keepAlive.address);
// A retain journals the reference it makes until a holder takes it: none does here, so it is owed.
const owedBefore = journal.journalCount[0];
core().dlpk_owner_retain(record);
assert.equal(journal.journalCount[0], owedBefore + 1, "the new reference is journaled");
assert.equal(journal.journalEntries[owedBefore], record);
view.dispose();
assert.equal(calls, 0, "the retained share keeps the tensor");
const good = make({ shape: [2] });
const deletedAtImport = deleted();
let imported;
try {
  imported = importDLPack(good.source);
} catch (error) {
  // Whether the runtime passes the callback's exception on is its own affair; if it does, the
  // import stopped before it took its tensor.
  assert.match(String(error), /owed deleter failed/);
  assert.equal(deleted() - deletedAtImport, 0, "the tensor the import was given is untouched");
  imported = importDLPack(good.source);
}
assert.equal(calls, 1, "the owed release ran, once");
assert.equal(journal.journalCount[0], 0, "nothing is owed any more");
imported.dispose();
assert.equal(deleted() - deletedAtImport, 1);
`);
});

test("a second instance of the module's internals on the same loader loads, and shares the journal", () => {
  isolated(`
const first = await import("${repoRoot}/src/native/journal.ts");
const second = await import("${repoRoot}/src/native/journal.ts?second-instance");
assert.notEqual(first.releaseOwner, second.releaseOwner, "two instances");
importDLPack(make({ shape: [2] }).source).dispose();
assert.equal(second.journalEntries.length, first.journalEntries.length);
assert.equal(second.journalCount[0], 0);
`);
});

test("owners parked inside deleters, whose deleters park more, are all released once", () => {
  isolated(`
const calls = [];
let chain = 3;
onDelete = (address) => {
  calls.push(address);
  // Each refused import parks its owner here; that owner's own deleter (run later, from the
  // deferred buffer) parks the next.
  if (chain > 0) {
    chain--;
    const refused = withJsDeleter({ shape: [0], data: 2n ** 53n + 4096n });
    assert.throws(() => importDLPack(refused.source), (e) => e instanceof DLPackError && e.code === "overflow");
  }
  freeUncounted(address, true);
};
importDLPack(withJsDeleter().source).dispose();
for (let i = 0; i < 20 && calls.length < 4; i++) {
  await settle();
  stats();
}
assert.equal(calls.length, 4, "every parked owner released");
await settle();
stats();
assert.equal(calls.length, 4, "none twice");
`);
});

test("a refusal's message survives a deleter that imports another tensor before JS reads it", () => {
  isolated(`
let reenter = false;
onDelete = (address) => {
  if (reenter) importDLPack(make({ shape: [7, 9], dtype: "float64" }).source).dispose();
  freeUncounted(address, true);
};
function refusal(spec) {
  try {
    importDLPack(withJsDeleter(spec).source);
  } catch (error) {
    assert.ok(error instanceof DLPackError, String(error));
    return error.code + ": " + error.message;
  }
  assert.fail("not refused");
}
for (const spec of [
  { shape: [4], version: [2, 0] },
  { shape: [4], flags: 0x100 },
  { shape: [4], dtype: { code: 2, bits: 32, lanes: 4 } },
  { shape: [4], device: [99, 0] },
]) {
  reenter = false;
  const plain = refusal(spec);
  reenter = true;
  assert.equal(refusal(spec), plain);
}
assert.match(refusal({ shape: [4], device: [99, 0] }), /device type 99/);
assert.equal(deleted() - deletedBefore, 5);
`);
});
