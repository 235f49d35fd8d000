// The layering of the TypeScript tree, read from the import lines of the shipped sources: no import cycle, no value
// import from a lower layer up into a higher one (a type-only import is erased at runtime, so it may point anywhere
// except out of ffi/), and ffi/ imports nothing of src/ but src/facts/.
import assert from "node:assert/strict";
import { readdirSync, readFileSync, statSync } from "node:fs";
import { fakeDriverPath } from "../support/fakecuda.ts";
import { repoRoot, runIsolated, test } from "../support/harness.ts";

/** Layers bottom-up; a file's layer is the first whose prefix its repository path starts with. */
const LAYERS: readonly (readonly [string, string])[] = [
  ["facts", "src/facts/"],
  ["ffi", "ffi/"],
  ["native", "src/native/"],
  ["view", "src/view/"],
  ["ops", "src/ops/"],
  ["cuda", "src/cuda/"],
  ["python", "src/python/"],
  ["entries", "mod.ts"],
  ["entries", "python.ts"],
  ["entries", "cuda.ts"],
];

interface Edge {
  from: string;
  to: string;
  typeOnly: boolean;
}

function sources(dir: string): string[] {
  const out: string[] = [];
  for (const name of readdirSync(`${repoRoot}/${dir}`)) {
    const path = `${dir}/${name}`;
    if (statSync(`${repoRoot}/${path}`).isDirectory()) out.push(...sources(path));
    else if (name.endsWith(".ts")) out.push(path);
  }
  return out;
}

function resolve(from: string, spec: string): string {
  const parts = from.split("/").slice(0, -1);
  for (const part of spec.split("/")) {
    if (part === "..") parts.pop();
    else if (part !== ".") parts.push(part);
  }
  return parts.join("/");
}

// `import ... from "./x"`, `export ... from "./x"` (possibly over several lines) and `import "./x"`.
const FROM = /^[ \t]*(import|export)\s+(type\s+)?(?:[^;"']*?\s+from\s+)?["'](\.{1,2}\/[^"']+)["']/gm;

function edgesOf(file: string): Edge[] {
  const text = readFileSync(`${repoRoot}/${file}`, "utf8");
  const edges: Edge[] = [];
  for (const m of text.matchAll(FROM)) {
    edges.push({ from: file, to: resolve(file, m[3]!), typeOnly: m[2] !== undefined });
  }
  return edges;
}

function layerOf(file: string): number {
  const i = LAYERS.findIndex(([, prefix]) => file === prefix || (prefix.endsWith("/") && file.startsWith(prefix)));
  return i < 0 ? -1 : LAYERS.findIndex(([name]) => name === LAYERS[i]![0]);
}

const files = [...sources("src"), ...sources("ffi"), "mod.ts", "python.ts", "cuda.ts"];
const edges = files.flatMap(edgesOf);
const key = (e: Edge) => `${e.from} -> ${e.to}`;

test("architecture: every shipped source file belongs to a layer and every import resolves", () => {
  assert.ok(edges.length > 50, `only ${edges.length} imports were found: the import pattern is broken`);
  assert.deepEqual(files.filter((f) => layerOf(f) < 0), []);
  const present = new Set(files);
  assert.deepEqual(edges.filter((e) => !present.has(e.to)).map(key), []);
});

test("architecture: ffi/ imports only ffi/ and src/facts/", () => {
  const out = edges.filter((e) => e.from.startsWith("ffi/") && !/^(ffi|src\/facts)\//.test(e.to));
  assert.deepEqual(out.map(key), []);
});

test("architecture: no value import goes up a layer", () => {
  const up = edges.filter((e) => !e.typeOnly && layerOf(e.to) > layerOf(e.from)).map(key);
  assert.deepEqual(up, []);
});

test("architecture: no import cycle among value imports", () => {
  const graph = new Map<string, string[]>();
  for (const e of edges) {
    if (e.typeOnly) continue;
    graph.set(e.from, [...(graph.get(e.from) ?? []), e.to]);
  }
  const state = new Map<string, "open" | "done">();
  const cycles: string[] = [];
  const visit = (node: string, path: string[]): void => {
    const seen = state.get(node);
    if (seen === "done") return;
    if (seen === "open") {
      cycles.push([...path.slice(path.indexOf(node)), node].join(" -> "));
      return;
    }
    state.set(node, "open");
    for (const next of graph.get(node) ?? []) visit(next, [...path, node]);
    state.set(node, "done");
  };
  for (const f of files) visit(f, []);
  assert.deepEqual(cycles, []);
});

test("architecture: only src/view/view.ts constructs views", () => {
  const constructing = files.filter((f) => /new\s+BufferView\s*\(/.test(readFileSync(`${repoRoot}/${f}`, "utf8")));
  assert.deepEqual(constructing, ["src/view/view.ts"]);
});

test('architecture: a view method whose operation was never registered throws DLPackError("library")', () => {
  // alloc.ts loads the view but none of the modules that register copy, export and requirement checks.
  const run = runIsolated(`
import { empty } from "${repoRoot}/src/ops/alloc.ts";
import { DLPackError } from "${repoRoot}/src/facts/errors.ts";
const view = empty([2], "float32");
const codes = [];
for (const call of [() => view.copy(), () => view.__dlpack__(), () => view.refusals({ ndim: 1 }), () => view.copyFrom(view)]) {
  try {
    call();
    codes.push("returned");
  } catch (error) {
    codes.push(error instanceof DLPackError ? error.code : String(error));
  }
}
view.dispose();
console.log("RESULT " + JSON.stringify(codes));
`);
  const line = run.stdout.split("\n").find((l) => l.startsWith("RESULT "));
  assert.ok(run.code === 0 && line !== undefined, `exit ${run.code}: ${run.stderr.slice(-2000)}`);
  assert.deepEqual(JSON.parse(line.slice(7)), ["library", "library", "library", "library"]);
});

/** Device copies of fake CUDA memory in a fresh process that gets `zeros` from `imports`: each one's error code, or
 * "returned". */
function deviceCopies(imports: string): unknown {
  const run = runIsolated(
    `
${imports}
import { DLPackError } from "${repoRoot}/src/facts/errors.ts";
const device = zeros([2], "float32", { device: { type: "cuda", id: 0 } });
const host = zeros([2], "float32");
const codes = [];
for (const call of [() => device.copy(), () => device.toHost(), () => host.copyFrom(device), () => device.copyFrom(host)]) {
  try {
    const out = call();
    if (out !== host && out !== device) out.dispose();
    codes.push("returned");
  } catch (error) {
    codes.push(error instanceof DLPackError ? error.code : String(error));
  }
}
device.dispose();
host.dispose();
console.log("RESULT " + JSON.stringify(codes));
`,
    { env: { DLPACK_CUDA_LIB: fakeDriverPath(), FAKECUDA_DEVICES: "1" } },
  );
  const line = run.stdout.split("\n").find((l) => l.startsWith("RESULT "));
  assert.ok(run.code === 0 && line !== undefined, `exit ${run.code}: ${run.stderr.slice(-2000)}`);
  return JSON.parse(line.slice(7));
}

test("architecture: a device copy without the device paths of the CUDA layer throws DLPackError(library)", () => {
  // src/ops/mod.ts registers the view's operations but not the device paths src/cuda/copy.ts adds.
  const imports = `import "${repoRoot}/src/ops/mod.ts";\nimport { zeros } from "${repoRoot}/src/ops/alloc.ts";`;
  assert.deepEqual(deviceCopies(imports), ["library", "library", "library", "library"]);
});

test("architecture: through the entry the same device copies work (fake driver)", () => {
  assert.deepEqual(deviceCopies(`import { zeros } from "${repoRoot}/mod.ts";`), [
    "returned",
    "returned",
    "returned",
    "returned",
  ]);
});

test("architecture: the entries register every view operation", async () => {
  const { zeros } = await import("../../mod.ts");
  const view = zeros([2], "float32");
  try {
    assert.deepEqual(view.refusals({ ndim: 1 }), []);
    const copy = view.copy();
    copy.copyFrom(view);
    copy.dispose();
    view.__dlpack__().dispose();
  } finally {
    view.dispose();
  }
});
