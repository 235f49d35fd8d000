// Who owns a tensor after an import ran out of stack. The rule (docs/reliability.md): an import
// that throws anything but a DLPackError has not taken the tensor, which is still the caller's;
// once it has taken the tensor it returns the view or throws a DLPackError, the tensor then
// released by the library. Imports are driven at every stack depth near the limit, in a child
// process (a double free aborts it); the caller follows the rule, and in the end every deleter
// must have run exactly once and every count be back at zero.
import assert from "node:assert/strict";
import { repoRoot, runIsolated, runtimeName, test } from "../support/harness.ts";

/** The child: imports of every form at every depth near the stack limit. */
const CHILD = `
import * as dl from "${repoRoot}/mod.ts";
import { deleted, makeMany, tp } from "${repoRoot}/tests/support/producer.ts";
const isDeno = globalThis.Deno !== undefined;
dl.stats();
const PER_FORM = 6000;
const good = (versioned) => makeMany({ shape: [2, 3], versioned }, PER_FORM);
const refusedSpec = { shape: [4], dtype: { code: 2, bits: 24, lanes: 1 } };
// Each form: the tensors it imports (addresses), whether they are versioned, and the import.
const forms = [
  { name: "versioned number", addresses: good(true), versioned: true, run: (a) => dl.importDLPack({ versioned: a }) },
  { name: "legacy number", addresses: good(false), versioned: false, run: (a) => dl.importDLPack({ legacy: a }) },
  { name: "versioned bigint", addresses: good(true), versioned: true, run: (a) => dl.importDLPack({ versioned: BigInt(a) }) },
  { name: "refused (dtype)", addresses: makeMany(refusedSpec, PER_FORM), versioned: true, run: (a) => dl.importDLPack({ versioned: a }) },
  { name: "refused bigint", addresses: makeMany(refusedSpec, PER_FORM), versioned: true, run: (a) => dl.importDLPack({ versioned: BigInt(a) }) },
  { name: "fromDLPack", addresses: good(true), versioned: true, run: (a) => dl.fromDLPack({ versioned: a }).view },
  { name: "producer option", addresses: good(true), versioned: true, run: (a) => dl.importDLPack({ versioned: a }, { producer: "p" }) },
  { name: "requirements met", addresses: good(true), versioned: true, run: (a) => dl.importDLPack({ versioned: a }, { require: { dtype: "float32" } }) },
  { name: "requirements failed", addresses: good(true), versioned: true, run: (a) => dl.importDLPack({ versioned: a }, { require: { dtype: "float64" } }) },
];
// Capsules: one whose import threw anything but a DLPackError must still be the caller's (owned).
const capsules = [];
for (let i = 0; i < PER_FORM; i++) capsules[i] = dl.exportDLPack(new Float32Array(4));
forms.push({ name: "capsule", addresses: capsules, capsules: true, run: (c) => dl.importDLPack(c) });
if (isDeno) {
  forms.push({
    name: "versioned pointer", addresses: good(true), versioned: true,
    run: (a) => dl.importDLPack({ versioned: Deno.UnsafePointer.create(BigInt(a)) }),
  });
}
// Outcomes, stored without a call (the stack may be exhausted where they are stored): the view,
// or what was thrown; classified afterwards.
const results = forms.map(() => { const r = []; for (let i = 0; i < PER_FORM; i++) r[i] = null; return r; });
const threw = forms.map(() => new Uint8Array(PER_FORM));
const next = new Int32Array(forms.length);
let form = 0;
function attempt() {
  const f = form;
  const i = next[f];
  if (i >= PER_FORM) return;
  next[f] = i + 1;
  try {
    results[f][i] = forms[f].run(forms[f].addresses[i]);
  } catch (error) {
    threw[f][i] = 1;
    results[f][i] = error;
  }
}
// From each frame, attempts under 0..3 more frames; from the innermost, also with 0..23 extra call
// arguments (each one stack slot), so the stack left to the import steps by a word there and no
// window of depths is skipped however the runtime lays its frames out.
const ARGS = [];
for (let n = 0; n < 24; n++) ARGS[n] = new Array(n).fill(0);
function padded() {
  attempt();
}
function pad(k) {
  if (k > 0) return pad(k - 1);
  attempt();
}
let unwound = 0;
function deep(depth) {
  try {
    deep(depth + 1);
  } catch {
    // The stack ran out below: each frame on the way back imports with a little more stack.
  }
  const frame = unwound++;
  if (frame >= 1100) return;
  for (let k = 0; k < 4; k++) pad(k);
  if (frame < 60) for (let n = 0; n < ARGS.length; n++) padded.apply(null, ARGS[n]);
}
for (form = 0; form < forms.length; form++) {
  unwound = 0;
  deep(0);
}
// Shallow again: the caller follows the rule.
const report = {};
for (let f = 0; f < forms.length; f++) {
  const counts = { views: 0, dlpackErrors: 0, otherErrors: 0, codes: {}, misowned: 0 };
  const capsule = forms[f].capsules === true;
  for (let i = 0; i < next[f]; i++) {
    const r = results[f][i];
    if (threw[f][i] === 0) {
      counts.views++;
      r.dispose();
    } else if (r instanceof dl.DLPackError) {
      counts.dlpackErrors++;
      counts.codes[r.code] = (counts.codes[r.code] ?? 0) + 1;
      if (capsule && forms[f].addresses[i].owned) counts.misowned++;
    } else if (capsule) {
      counts.otherErrors++;
      if (!forms[f].addresses[i].owned) counts.misowned++;
      forms[f].addresses[i].dispose();
    } else {
      // Not taken: still the caller's, who releases it.
      counts.otherErrors++;
      tp.tp_consume(forms[f].addresses[i], forms[f].versioned ? 1 : 0);
    }
    results[f][i] = null;
  }
  // What no attempt reached is released by its producer too.
  for (let i = next[f]; i < PER_FORM; i++) {
    if (capsule) forms[f].addresses[i].dispose();
    else tp.tp_consume(forms[f].addresses[i], forms[f].versioned ? 1 : 0);
  }
  report[forms[f].name] = counts;
}
await new Promise((resolve) => setTimeout(resolve, 20));
const s = dl.stats();
console.log("RESULT " + JSON.stringify({
  report,
  made: tp.tp_made(),
  deleted: deleted(),
  live: [s.imports, s.exports, s.allocations, s.pinned],
}));
`;

test("imports at every depth near the stack limit: a non-DLPackError means not taken, nothing freed twice", () => {
  const run = runIsolated(CHILD, { gc: true });
  const line = run.stdout.split("\n").find((l) => l.startsWith("RESULT "));
  assert.ok(
    run.code === 0 && line !== undefined,
    `child (${runtimeName}) exited with ${run.code}\nstdout: ${run.stdout.slice(-2000)}\nstderr: ${
      run.stderr.slice(-3000)
    }`,
  );
  const out = JSON.parse(line.slice(7));
  type Counts = { views: number; dlpackErrors: number; otherErrors: number; misowned: number };
  const report = out.report as Record<string, Counts>;
  for (const [name, counts] of Object.entries(report)) {
    assert.equal(counts.misowned, 0, `${name}: a capsule's state after the import disagrees with what it threw`);
    assert.ok(counts.otherErrors > 0, `${name}: some imports ran out of stack before taking the tensor`);
    const refusals = name.startsWith("refused") || name === "requirements failed";
    if (refusals) assert.ok(counts.dlpackErrors > 0, `${name}: and some were refused further up`);
    else assert.ok(counts.views > 0, `${name}: and some succeeded further up`);
  }
  assert.equal(out.deleted, out.made, "every producer deleter ran exactly once");
  assert.deepEqual(out.live, [0, 0, 0, 0], "nothing is left behind");
}, { timeout: 120_000 });
