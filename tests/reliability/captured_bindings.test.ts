// The runtime bindings and the address filter read nothing a caller can replace after the library
// loaded: Deno's pointer functions, bun:ffi's exports, the `Number` global and its static methods.
// Each case runs in a child process (a replaced pointer function used to crash it).
import assert from "node:assert/strict";
import { repoRoot, runIsolated, runtimeName, test } from "../support/harness.ts";

function child(body: string): Record<string, unknown> {
  const source = `
import * as dl from "${repoRoot}/mod.ts";
await dl.ready();
const out = {};
const stringify = JSON.stringify;
const attempt = (f) => {
  try {
    return f();
  } catch (error) {
    return error instanceof dl.DLPackError ? "DLPackError " + error.code + ": " + error.message : "other: " + error;
  }
};
void attempt;
${body}
console.log("RESULT " + stringify(out));
`;
  const run = runIsolated(source);
  const line = run.stdout.split("\n").find((l) => l.startsWith("RESULT "));
  assert.ok(
    run.code === 0 && line !== undefined,
    `the child exited with ${run.code}\nstdout: ${run.stdout.slice(-2000)}\nstderr: ${run.stderr.slice(-3000)}`,
  );
  return JSON.parse(line.slice("RESULT ".length));
}

test("pointer functions of the runtime and the Number global replaced after load change nothing", () => {
  const out = child(`
const ta = new Float64Array([1, 2, 3, 4]);
const held = dl.exportDLPack(new Float64Array([5, 6, 7, 8]));
const address = held.address;
const replaced = [];
const replace = (target, key, value, name) => {
  try {
    target[key] = value;
    if (target[key] === value) replaced.push(name);
  } catch {
    // Not writable in this runtime: nothing to defend against.
  }
};
const NumberOrig = Number;
if (typeof Deno !== "undefined") {
  const create = Deno.UnsafePointer.create;
  const getArrayBuffer = Deno.UnsafePointerView.getArrayBuffer;
  replace(Deno.UnsafePointerView, "getArrayBuffer", (p, n, o) => getArrayBuffer(p, n * 512, o), "getArrayBuffer");
  replace(Deno.UnsafePointerView, "getCString", () => "lied", "getCString");
  replace(Deno.UnsafePointer, "create", () => create(8n), "create");
  replace(Deno.UnsafePointer, "of", () => create(8n), "of");
  replace(Deno.UnsafePointer, "value", () => 8n, "value");
} else {
  const ffi = import.meta.require("bun:ffi");
  const toArrayBuffer = ffi.toArrayBuffer;
  replace(ffi, "toArrayBuffer", (a, o, n) => toArrayBuffer(a, o, n * 512), "toArrayBuffer");
  replace(ffi, "ptr", () => 8, "ptr");
}
replace(globalThis, "Number", () => 0, "Number");
replace(NumberOrig, "isSafeInteger", () => true, "Number.isSafeInteger");
out.replaced = replaced;
const zeros = attempt(() => {
  const v = dl.zeros([4], "float64");
  const a = v.array();
  a[3] = 9;
  const r = [a.length, v.get(3)];
  v.dispose();
  return r;
});
const exported = attempt(() => {
  const v = dl.importDLPack(dl.exportDLPack(ta));
  const r = [v.array().length, v.get(2)];
  v.dispose();
  return r;
});
const raw = attempt(() => {
  const v = dl.importDLPack({ versioned: address });
  const r = [v.array().length, v.get(1)];
  v.dispose();
  return r;
});
const notSafe = attempt(() => dl.importDLPack({ versioned: 2 ** 60 }));
const fraction = attempt(() => dl.importDLPack({ legacy: 4096.5 }));
globalThis.Number = NumberOrig;
out.results = { zeros, exported, raw, notSafe, fraction };
out.stats = [dl.stats().imports, dl.stats().exports];
`);
  const replaced = out.replaced as string[];
  assert.ok(replaced.includes("Number") && replaced.includes("Number.isSafeInteger"), String(replaced));
  if (runtimeName === "deno") assert.ok(replaced.includes("getArrayBuffer") && replaced.includes("create"));
  const results = out.results as Record<string, unknown>;
  assert.deepEqual(results.zeros, [4, 9]);
  assert.deepEqual(results.exported, [4, 3]);
  assert.deepEqual(results.raw, [4, 6]);
  for (const key of ["notSafe", "fraction"]) {
    assert.match(
      String(results[key]),
      /^DLPackError null_data: versioned|legacy must be a non-negative integer address/,
      `${key}: ${results[key]}`,
    );
  }
  assert.deepEqual(out.stats, [0, 0]);
});
