// `deno task check:exports`: every export of src/ and ffi/ is imported by some other file of the
// repository (the library, its tests, benches, tools and examples) or re-exported by an entry. An
// export nothing imports is dead code, or a name that should not be exported; both fail the check.
// Reads the import and export lines as tests/core/architecture.test.ts does (no type checker).
// src/facts/abi.ts is left out: `zig build abi` writes every ABI fact into it, used or not.
const root = new URL("../", import.meta.url).pathname;

function sources(dir: string): string[] {
  const out: string[] = [];
  let entries: Deno.DirEntry[];
  try {
    entries = [...Deno.readDirSync(`${root}${dir}`)];
  } catch {
    return out;
  }
  for (const e of entries) {
    const path = `${dir}/${e.name}`;
    if (e.isDirectory && e.name !== "node_modules" && !e.name.startsWith(".")) out.push(...sources(path));
    else if (e.isFile && e.name.endsWith(".ts")) out.push(path);
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

const ENTRIES = ["mod.ts", "python.ts", "cuda.ts", "io.ts"].filter((f) => {
  try {
    return Deno.statSync(`${root}${f}`).isFile;
  } catch {
    return false;
  }
});
const GENERATED = new Set(["src/facts/abi.ts"]);
const checked = [...sources("src"), ...sources("ffi")].filter((f) => !GENERATED.has(f));
const readers = [
  ...checked,
  ...GENERATED,
  ...ENTRIES,
  ...["tests", "bench", "tools", "examples"].flatMap((d) => sources(d)),
];

/** The names a file exports itself (declarations and local `export { a, b as c }`). */
function exportedNames(text: string): string[] {
  const names: string[] = [];
  const declaration =
    /^[ \t]*export\s+(?:declare\s+)?(?:default\s+)?(?:async\s+)?(?:function\*?|const|let|var|class|interface|type|enum|abstract\s+class)\s+([A-Za-z_$][\w$]*)/gm;
  for (const m of text.matchAll(declaration)) names.push(m[1]!);
  const local = /^[ \t]*export\s+(?:type\s+)?\{([^}]*)\}\s*(?!\s*from)[;\n]/gm;
  for (const m of text.matchAll(local)) {
    if (/^\s*from\b/.test(text.slice(m.index! + m[0].length))) continue;
    for (const item of m[1]!.split(",")) {
      const name = item.trim().replace(/^type\s+/, "").split(/\s+as\s+/).pop()!.trim();
      if (name !== "") names.push(name);
    }
  }
  return names;
}

/** file -> names imported from it by other files ("*": every name). */
const used = new Map<string, Set<string>>();
const use = (file: string, name: string) => {
  const set = used.get(file) ?? new Set<string>();
  set.add(name);
  used.set(file, set);
};
const clause = /^[ \t]*(import|export)\s+(type\s+)?([^;"']*?)\s+from\s+["'](\.{1,2}\/[^"']+)["']/gm;
for (const reader of readers) {
  const text = Deno.readTextFileSync(`${root}${reader}`);
  for (const m of text.matchAll(clause)) {
    const target = resolve(reader, m[4]!);
    const what = m[3]!.trim();
    if (/^\*/.test(what)) {
      use(target, "*");
      continue;
    }
    const braces = what.match(/\{([^}]*)\}/);
    if (braces !== null) {
      for (const item of braces[1]!.split(",")) {
        const name = item.trim().replace(/^type\s+/, "").split(/\s+as\s+/)[0]!.trim();
        if (name !== "") use(target, name);
      }
    }
    // A default import (`import x from`) uses the default export.
    const plain = what.replace(/\{[^}]*\}/, "").replace(/,/g, "").trim();
    if (plain !== "" && m[1] === "import") use(target, "default");
  }
}

const dead: string[] = [];
for (const file of checked) {
  const set = used.get(file) ?? new Set<string>();
  if (set.has("*")) continue;
  for (const name of exportedNames(Deno.readTextFileSync(`${root}${file}`))) {
    if (!set.has(name)) dead.push(`${file}: ${name}`);
  }
}
if (dead.length > 0) {
  console.error(`exports nothing imports (${dead.length}); remove them, or the export keyword:`);
  for (const d of dead) console.error(`  ${d}`);
  Deno.exit(1);
}
console.log(`check:exports: every export of ${checked.length} files is imported`);
