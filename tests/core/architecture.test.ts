// The layering of the TypeScript tree, read from the import lines of the shipped sources: no import cycle and no
// import from a lower layer up into a higher one, type-only imports counted as any other (the import graph is the
// call graph); ffi/ imports nothing of src/ but src/facts/; the entries only re-export; the journal is written by hand
// in three files; no TypeScript file passes 900 lines, the class file included, and no Zig file 1,100.
import assert from "node:assert/strict";
import { existsSync, readdirSync, readFileSync, statSync } from "node:fs";
import { repoRoot, test } from "../support/harness.ts";

/** Layers bottom-up; a file's layer is the first whose prefix its repository path starts with. */
const LAYERS: readonly (readonly [string, string])[] = [
  ["facts", "src/facts/"],
  ["ffi", "ffi/"],
  ["native", "src/native/"],
  ["engines", "src/engines/"],
  ["view", "src/view/"],
  ["api", "src/api/"],
  ["cuda", "src/cuda/"],
  ["python", "src/python/"],
  ["io", "src/io/"],
  ["entries", "mod.ts"],
  ["entries", "python.ts"],
  ["entries", "cuda.ts"],
  ["entries", "io.ts"],
];

interface Edge {
  from: string;
  to: string;
  typeOnly: boolean;
}

function sources(dir: string): string[] {
  const out: string[] = [];
  if (!existsSync(`${repoRoot}/${dir}`)) return out;
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

const ENTRIES = ["mod.ts", "python.ts", "cuda.ts", "io.ts"].filter((f) => existsSync(`${repoRoot}/${f}`));
const files = [...sources("src"), ...sources("ffi"), ...ENTRIES];
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

test("architecture: no import goes up a layer, type-only imports included", () => {
  const up = edges.filter((e) => layerOf(e.to) > layerOf(e.from)).map((e) => `${key(e)}${e.typeOnly ? " (type)" : ""}`);
  assert.deepEqual(up, []);
});

test("architecture: no import cycle, type-only imports included", () => {
  const graph = new Map<string, string[]>();
  for (const e of edges) graph.set(e.from, [...(graph.get(e.from) ?? []), e.to]);
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

test("architecture: the entries only re-export (no side-effect imports, no code of their own)", () => {
  const bare = /^[ \t]*import\s+["'][^"']+["']/m;
  const problems: string[] = [];
  for (const entry of ENTRIES) {
    const text = readFileSync(`${repoRoot}/${entry}`, "utf8");
    if (bare.test(text)) problems.push(`${entry}: a side-effect import`);
    // Outside comments, every statement is an `export ... from` re-export.
    const code = text.replace(/\/\*[\s\S]*?\*\//g, "").replace(/^\s*\/\/.*$/gm, "");
    const statements = code.split(/;\s*/).map((t) => t.trim()).filter((t) => t !== "");
    for (const statement of statements) {
      if (!/^export\s+(type\s+)?(\{[^}]*\}|\*(\s+as\s+\w+)?)\s+from\s+["'][^"']+["']$/.test(statement)) {
        problems.push(`${entry}: ${statement.slice(0, 80)}`);
      }
    }
  }
  assert.deepEqual(problems, []);
});

test("architecture: only src/view/view.ts constructs views", () => {
  const constructing = files.filter((f) => /new\s+BufferView\s*\(/.test(readFileSync(`${repoRoot}/${f}`, "utf8")));
  assert.deepEqual(constructing, ["src/view/view.ts"]);
});

test("architecture: at most 3 files write the journal by hand, and none spells its entry encoding", () => {
  // The native calls journal what they hand JS; JS writes the journal only where a view, a capsule
  // or the journal module itself ends or makes an entry (their hot paths), and a struct's entry
  // comes from the generated `structEntry`.
  const writers = files.filter((f) => /\bjournal(Count|Entries)\b/.test(readFileSync(`${repoRoot}/${f}`, "utf8")));
  assert.deepEqual(writers.sort(), ["src/native/capsule.ts", "src/native/journal.ts", "src/view/view.ts"]);
  const encodings = files.filter((f) => /\* 2 \+ \(?versioned/.test(readFileSync(`${repoRoot}/${f}`, "utf8")));
  assert.deepEqual(encodings, ["src/facts/abi.ts"]);
});

test("architecture: no TypeScript file of the library over 900 lines, no Zig file over 1,100", () => {
  const lines = (path: string) => readFileSync(`${repoRoot}/${path}`, "utf8").split("\n").length - 1;
  const long = files.filter((f) => lines(f) > 900).map((f) => `${f}: ${lines(f)} lines`);
  const zig = readdirSync(`${repoRoot}/zig/src`).filter((n) => n.endsWith(".zig")).map((n) => `zig/src/${n}`);
  long.push(...zig.filter((f) => lines(f) > 1100).map((f) => `${f}: ${lines(f)} lines`));
  assert.ok(zig.length > 20, `only ${zig.length} Zig files were found`);
  assert.deepEqual(long, []);
});
