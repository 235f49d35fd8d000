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
import type { Python } from "../../python.ts";

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

/** Python that defines `arrays`: one numpy array of each numpy dtype the library has (edge values, several ranks). */
export const NUMPY_ARRAYS = `
import numpy as np
arrays = {
  "bool": np.array([[True, False], [False, True]]),
  "int8": np.array([-128, 0, 127], dtype=np.int8),
  "uint8": np.arange(250, 256, dtype=np.uint8),
  "int16": np.array([-32768, 12], dtype=np.int16),
  "uint16": np.array([65535], dtype=np.uint16),
  "int32": np.arange(-6, 6, dtype=np.int32).reshape(3, 4),
  "uint32": np.array([4294967295, 1], dtype=np.uint32),
  "int64": np.array([-(2**63), 2**63 - 1], dtype=np.int64),
  "uint64": np.array([2**64 - 1], dtype=np.uint64),
  "float16": np.array([0.5, -65504], dtype=np.float16),
  "float32": np.linspace(0, 1, 6, dtype=np.float32).reshape(2, 3),
  "float64": np.array(np.pi),
  "complex64": np.array([1 + 1j, 2 - 3j], dtype=np.complex64),
  "complex128": np.array([[1e300 + 1j]], dtype=np.complex128),
}
`;

/** The JS value of a Python expression. */
export function pyValue<T>(py: Python, expression: string): T {
  using o = py.eval(expression);
  return o.toJS() as T;
}
