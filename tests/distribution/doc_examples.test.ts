// The examples users copy run as written: every ```ts block of the entries' module docs (mod.ts,
// python.ts, cuda.ts, io.ts: what JSR and editors show), of README.md and of the guides
// (docs/api.md, docs/numpy.md, docs/workers.md) is run in a fresh process of the runtime under
// test, its package specifiers ("dlpack-ts", "@dlpack-ts/dlpack" and their subpaths) pointed at this
// checkout's entries. A block that is not a whole program says so with ```ts ignore. And
// docs/api.md names every public name of the four entries.
import assert from "node:assert/strict";
import { existsSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { repoRoot, runScript, test } from "../support/harness.ts";
import { noPython } from "../support/python.ts";

const ENTRIES = ["mod.ts", "python.ts", "cuda.ts", "io.ts"] as const;
/** The pages of docs/ whose ```ts blocks run as well. */
const GUIDES = ["docs/api.md", "docs/numpy.md", "docs/workers.md"] as const;

/** The ```ts blocks of a Markdown text (or of a module doc, its ` * ` prefixes removed). */
function blocks(text: string): { code: string; ignored: boolean }[] {
  const found: { code: string; ignored: boolean }[] = [];
  for (const match of text.matchAll(/^```ts( ignore)?\n([^]*?)^```$/gm)) {
    found.push({ code: match[2] ?? "", ignored: match[1] !== undefined });
  }
  return found;
}

const moduleDoc = (file: string) =>
  (readFileSync(`${repoRoot}/${file}`, "utf8").match(/^\/\*\*\n([^]*?)\n \*\//)?.[1] ?? "").split("\n").map((l) =>
    l.replace(/^ \* ?/, "")
  ).join("\n");

/** The block with its package specifiers pointed at the checkout's entries. */
function local(code: string): string {
  return code.replace(
    /(["'])(?:dlpack-ts|@dlpack-ts\/dlpack)(\/python|\/cuda|\/io)?\1/g,
    (_, q: string, sub?: string) => {
      const entry = sub === "/python" ? "python.ts" : sub === "/cuda" ? "cuda.ts" : sub === "/io" ? "io.ts" : "mod.ts";
      return `${q}${repoRoot}/${entry}${q}`;
    },
  );
}

const examples = [
  ...ENTRIES.flatMap((file) =>
    blocks(moduleDoc(file)).map((b, i) => ({ where: `${file} module doc #${i + 1}`, ...b }))
  ),
  ...blocks(readFileSync(`${repoRoot}/README.md`, "utf8")).map((b, i) => ({ where: `README.md #${i + 1}`, ...b })),
  // The guides' examples too: what a newcomer copies from the API reference and the topic pages.
  ...GUIDES.filter((file) => existsSync(`${repoRoot}/${file}`)).flatMap((file) =>
    blocks(readFileSync(`${repoRoot}/${file}`, "utf8")).map((b, i) => ({ where: `${file} #${i + 1}`, ...b }))
  ),
];

test("the examples: every entry's module doc and README.md have runnable ones", () => {
  for (const file of ENTRIES) assert.ok(blocks(moduleDoc(file)).length > 0, `${file} shows no example`);
  assert.ok(examples.filter((e) => e.where.startsWith("README")).length >= 3);
  for (const file of GUIDES) assert.ok(examples.some((e) => e.where.startsWith(file)), `${file} shows no example`);
});

for (const example of examples) {
  const python = example.code.includes("openPython");
  test(`${example.where} runs as written`, () => {
    const dir = mkdtempSync(`${tmpdir()}/dlpack-example-`);
    try {
      writeFileSync(`${dir}/example.ts`, local(example.code));
      const out = runScript(`${dir}/example.ts`, {}, { allowAll: true });
      assert.equal(out.code, 0, `${example.code}\n--- stdout\n${out.stdout}\n--- stderr\n${out.stderr}`);
    } finally {
      rmSync(dir, { recursive: true, force: true });
    }
  }, {
    skip: example.ignored ? "marked ```ts ignore: a fragment, not a program" : python ? noPython : false,
    timeout: 60_000,
  });
}

test("docs/api.md names every public name of mod.ts, python.ts, cuda.ts and io.ts", () => {
  const api = readFileSync(`${repoRoot}/docs/api.md`, "utf8");
  const unnamed: string[] = [];
  for (const file of ENTRIES) {
    for (const [, list = ""] of readFileSync(`${repoRoot}/${file}`, "utf8").matchAll(/export\s*\{([^}]*)\}/g)) {
      for (const item of list.split(",").map((n) => n.trim().replace(/^type\s+/, "")).filter((n) => n !== "")) {
        const name = item.split(/\s+as\s+/).at(-1)!;
        if (!new RegExp(`\`[^\`\\n]*\\b${name}\\b[^\`\\n]*\``).test(api)) unnamed.push(`${file}: ${name}`);
      }
    }
  }
  assert.deepEqual(unnamed, []);
});
