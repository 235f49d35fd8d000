/**
 * What the tensors-on-disk tests share: a fresh folder per test file, the mapping counters, and
 * the Python side that writes and reads the reference files (safetensors, numpy, torch).
 * @module
 */
import assert from "node:assert/strict";
import { mkdtempSync, readdirSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { stats } from "../../mod.ts";
import { missing, noPython } from "./python.ts";

/** A fresh folder for one test file's files (removed by `cleanup`). */
export function scratchFolder(name: string): { dir: string; path(file: string): string; cleanup(): void } {
  const dir = mkdtempSync(`${tmpdir()}/dlpack-io-${name}-`);
  return {
    dir,
    path: (file) => `${dir}/${file}`,
    cleanup: () => rmSync(dir, { recursive: true, force: true }),
  };
}

/** Live mappings and their bytes. */
export function mapped(): { mappings: number; mappedBytes: number } {
  const s = stats();
  return { mappings: s.mappings, mappedBytes: s.mappedBytes };
}

/** Asserts no mapping is left, and no temporary file of an atomic write in `dir`. */
export function nothingLeft(dir?: string): void {
  assert.deepEqual(mapped(), { mappings: 0, mappedBytes: 0 }, "every mapping released");
  if (dir !== undefined) {
    const temporary = readdirSync(dir).filter((f) => f.endsWith(".tmp"));
    assert.deepEqual(temporary, [], "no temporary file left behind");
  }
}

/** Why tests needing the safetensors peer skip, or false. */
export const noSafetensors: string | false = noPython || missing("safetensors");
let torchChecked: string | false | undefined;
/** Why tests needing torch (and safetensors) skip, or false (imports torch the first time). */
export function noTorch(): string | false {
  return torchChecked ??= noSafetensors || missing("torch");
}
