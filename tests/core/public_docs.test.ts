// `deno doc` of the four entries shows only the public API: nothing tagged @internal, no private
// constructor, parameters with defaults shown as optional, MAX_RANK documented for users.
import assert from "node:assert/strict";
import { repoRoot, spawn, test, tool } from "../support/harness.ts";

type JsDoc = { doc?: string; tags?: { kind: string }[] } | undefined;
interface Param {
  kind: string;
  name?: string;
  optional?: boolean;
}
interface Member {
  name: string;
  jsDoc?: JsDoc;
  accessibility?: string;
  params?: Param[];
  functionDef?: { params: Param[] };
}
interface Declaration {
  kind: string;
  jsDoc?: JsDoc;
  def: { params?: Param[]; constructors?: Member[]; methods?: Member[]; properties?: Member[] };
}

/** Every public declaration of the entries, as `deno doc --json` (format 2) lists them. */
async function declarations(): Promise<{ name: string; decl: Declaration }[]> {
  const out = await spawn(tool("deno"), ["doc", "--json", "mod.ts", "python.ts", "cuda.ts", "io.ts"], {
    cwd: repoRoot,
    env: { NO_COLOR: "1" },
  });
  assert.equal(out.code, 0, out.stderr);
  const doc = JSON.parse(out.stdout) as {
    nodes: Record<string, { symbols: { name: string; declarations: Declaration[] }[] }>;
  };
  return Object.values(doc.nodes).flatMap((file) =>
    file.symbols.flatMap((s) => s.declarations.map((decl) => ({ name: s.name, decl })))
  );
}

test("deno doc of mod.ts, python.ts, cuda.ts and io.ts shows only the public API", async () => {
  const all = await declarations();
  assert.ok(all.length > 50, `${all.length} public declarations`);
  const problems: string[] = [];
  const internal = (d: JsDoc) => d?.tags?.some((t) => t.kind === "internal") ?? false;
  const defaulted = (params: Param[] | undefined) => (params ?? []).some((p) => p.kind === "assign");
  for (const { name, decl } of all) {
    if (internal(decl.jsDoc)) problems.push(`${name} is @internal`);
    if (defaulted(decl.def.params)) problems.push(`${name}(): a parameter with a default`);
    for (const k of decl.def.constructors ?? []) {
      if (k.accessibility === "private") problems.push(`${name}: private constructor`);
      if (internal(k.jsDoc)) problems.push(`${name}: @internal constructor`);
      if (defaulted(k.params)) problems.push(`${name}: constructor parameter with a default`);
    }
    for (const m of [...(decl.def.methods ?? []), ...(decl.def.properties ?? [])]) {
      if (internal(m.jsDoc)) problems.push(`${name}.${m.name} is @internal`);
      if (defaulted(m.functionDef?.params)) problems.push(`${name}.${m.name}(): a parameter with a default`);
    }
  }
  assert.deepEqual(problems, []);

  const find = (name: string, kind: string) => all.find((d) => d.name === name && d.decl.kind === kind)?.decl;
  assert.match(find("MAX_RANK", "variable")?.jsDoc?.doc ?? "", /refused with `DLPackError` code `"rank"`/);
  const view = find("BufferView", "class");
  assert.equal(view?.def.constructors, undefined, "BufferView shows no constructor (views come from functions)");
  const members = (view?.def.methods ?? []).map((m) => m.name);
  assert.ok(members.includes("toJSON") && members.includes("array"), "the public members are there");
  for (const hidden of ["nativeOwner", "addressNumber", "rawShape", "rawStrides", "flagBits", "toString"]) {
    assert.ok(!members.includes(hidden), `${hidden} is not shown`);
  }
  const refusals = find("DLPackError", "class")?.def.constructors?.[0]?.params?.[2];
  assert.deepEqual([refusals?.name, refusals?.optional], ["refusals", true]);
}, { timeout: 120_000 });
