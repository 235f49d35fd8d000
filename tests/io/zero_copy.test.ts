// Zero-copy, shown: loading a 256 MiB safetensors file and reading its last element grows the
// process's RSS by less than 32 MiB (a fresh child process, so nothing else moves its RSS); the
// views point into the file's own mapping (/proc/self/maps names the file at their address); numpy
// and torch.from_dlpack of a loaded view read that very memory.
import assert from "node:assert/strict";
import { closeSync, ftruncateSync, openSync, writeSync } from "node:fs";
import { loadNpy, loadSafetensors } from "../../io.ts";
import { type Python, toPython } from "../../python.ts";
import { python } from "../support/python.ts";
import { repoRoot, runIsolated, test } from "../support/harness.ts";
import { noSafetensors, nothingLeft, noTorch, scratchFolder } from "../support/io_files.ts";
import { runtime } from "../../ffi/mod.ts";

const folder = scratchFolder("zero-copy");
const MiB = 1 << 20;
const linux = runtime().os === "linux" ? false : "reads /proc/self/maps (Linux)";
const torchSkip = noTorch();

/** A safetensors file of one float32 tensor "w" of `bytes` bytes, sparse (zeros) but for its last
 * element, 42.5. */
function sparseFile(path: string, bytes: number): void {
  const json = JSON.stringify({ w: { dtype: "F32", shape: [bytes / 4], data_offsets: [0, bytes] } });
  const header = new TextEncoder().encode(json.padEnd(Math.ceil(json.length / 8) * 8, " "));
  const prefix = new Uint8Array(8 + header.length);
  new DataView(prefix.buffer).setBigUint64(0, BigInt(header.length), true);
  prefix.set(header, 8);
  const fd = openSync(path, "w");
  try {
    writeSync(fd, prefix, 0, prefix.length, 0);
    ftruncateSync(fd, prefix.length + bytes);
    const last = new Uint8Array(new Float32Array([42.5]).buffer);
    writeSync(fd, last, 0, 4, prefix.length + bytes - 4);
  } finally {
    closeSync(fd);
  }
}

/** The line of /proc/self/maps (read by the embedded Python: Deno asks for --allow-all to read it)
 * that maps `path` over `address`, or undefined. */
function mappingOf(py: Python, path: string, address: bigint): string | undefined {
  using found = py.eval(`next((l for l in open("/proc/self/maps").read().splitlines()
    if l.endswith(" " + ${JSON.stringify(path)}) and int(l.split("-")[0], 16) <= ${address}
    < int(l.split(" ")[0].split("-")[1], 16)), None)`);
  const line = found.toJS();
  return typeof line === "string" ? line : undefined;
}

test("a 256 MiB file loads and its last element is read with RSS growing by less than 32 MiB", () => {
  const path = folder.path("big.safetensors");
  sparseFile(path, 256 * MiB);
  const small = folder.path("small.safetensors");
  sparseFile(small, 64);
  const run = runIsolated(`
import { loadSafetensors } from "${repoRoot}/io.ts";
import { stats } from "${repoRoot}/mod.ts";
import { memoryBytes } from "${repoRoot}/tests/support/harness.ts";
const rss = () => memoryBytes().rss;
// Everything loaded and run once first: only the big file's cost is measured.
loadSafetensors(${JSON.stringify(small)}).dispose();
const before = rss();
const file = loadSafetensors(${JSON.stringify(path)});
const w = file.tensors.w;
const last = w.get(w.size - 1);
const after = rss();
const held = stats();
file.dispose();
console.log("RESULT " + JSON.stringify({ last, growth: after - before, size: w.size, mapped: held.mappedBytes, left: stats().mappings }));
`);
  const line = run.stdout.split("\n").find((l) => l.startsWith("RESULT "));
  assert.ok(run.code === 0 && line !== undefined, `exit ${run.code}: ${run.stderr.slice(-2000)}`);
  const result = JSON.parse(line.slice(7));
  assert.equal(result.last, 42.5);
  assert.equal(result.size, (256 * MiB) / 4);
  assert.ok(result.mapped > 256 * MiB, "the whole file is mapped");
  assert.ok(result.growth < 32 * MiB, `RSS grew by ${(result.growth / MiB).toFixed(1)} MiB`);
  assert.equal(result.left, 0);
}, { skip: linux });

test("loaded views point into the file's mapping, and numpy reads them there", () => {
  const py = python();
  const path = folder.path("numpy.safetensors");
  py.exec(`import numpy as np
from safetensors.numpy import save_file
save_file({"a": np.arange(4096, dtype=np.float32), "b": np.ones((3, 5), dtype=np.int16)}, ${JSON.stringify(path)})
np.save(${JSON.stringify(folder.path("a.npy"))}, np.arange(10, dtype=np.uint8))`);
  {
    using file = loadSafetensors(path);
    for (const name of ["a", "b"]) {
      const view = file.tensors[name]!;
      assert.ok(mappingOf(py, path, view.address) !== undefined, `${name} lies in the mapping of ${path}`);
      using handed = toPython(view, py);
      py.set("handed", handed);
      using address = py.eval("np.from_dlpack(handed).ctypes.data");
      assert.equal(BigInt(address.toJS() as number), view.address, `numpy's ${name} has the mapping's address`);
      py.exec("del handed");
    }
  }
  {
    const npyPath = folder.path("a.npy");
    using view = loadNpy(npyPath);
    assert.ok(mappingOf(py, npyPath, view.address) !== undefined);
  }
  nothingLeft();
}, { skip: noSafetensors || linux });

test("torch.from_dlpack of a loaded tensor is zero-copy (the same data pointer, in the mapping)", () => {
  const py = python();
  const path = folder.path("torch.safetensors");
  py.exec(`import torch
from safetensors.torch import save_file as torch_save
torch_save({"w": torch.randn(64, 64), "h": torch.ones(8, dtype=torch.bfloat16)}, ${JSON.stringify(path)})`);
  using file = loadSafetensors(path);
  for (const name of ["w", "h"]) {
    const view = file.tensors[name]!;
    using handed = toPython(view, py);
    py.set("handed", handed);
    py.exec("shared = torch.from_dlpack(handed)");
    using pointer = py.eval("shared.data_ptr()");
    assert.equal(BigInt(pointer.toJS() as number), view.address, `${name}: torch reads the mapping`);
    assert.ok(mappingOf(py, path, view.address) !== undefined);
    py.exec("del shared, handed");
  }
}, { skip: torchSkip || linux });

test("nothing is left behind: no mapping", () => {
  nothingLeft(folder.dir);
  folder.cleanup();
});
