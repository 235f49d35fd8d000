// Deleters that call back into the library. A producer's deleter may be a JS function (a runtime's
// FFI callback) that runs while the release that called it is still under way, and calls the
// library from there: stats(), an import, an export, a refused import. Every release path that
// ends in a producer's deleter is covered (a view's dispose, an owner share released last, a
// capsule of a re-exported import, the GC backstop), each in a child process, so a crash (a release
// replayed twice) fails the test instead of killing the runner.
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

const source = `
import assert from "node:assert/strict";
import { DLPackError, exportDLPack, importDLPack, stats } from "${repoRoot}/mod.ts";
import { deleted, make } from "${repoRoot}/tests/support/producer.ts";
import { freeUncounted, OFFSETS, setWord } from "${repoRoot}/tests/support/hostile_memory.ts";
import { collectGarbage } from "${repoRoot}/tests/support/harness.ts";

function live() {
  const s = stats();
  return { imports: s.imports, exports: s.exports, pinned: s.pinned, allocations: s.allocations };
}

const deleterCalls = [];
const innerErrors = [];
/** The JS deleter: calls the library while the release that called it is under way, then frees
 * the struct as a deleter does. */
function onDelete(address) {
  deleterCalls.push(address);
  const during = stats();
  assert.equal(typeof during.imports, "number");
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
}
${callback}
/** A producer tensor whose deleter is the JS function above. */
function withJsDeleter() {
  const made = make({ shape: [4] });
  setWord(made.address, OFFSETS.versioned.deleter, deleterAddress);
  return made;
}

const before = live();
const deletedBefore = deleted();

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
  await new Promise((resolve) => setTimeout(resolve, 10));
}
assert.deepEqual(deleterCalls, [a.address, b.address, c.address, d.address], "backstop: the deleter ran once");

// What the deleters parked is released once they returned (a timer, then the next call).
await new Promise((resolve) => setTimeout(resolve, 20));
assert.equal(innerErrors.length, 4);
for (const error of innerErrors) {
  assert.ok(error instanceof DLPackError, String(error));
  assert.equal(error.code, "overflow", error.message);
}
assert.equal(deleted() - deletedBefore, 8, "each inner tensor's deleter ran exactly once");
assert.deepEqual(live(), before, "stats() back where it was");
native.close();
console.log("DONE");
`;

test("a deleter that calls back into the library (stats, import, export, a refused import) runs once per release path", () => {
  const run = runIsolated(source, { gc: true });
  assert.equal(run.code, 0, `child exited with ${run.code}\n${run.stderr}\n${run.stdout}`);
  assert.match(run.stdout, /DONE/);
});
