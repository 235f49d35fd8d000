// Deleters called from many native threads at once, while the JS thread keeps working: imports
// whose last owner share is an export a foreign consumer releases on its own threads, one import
// shared by many exports, and exports of JS memory whose pins the JS side sweeps concurrently.
// Every producer deleter runs exactly once, nothing stays pinned, and stats() returns to zero.
// tests/native/threads.zig does the same through the C ABI with 1,000,000 releases per scenario.
import assert from "node:assert/strict";
import { exportDLPack, exportDLPackLegacy, importDLPack, stats } from "../../mod.ts";
import { runtime } from "../../ffi/mod.ts";
import { deleted, make, makeMany, releaseDone, releaseOnThreads, releaseWait } from "../support/producer.ts";
import { test } from "../support/harness.ts";
import { live } from "../support/assertions.ts";

const THREADS = 8;
// DLPACK_THREAD_RELEASES raises the count for a longer run (docs/reliability.md).
const RELEASES = Number(runtime().env("DLPACK_THREAD_RELEASES") ?? 1_000_000);
const BATCH = 50_000;

/** Releases `tagged` on THREADS native threads; the JS thread sweeps and reads stats meanwhile. */
function releaseWhileSweeping(tagged: Float64Array): number {
  const handle = releaseOnThreads(tagged, THREADS);
  let sweeps = 0;
  while (!releaseDone(handle)) {
    stats(); // drains this realm's released pins while native threads are still pushing them
    sweeps++;
  }
  releaseWait(handle);
  return sweeps;
}

test(`imports: ${RELEASES.toLocaleString("en")} owners released from ${THREADS} native threads`, () => {
  const baseline = live();
  const before = deleted();
  for (let done = 0; done < RELEASES; done += BATCH) {
    const count = Math.min(BATCH, RELEASES - done);
    const versioned = (done / BATCH) % 2 === 0;
    const addresses = makeMany({ versioned, shape: [2, 2], dtype: "float32" }, count);
    const tagged = new Float64Array(count);
    for (let i = 0; i < count; i++) {
      const address = addresses[i]!;
      const view = importDLPack(versioned ? { versioned: address } : { legacy: address });
      const capsule = i % 3 === 0 ? exportDLPackLegacy(view) : exportDLPack(view);
      tagged[i] = Number(capsule.take()) * 2 + (capsule.versioned ? 1 : 0);
      view.dispose(); // the export, held by the consumer, is now the last share
    }
    assert.equal(deleted() - before, done, "no producer released while its exports are held");
    releaseWhileSweeping(tagged);
    assert.equal(deleted() - before, done + count, "each producer released exactly once");
  }
  assert.deepEqual(live(), baseline);
}, { timeout: 300_000 });

test(`one import shared by ${RELEASES.toLocaleString("en")} exports released from ${THREADS} threads`, () => {
  const baseline = live();
  const before = deleted();
  const view = importDLPack(make({ shape: [8], dtype: "int32" }).source);
  const tagged = new Float64Array(RELEASES);
  for (let i = 0; i < RELEASES; i++) {
    const capsule = i % 2 === 0 ? exportDLPack(view) : exportDLPackLegacy(view);
    tagged[i] = Number(capsule.take()) * 2 + (capsule.versioned ? 1 : 0);
  }
  view.dispose();
  assert.equal(deleted(), before);
  releaseWhileSweeping(tagged);
  assert.equal(deleted() - before, 1, "the shared producer released once, after the last export");
  assert.deepEqual(live(), baseline);
}, { timeout: 300_000 });

test(
  `JS memory: ${RELEASES.toLocaleString("en")} pinned exports released from ${THREADS} threads while JS sweeps`,
  () => {
    const baseline = live();
    const arrays = Array.from({ length: 64 }, (_, k) => new Float64Array([k, k + 1, k + 2]));
    let sweeps = 0;
    for (let done = 0; done < RELEASES; done += BATCH) {
      const count = Math.min(BATCH, RELEASES - done);
      const tagged = new Float64Array(count);
      for (let i = 0; i < count; i++) {
        const capsule = i % 2 === 0 ? exportDLPack(arrays[i % arrays.length]!) : exportDLPackLegacy(arrays[i % 64]!);
        tagged[i] = Number(capsule.take()) * 2 + (capsule.versioned ? 1 : 0);
      }
      assert.ok(stats().pinned >= baseline.pinned + count, "every export pins its array");
      sweeps += releaseWhileSweeping(tagged);
    }
    assert.deepEqual(live(), baseline, "every pin swept exactly once");
    assert.ok(sweeps >= 0);
  },
  { timeout: 300_000 },
);
