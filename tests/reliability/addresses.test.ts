// Addresses that lie: unmapped and garbage structs, unreadable shape and strides arrays, data that
// was never readable, data in read-only memory, deleters that are not code, structs of the wrong
// generation (foreign ones and this library's own), and one of this library's exports imported
// twice. Each must end in a DLPackError naming what was
// wrong, with every deleter called at most once and stats() back where it was. Every case that
// crashed the process before runs in a child process, so a crash fails the test, not the runner.
import assert from "node:assert/strict";
import { readFileSync } from "node:fs";
import { repoRoot, runIsolated, test } from "../support/harness.ts";
import { refusalError } from "../../src/native/refusals.ts";
import { Scratch, Status } from "../../src/native/scratch.ts";
import { guardRegion } from "../support/hostile_memory.ts";

const prelude = `
import assert from "node:assert/strict";
import { DLPackError, exportDLPack, exportDLPackLegacy, fromArrayInterface, fromDLPack, importDLPack, stats } from "${repoRoot}/mod.ts";
import { deleted, make } from "${repoRoot}/tests/support/producer.ts";
import { freeUncounted, guardRegion, OFFSETS, randomBytes, readOnlyRegion, setWord } from "${repoRoot}/tests/support/hostile_memory.ts";

function refused(fn, code, message) {
  let error;
  try {
    fn();
  } catch (e) {
    error = e;
  }
  assert.ok(error instanceof DLPackError, "expected a DLPackError, got " + error);
  assert.equal(error.code, code, error.message);
  assert.match(error.message, message);
  return error;
}
function live() {
  const s = stats();
  return { imports: s.imports, exports: s.exports, pinned: s.pinned, allocations: s.allocations };
}
const before = live();
const deletedBefore = deleted();
`;

const epilogue = `
assert.deepEqual(live(), before, "stats() back where it was");
console.log("DONE");
`;

/** Runs `body` (plain JS after the prelude) in a fresh process; fails on a crash or a failed assert. */
function isolated(body: string): void {
  const result = runIsolated(prelude + body + epilogue);
  assert.equal(result.code, 0, `child exited with ${result.code}\n${result.stderr}\n${result.stdout}`);
  assert.match(result.stdout, /DONE/);
}

const linuxOnly = guardRegion() === null ? "needs the Linux guard region (tp_guard_region)" : false;

test("unmapped structs: { versioned: 4096 }, { legacy: 65536 }, the top of user space", () => {
  isolated(`
for (const [source, shown] of [
  [{ versioned: 4096 }, "0x1000"],
  [{ legacy: 65536 }, "0x10000"],
  [{ versioned: 2 ** 47 - 8 }, "0x7ffffffffff8"],
  [{ legacy: 2 ** 47 - 64 }, "0x7fffffffffc0"],
  [{ versioned: 2 ** 47 }, "0x800000000000"],
  [{ legacy: 2 ** 52 }, "0x10000000000000"],
  [{ versioned: 2 ** 53 - 4096 }, "0x1ffffffffff000"],
]) {
  refused(() => importDLPack(source), "null_data",
    new RegExp("the struct at " + shown + " is not in readable memory .*no deleter called"));
}
assert.equal(deleted(), deletedBefore);
`);
});

test("structs in a PROT_NONE page, an unmapped page, or running into one", () => {
  isolated(`
const g = guardRegion();
for (const versioned of [true, false]) {
  const key = versioned ? "versioned" : "legacy";
  for (const address of [g.protNone, g.unmapped, g.protNone - 8, g.protNone - 48]) {
    refused(() => importDLPack({ [key]: address }), "null_data", /is not in readable memory/);
  }
}
assert.equal(deleted(), deletedBefore);
`);
}, { skip: linuxOnly });

test("aligned buffers of random bytes as structs (8 seeds, both generations)", () => {
  isolated(`
for (let seed = 1; seed <= 8; seed++) {
  const address = randomBytes(seed);
  for (const key of ["versioned", "legacy"]) {
    refused(() => importDLPack({ [key]: address }), "null_data",
      /the deleter 0x[0-9a-f]+ is not executable code.*it was not called, so the tensor .* is leaked/);
  }
}
assert.equal(deleted(), deletedBefore);
`);
});

test("deleters that are not code are never called: heap, stack-like, PROT_NONE, non-canonical values", () => {
  isolated(`
const g = guardRegion();
const bad = [0xdeadbeefn, (1n << 63n) + 0x1000n, 0x7ffffffff000n, BigInt(g?.protNone ?? 0x10000), BigInt(g?.readable ?? 0x20000)];
for (const versioned of [true, false]) {
  for (const value of bad) {
    const made = make({ versioned, shape: [2, 3] });
    setWord(made.address, OFFSETS[versioned ? "versioned" : "legacy"].deleter, value);
    refused(() => importDLPack(made.source), "null_data",
      new RegExp("the deleter 0x" + value.toString(16) + " is not executable code"));
    freeUncounted(made.address, versioned);
  }
  // A deleter pointing at the tensor's own data.
  const made = make({ versioned, shape: [2, 3] });
  setWord(made.address, OFFSETS[versioned ? "versioned" : "legacy"].deleter, BigInt(made.data));
  refused(() => importDLPack(made.source), "null_data", /is not executable code/);
  freeUncounted(made.address, versioned);
}
assert.equal(deleted(), deletedBefore);
`);
});

test("shape and strides arrays that are PROT_NONE, unmapped, or run into such a page", () => {
  isolated(`
const g = guardRegion();
let expected = deletedBefore;
for (const versioned of [true, false]) {
  const offsets = OFFSETS[versioned ? "versioned" : "legacy"];
  for (const field of ["shape", "strides"]) {
    for (const address of [g.protNone, g.unmapped, g.protNone - 8]) {
      const made = make({ versioned, shape: [2, 3], strides: [3, 1] });
      setWord(made.address, offsets[field], BigInt(address));
      refused(() => importDLPack(made.source), field,
        new RegExp("the " + field + " array at 0x" + address.toString(16) +
          " \\\\(16 bytes for ndim 2\\\\) is not in readable memory; the producer's deleter was called"));
      expected += 1;
      assert.equal(deleted(), expected, "the deleter ran exactly once");
    }
  }
}
`);
}, { skip: linuxOnly });

test("data that was never readable: address 16, 2^53 - 8, the top of user space, PROT_NONE, unmapped, running into either", () => {
  // Each imported fine before, and the first get(), array(), console.log(), toArray(), copy() or
  // fill() killed the process.
  isolated(`
const g = guardRegion();
const places = [16, 2 ** 53 - 8, 2 ** 47 - 8];
if (g !== null) places.push(g.protNone, g.unmapped, g.protNone - 4, g.protNone + 4096 - 4);
let expected = deletedBefore;
for (const versioned of [true, false]) {
  for (const address of places) {
    const shown = "0x" + address.toString(16);
    const made = make({ versioned, shape: [2], data: address });
    refused(() => importDLPack(made.source), "null_data",
      new RegExp("the data at " + shown + " \\\\(the 8 bytes its shape and strides reach\\\\) is not all in " +
        "readable memory .*nothing of it was read; the producer's deleter was called"));
    expected += 1;
    assert.equal(deleted(), expected, "the deleter ran exactly once");
    refused(() => fromDLPack(make({ versioned, shape: [2], data: address }).source), "null_data", /the data at/);
    expected += 1;
  }
  if (g === null) continue;
  // A negative stride reaching below a mapping's first byte.
  const below = make({ versioned, shape: [3], strides: [-1], data: g.readable + 4 });
  refused(() => importDLPack(below.source), "null_data",
    new RegExp("the data at 0x" + (g.readable - 4).toString(16) + " \\\\(the 12 bytes"));
  expected += 1;
}
assert.equal(deleted(), expected);
`);
});

test("fromArrayInterface of data that is not readable: refused, keepAlive released once", () => {
  isolated(`
const g = guardRegion();
const places = [16, 2 ** 47 - 16];
if (g !== null) places.push(g.protNone, g.unmapped, g.protNone - 8);
for (const address of places) {
  let releases = 0;
  refused(() => fromArrayInterface({ data: [address, false], shape: [4], typestr: "<f4" }, { dispose() { releases++; } }),
    "null_data", /the data at 0x[0-9a-f]+ \\(the 16 bytes/);
  stats(); // the pin's release reaches JS at the next library call
  assert.equal(releases, 1, "keepAlive released once");
}
// Empty arrays point anywhere, as before.
fromArrayInterface({ data: [16, false], shape: [0], typestr: "<f4" }).dispose();
`);
});

test("size-0 tensors accept NULL and any data, as before", () => {
  isolated(`
for (const versioned of [true, false]) {
  for (const data of ["null", 16, 2 ** 47 - 8]) {
    const v = importDLPack(make({ versioned, shape: [3, 0], data }).source);
    assert.equal(v.size, 0);
    assert.equal(v.toArray().length, 0);
    v.dispose();
  }
}
assert.equal(deleted(), deletedBefore + 6);
`);
});

test("data in read-only memory: a read-only view whatever the producer said, in both generations", () => {
  isolated(`
const r = readOnlyRegion();
for (const versioned of [true, false]) {
  const v = importDLPack(make({ versioned, shape: [4], data: r.readOnly }).source);
  assert.equal(v.access, "readonly");
  assert.equal(v.flags.readOnly, true);
  assert.deepEqual([...v.toArray()], [1024, 1025, 1026, 1027]);
  assert.equal(v.get(3), 1027);
  refused(() => v.set(1, 0), "readonly", /cannot be written in this process/);
  refused(() => v.fill(0), "readonly", /read-only/);
  refused(() => v.copyFrom(new Float32Array(4)), "readonly", /read-only/);
  refused(() => v.assumeWritable(), "readonly", /cannot be written in this process.*assumeWritable\\(\\) cannot override/);
  refused(() => exportDLPackLegacy(v), "readonly", /cannot mark data read-only/);
  // Exported again, it says so; imported again, it is still read-only.
  const again = importDLPack(exportDLPack(v));
  assert.equal(again.access, "readonly");
  assert.equal(again.get(0), 1024);
  again.dispose();
  v.dispose();
}
// From the writable page into the read-only one: read-only; inside the writable page: as declared.
const across = importDLPack(make({ shape: [4], data: r.readOnly - 8 }).source);
assert.equal(across.access, "readonly");
assert.deepEqual([...across.toArray()], [1022, 1023, 1024, 1025]);
across.dispose();
const writable = importDLPack(make({ shape: [4], data: r.writable }).source);
assert.equal(writable.access, "readwrite");
assert.equal(writable.flags.readOnly, false);
writable.set(7, 0);
assert.equal(writable.get(0), 7);
writable.set(0, 0);
writable.dispose();
const legacy = importDLPack(make({ versioned: false, shape: [4], data: r.writable }).source);
assert.equal(legacy.access, "unknown");
legacy.dispose();
// The array interface's data[1] = false cannot make read-only memory writable either.
const iface = fromArrayInterface({ data: [r.readOnly, false], shape: [2], typestr: "<f4" });
assert.equal(iface.access, "readonly");
assert.deepEqual([...iface.toArray()], [1024, 1025]);
iface.dispose();
assert.equal(deleted(), deletedBefore + 5);
`);
}, { skip: linuxOnly });

test("a foreign versioned struct passed as { legacy } and the reverse: refused, nothing called", () => {
  isolated(`
const v = make({ versioned: true, shape: [2, 3] });
refused(() => importDLPack({ legacy: v.address }), "null_data",
  /is not executable code \\(this looks like a DLManagedTensorVersioned passed as \\{ legacy \\}/);
const l = make({ versioned: false, shape: [2, 3] });
refused(() => importDLPack({ versioned: l.address }), "null_data",
  /is not executable code \\(this looks like a legacy DLManagedTensor passed as \\{ versioned \\}/);
assert.equal(deleted(), deletedBefore, "no deleter called");
// Both are intact: imported as what they are, they work and release once.
importDLPack(v.source).dispose();
importDLPack(l.source).dispose();
assert.equal(deleted(), deletedBefore + 2);
`);
});

test("this library's own exports passed as the other generation: refused, released once through the real deleter", () => {
  isolated(`
const x = new Float64Array([1, 2, 3, 4]);
const a = exportDLPack(x).take();
refused(() => importDLPack({ legacy: a }), "version",
  /own DLManagedTensorVersioned exports, passed as \\{ legacy \\}; it was released through its real deleter.*\\{ versioned \\} next time/);
assert.equal(stats().exports, before.exports, "the export was released");
const b = exportDLPackLegacy(x).take();
refused(() => importDLPack({ versioned: b }), "version",
  /own DLManagedTensor \\(legacy\\) exports, passed as \\{ versioned \\}; it was released/);
assert.equal(stats().exports, before.exports, "the export was released");
// Released means gone: the same addresses again are refused, not freed twice.
refused(() => importDLPack({ legacy: a }), "consumed", /released already/);
refused(() => importDLPack({ versioned: b }), "consumed", /released already/);
refused(() => importDLPack({ versioned: a }), "consumed", /released already/);
`);
});

test("the same own export imported twice: while the first import lives, after it is disposed, and much later", () => {
  isolated(`
const x = new Float32Array([1, 2, 3]);
const a = exportDLPack(x).take();
const view = importDLPack({ versioned: a });
refused(() => importDLPack({ versioned: a }), "consumed", /an import already took it.*nothing was released/);
refused(() => importDLPack({ legacy: a }), "consumed", /an import already took it/);
assert.equal(view.array()[2], 3, "the first import is untouched");
view.dispose();
refused(() => importDLPack({ versioned: a }), "consumed", /has been released already/);
// Hundreds of exports later the record has left quarantine and may be reused: still no crash,
// no double free.
for (let i = 0; i < 600; i++) exportDLPack(x).dispose();
try {
  importDLPack({ versioned: a }).dispose();
} catch (e) {
  assert.ok(e instanceof DLPackError, String(e));
}
const b = exportDLPackLegacy(x).take();
importDLPack({ legacy: b }).dispose();
refused(() => importDLPack({ legacy: b }), "consumed", /released already/);
`);
});

test("a capsule whose address was imported raw: disposing the capsule leaves the import alone", () => {
  isolated(`
const x = new Float64Array([5, 6]);
const capsule = exportDLPack(x);
const view = importDLPack({ versioned: capsule.address });
capsule.dispose();
assert.equal(view.array()[1], 6);
view.dispose();
`);
});

test("every native status has its own message, and abi.zig and description.ts agree on the numbers", () => {
  const zig = readFileSync(`${repoRoot}/zig/src/abi.zig`, "utf8");
  const body = zig.slice(zig.indexOf("pub const Status = enum(i32) {"));
  const native: Record<string, number> = {};
  for (const m of body.slice(0, body.indexOf("_,")).matchAll(/^\s+([a-z_]+) = (\d+),/gm)) {
    native[m[1]!.replace(/_([a-z])/g, (_, c: string) => c.toUpperCase())] = Number(m[2]);
  }
  assert.deepEqual(native, { ...Status });
  const s = new Scratch();
  for (const [name, status] of Object.entries(Status)) {
    // invalidArgument only answers a bad scratch pointer, which the library never passes.
    if (status === Status.ok || status === Status.invalidArgument) continue;
    s.i64[8] = 0x1000n;
    s.i64[9] = 0n;
    const error = refusalError(status, s, true);
    assert.doesNotMatch(error.message, /native call failed/, name);
  }
});
