// A Deno user's project with every strict option of the type checker on type-checks a program that
// imports all four entries by path: the user's options apply to the library's files too, so this
// fails on any library source that only passes under looser settings. A second program, with a
// mistake only those options catch, shows they are in force.
import assert from "node:assert/strict";
import { mkdtempSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { repoRoot, spawn, type Spawned, test, tool } from "../support/harness.ts";

const STRICT = {
  strict: true,
  noUncheckedIndexedAccess: true,
  exactOptionalPropertyTypes: true,
  noImplicitOverride: true,
  noImplicitReturns: true,
  noFallthroughCasesInSwitch: true,
  verbatimModuleSyntax: true,
};

const imports = (root: string) =>
  `import * as dlpack from ${JSON.stringify(`${root}/mod.ts`)};
import * as python from ${JSON.stringify(`${root}/python.ts`)};
import * as cuda from ${JSON.stringify(`${root}/cuda.ts`)};
import * as io from ${JSON.stringify(`${root}/io.ts`)};
import type { AddressLike, BufferView, PointerObject } from ${JSON.stringify(`${root}/mod.ts`)};
`;

/** Uses a few public types the way strict code does: an option that may be undefined, an address
 * that may be a pointer object, an element that may be a bigint. */
const clean = (root: string) =>
  `${imports(root)}
export const entries: readonly object[] = [dlpack, python, cuda, io];

export function firstElement(data: Float32Array, shape: readonly number[] | undefined): number {
  using view: BufferView = dlpack.importDLPack(dlpack.exportDLPack(data, { shape }));
  const first = view.get(0);
  return typeof first === "number" ? first : 0;
}

export function asAddress(pointer: PointerObject | null): AddressLike {
  return pointer ?? 0n;
}

export const devices = (): number => cuda.devices().length;
export const opened = (py: python.Python): python.PyObject => py.eval("1");
`;

/** An extent read without a check: an error only with noUncheckedIndexedAccess. */
const unchecked = (root: string) =>
  `${imports(root)}
export function rows(view: BufferView): number {
  const n: number = view.shape[0];
  return n;
}
export const all: readonly object[] = [dlpack, python, cuda];
export type Address = AddressLike | PointerObject;
`;

const show = (out: Spawned) => `exit ${out.code}\n--- stdout\n${out.stdout}\n--- stderr\n${out.stderr}`;

test("a Deno project with every strict type-check option checks a program importing all entries cleanly", async () => {
  const root = mkdtempSync(`${tmpdir()}/dlpack-strict-`);
  try {
    writeFileSync(`${root}/deno.json`, JSON.stringify({ compilerOptions: STRICT }, null, 2));
    writeFileSync(`${root}/main.ts`, clean(repoRoot));
    writeFileSync(`${root}/mistake.ts`, unchecked(repoRoot));
    const env = { DENO_DIR: `${root}/deno-dir`, HOME: root, DENO_NO_UPDATE_CHECK: "1" };
    const deno = tool("deno");
    const ok = await spawn(deno, ["check", "main.ts"], { cwd: root, env, timeoutMs: 180_000 });
    assert.equal(ok.code, 0, show(ok));
    assert.doesNotMatch(ok.stdout + ok.stderr, /error/i, show(ok));

    const mistake = await spawn(deno, ["check", "mistake.ts"], { cwd: root, env, timeoutMs: 180_000 });
    assert.notEqual(mistake.code, 0, show(mistake));
    const errors = mistake.stderr; // spawn() sets NO_COLOR
    assert.match(
      errors,
      /TS2322 \[ERROR\]: Type 'number \| undefined' is not assignable to type 'number'/,
      show(mistake),
    );
    assert.equal(errors.match(/\[ERROR\]/g)?.length, 1, `the only error is the program's own: ${show(mistake)}`);
  } finally {
    rmSync(root, { recursive: true, force: true });
  }
}, { timeout: 300_000 });
