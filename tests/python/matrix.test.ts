// The interop certification matrix: every peer of tests/support/peers.ts (numpy, JAX, pyarrow,
// PyTorch, TensorFlow, PaddlePaddle, TVM FFI, array-api-strict in the embedded CPython) in both
// directions, every dtype each side supports, both DLPack generations where the peer offers them,
// and the layouts users hit; the protocol's arguments (stream, max_version, dl_device, copy) and
// the tensor states no struct carries (conjugate and negative bits, gradients); plus JS itself. Each case checks the address (zero-copy), dtype,
// shape and every value, and is recorded in .scratch/matrix/<runtime>.json; tools/matrix.ts turns
// the latest run into docs/python.md's tables (a cell says supported only if a case exercised it).
import assert from "node:assert/strict";
import { mkdirSync, writeFileSync } from "node:fs";
import { DTYPES, exportDLPack, exportDLPackLegacy, importDLPack } from "../../mod.ts";
import { runtime } from "../../ffi/mod.ts";
import { missing, noPython, py } from "../support/python.ts";
import { runScript, runtimeName, test } from "../support/harness.ts";
import {
  type Case,
  caseKey,
  childEnv,
  type Generation,
  IMPORT_LAYOUTS,
  jsSource,
  jsValues,
  layoutFits,
  notInstalled,
  type Peer,
  peerCases,
  PEERS,
  type Result,
  sameValues,
} from "../support/peers.ts";

const results: Result[] = [];

function python() {
  if (py === undefined) throw new Error("no python");
  return py;
}

/** Why a peer's cases skip, or false. Peers that run in a child process are only looked up here
 * (importing them into this process is what the child avoids). */
function peerSkip(peer: Peer): string | false {
  if (noPython) return noPython;
  if (peer.isolate === undefined) return missing(peer.module) && notInstalled(peer);
  using found = python().eval(`__import__('importlib.util').util.find_spec('${peer.module}') is not None`);
  return found.toJS() === true ? false : notInstalled(peer);
}

const child = new URL("../support/peer_child.ts", import.meta.url).pathname;
const childRuns = new Map<string, { code: number; stderr: string; results: Map<string, Result> }>();

/** The results of a peer's child process (run once, on its first case). */
function childResults(peer: Peer) {
  let run = childRuns.get(peer.name);
  if (run === undefined) {
    const out = runScript(child, { ...childEnv(peer), DLPACK_PEER: peer.name }, { allowAll: true });
    const found = new Map<string, Result>();
    for (const line of out.stdout.split("\n")) {
      if (!line.startsWith("PEER-CASE ")) continue;
      const { key, ...result } = JSON.parse(line.slice("PEER-CASE ".length)) as Result & { key: string };
      found.set(key, result);
    }
    run = { code: out.code, stderr: out.stderr, results: found };
    childRuns.set(peer.name, run);
  }
  return run;
}

function runCase(peer: Peer, c: Case): Result {
  const cell = {
    pair: c.pair,
    dtype: c.dtype,
    generation: c.generation,
    layout: c.layout,
    ...(c.protocol ? { protocol: true } : {}),
  };
  if (peer.isolate !== undefined) {
    const run = childResults(peer);
    const found = run.results.get(caseKey(c));
    if (found !== undefined) return found;
    const detail = `the ${peer.name} child process did not report this case (exit code ${run.code}):\n${
      run.stderr.slice(-3000)
    }`;
    return { ...cell, outcome: "failed", detail };
  }
  try {
    return { ...cell, ...c.run(python()) };
  } catch (error) {
    return { ...cell, outcome: "failed", detail: String((error as Error)?.stack ?? error).slice(0, 2000) };
  }
}

for (const peer of PEERS) {
  const skip = peerSkip(peer);
  for (const c of peerCases(peer)) {
    test(`matrix ${caseKey(c)}`, () => {
      const result = runCase(peer, c);
      results.push({ ...result, detail: result.detail.slice(0, 300) });
      if (result.outcome === "failed") assert.fail(result.detail);
    }, { skip, timeout: peer.isolate !== undefined ? 900_000 : undefined });
  }
}

// ---------------------------------------------------------------------------------------------
// JS -> JS: every dtype of the table, both generations, every TypedArray layout.

for (const dtype of DTYPES) {
  for (const generation of ["versioned", "legacy"] as Generation[]) {
    for (const [layout, spec] of Object.entries(IMPORT_LAYOUTS)) {
      if (spec.memory !== undefined || !layoutFits(dtype, spec)) continue;
      const cell = { pair: "JS → JS", dtype, generation, layout };
      test(`matrix ${caseKey(cell)}`, () => {
        const source = jsSource(dtype);
        const opts = { ...spec.opts, ...(source.dtype ? { dtype: source.dtype } : {}) };
        if (generation === "legacy" && spec.opts.readonly === true) {
          assert.throws(
            () => exportDLPackLegacy(source.array, opts),
            /legacy DLManagedTensor cannot mark data read-only/,
          );
          results.push({
            ...cell,
            outcome: "refused",
            detail: "legacy export of read-only data is refused (the struct cannot say so)",
          });
          return;
        }
        const capsule = generation === "versioned"
          ? exportDLPack(source.array, opts)
          : exportDLPackLegacy(source.array, opts);
        using view = importDLPack(capsule);
        using reference = importDLPack(exportDLPack(source.array, { ...opts, readonly: false }));
        if (view.size > 0) {
          assert.equal(
            Number(view.address),
            runtime().addressOf(source.array) + spec.offset * (view.dl.bits / 8),
            "zero-copy",
          );
        }
        assert.equal(view.version === null, generation === "legacy");
        sameValues(jsValues(view), jsValues(reference), `${dtype} ${layout}`);
        results.push({ ...cell, outcome: "zero-copy", detail: "" });
      });
    }
  }
}

test("matrix CuPy exchanges", () => {}, {
  skip: "CuPy needs a CUDA device; the GPU suite (tests/gpu/) exercises it on the device machine",
});

test("matrix results are written for tools/matrix.ts", () => {
  const dir = new URL("../../.scratch/matrix/", import.meta.url).pathname;
  mkdirSync(dir, { recursive: true });
  const failed = results.filter((r) => r.outcome === "failed");
  const skipped = PEERS.map((peer) => ({ peer: peer.name, reason: peerSkip(peer) })).filter((s) => s.reason);
  writeFileSync(
    `${dir}${runtimeName}.json`,
    JSON.stringify({ runtime: runtimeName, date: new Date().toISOString(), skipped, results }, null, 1),
  );
  assert.equal(failed.length, 0, `failed cells: ${failed.map((r) => caseKey(r)).join("; ")}`);
  assert.ok(results.length > 0);
});
