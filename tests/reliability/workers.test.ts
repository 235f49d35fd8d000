// Concurrent use from Workers (each its own JS realm over the same native library): a
// SharedArrayBuffer exported and consumed from several realms at once, structs handed from one
// realm to another, and the pin queues kept apart (a realm must never unpin another's buffer).
import assert from "node:assert/strict";
import { exportDLPack, share, stats } from "../../mod.ts";
import { pinnedCount, realmAddress } from "../../src/native/pins.ts";
import { core } from "../../ffi/mod.ts";
import { consumerValues, tp } from "../support/producer.ts";
import { collectGarbage, repoRoot, runIsolated, test } from "../support/harness.ts";
import { live, noneLeft, settledLive } from "../support/assertions.ts";

const WORKER_URL = new URL("../support/worker.ts", import.meta.url).href;

/** Polls `condition` every 20 ms for up to `ms`; returns whether it became true. */
async function eventually(condition: () => boolean, ms = 5_000): Promise<boolean> {
  for (const end = Date.now() + ms; Date.now() < end;) {
    if (condition()) return true;
    await new Promise((resolve) => setTimeout(resolve, 20));
  }
  return condition();
}

/** A worker with a request/answer helper that surfaces the worker's errors. */
class Realm {
  /** Live native realms before this Worker made its own (this realm's own made first). */
  readonly #realmsBefore = realmAddress() && core().dlpk_realms_live();
  readonly #worker = new Worker(WORKER_URL, { type: "module" });
  #pending: ((value: Record<string, unknown>) => void)[] = [];
  #failed: unknown;

  constructor() {
    this.#worker.onmessage = (e: MessageEvent<Record<string, unknown>>) => this.#pending.shift()?.(e.data);
    this.#worker.onerror = (e: Event) => {
      this.#failed = (e as ErrorEvent).message ?? e;
      (e as Event).preventDefault?.();
      for (const resolve of this.#pending.splice(0)) resolve({ error: String(this.#failed) });
    };
  }

  ask(message: Record<string, unknown>): Promise<Record<string, unknown>> {
    if (this.#failed !== undefined) return Promise.resolve({ error: String(this.#failed) });
    return new Promise((resolve) => {
      this.#pending.push(resolve);
      this.#worker.postMessage(message);
    });
  }

  async expect(message: Record<string, unknown>): Promise<Record<string, unknown>> {
    const answer = await this.ask(message);
    assert.equal(answer.error, undefined, `worker failed on ${message.op}: ${answer.error}`);
    return answer;
  }

  /** Ends the Worker and waits until its thread is gone and its native realm ended (which frees
   * the pins left in its queue), so later counts do not move under the next test. */
  async terminate(): Promise<void> {
    this.#worker.terminate();
    const ended = await eventually(() => core().dlpk_realms_live() <= this.#realmsBefore);
    assert.ok(ended, "the Worker's realm did not end with its thread");
  }
}

test("three Workers and the main thread export one SharedArrayBuffer concurrently", async () => {
  // Settled first: pins an earlier file left to the sweep timer must not move under this count.
  const before = await settledLive();
  const sab = new SharedArrayBuffer(64);
  const all = new Float32Array(sab);
  const realms = [new Realm(), new Realm(), new Realm()];
  try {
    const rounds = 600;
    const answers = realms.map((realm, i) => realm.expect({ op: "hammer", sab, slot: i, rounds }));
    // The main thread works on the same buffer meanwhile, yielding so the workers' answers land.
    for (let r = 0; r < rounds; r++) {
      const address = share(all).take();
      if (r % 2 === 0) tp.tp_consume(address, 1);
      else tp.tp_consume_on_thread(address, 1);
      if (r % 50 === 0) await new Promise((resolve) => setTimeout(resolve, 0));
    }
    for (const [i, answer] of (await Promise.all(answers)).entries()) {
      assert.equal(answer.pinned, 0, `worker ${i} still pins something`);
      // One in three rounds wrote slot i + 1 through an imported view of the shared buffer.
      assert.equal(answer.value, rounds / 3, `worker ${i}'s writes`);
      assert.equal(all[i], rounds / 3, `worker ${i}'s writes, seen from the main thread`);
    }
    // Pins released on other threads are queued for this thread's sweep: they drain within its period.
    assert.ok(await eventually(() => pinnedCount() === 0), `pins left: ${pinnedCount()}`);
  } finally {
    await Promise.all(realms.map((realm) => realm.terminate()));
  }
  await noneLeft(before);
}, { timeout: 120_000 });

test("a struct exported on the main thread and released on a Worker unpins on the main thread", async () => {
  const before = await settledLive();
  const realm = new Realm();
  try {
    const data = new Float32Array([1, 2, 3, 4]);
    const address = exportDLPack(data).take();
    assert.equal(pinnedCount(), 1);
    const answer = await realm.expect({ op: "import", address, slot: 2 });
    assert.equal(answer.before, 3);
    assert.equal(data[2], 42, "the worker wrote into the main thread's array");
    stats();
    assert.equal(pinnedCount(), 0, "the release on the worker's thread reached this realm's queue");
  } finally {
    await realm.terminate();
  }
  await noneLeft(before);
}, { timeout: 60_000 });

test("a Worker's released pin is never drained by the main thread (ids collide across realms)", async () => {
  const before = await settledLive();
  const realm = new Realm();
  try {
    // The main thread holds a pinned export whose memory a consumer still reads...
    const held = exportDLPack(new Float32Array([4, 5, 6, 7])).take();
    const pinnedHere = pinnedCount();
    // ...while the worker releases one of its own pins (numbered from 1 like ours) and does
    // not sweep, so its id waits in the native queue.
    await realm.expect({ op: "release-without-sweep" });
    stats(); // with one process-wide queue this drained the worker's id and unpinned ours
    assert.equal(pinnedCount(), pinnedHere, "the main thread's pin survives the worker's release");
    await collectGarbage();
    assert.deepEqual(consumerValues(held, true), [4, 5, 6, 7]);
    const swept = await realm.expect({ op: "sweep" });
    assert.equal(swept.pinned, 0, "the worker drained its own id");
    tp.tp_consume(held, 1);
    stats();
    assert.equal(pinnedCount(), 0);
  } finally {
    await realm.terminate();
  }
  await noneLeft(before);
}, { timeout: 60_000 });

test("a Worker's export of its own SharedArrayBuffer stays readable after the Worker is terminated", async () => {
  const before = await settledLive();
  const realm = new Realm();
  let address: bigint | undefined;
  try {
    address = (await realm.expect({ op: "export-own", shared: true })).address as bigint;
    // The Worker's pin, and the main thread's keeper pin of the same backing store.
    assert.ok(await eventually(() => live().pinned === before.pinned + 2), `pins: ${live().pinned}`);
  } finally {
    await realm.terminate();
  }
  // The Worker's heap is gone; the memory is not: the main thread still holds the buffer.
  await collectGarbage();
  assert.deepEqual(consumerValues(address!, true), [1, 2, 3, 4]);
  tp.tp_consume(address!, 1);
  assert.ok(await eventually(() => live().pinned <= before.pinned), "the keeper pin went with the export");
  await noneLeft(before);
}, { timeout: 60_000 });

test("a terminated Worker's pins stop counting once their consumers release them", async () => {
  const before = await settledLive();
  const realm = new Realm();
  let address: bigint | undefined;
  try {
    address = (await realm.expect({ op: "export-own", shared: false })).address as bigint;
    assert.equal(live().pinned, before.pinned + 1);
  } finally {
    await realm.terminate();
  }
  // A plain ArrayBuffer died with the Worker (docs/architecture.md: the caller must not end a Worker whose
  // non-shared exports are still in use), so the consumer only releases it, without reading.
  tp.tp_consume(address!, 1);
  // Nothing will ever drain the ended realm's queue: its thread's exit freed the record.
  assert.ok(await eventually(() => live().pinned <= before.pinned), `pins: ${live().pinned}`);
  await noneLeft(before);
}, { timeout: 60_000 });

test("a Worker offers its exports by what their buffers are, not what their prototypes say", async () => {
  const before = await settledLive();
  // Shared memory given ArrayBuffer's prototype is still shared: offered, so it outlives the Worker.
  const realm = new Realm();
  let shared: bigint | undefined;
  try {
    const answer = await realm.expect({ op: "export-posing", kind: "shared-as-plain" });
    assert.equal(answer.proxy, "argument", "a Proxy of a TypedArray is refused");
    shared = (answer.addresses as bigint[])[0]!;
    assert.ok(await eventually(() => live().pinned === before.pinned + 2), `pins: ${live().pinned}`);
  } finally {
    await realm.terminate();
  }
  await collectGarbage();
  assert.deepEqual(consumerValues(shared!, true), [1, 2, 3, 4]);
  tp.tp_consume(shared!, 1);
  assert.ok(await eventually(() => live().pinned <= before.pinned), "the keeper pin went with the export");
  // Memory that is not shared is never offered, whatever it claims: one pin per export.
  for (const kind of ["plain-as-shared", "own-buffer", "plain-twice"]) {
    const other = new Realm();
    try {
      const answer = await other.expect({ op: "export-posing", kind });
      const addresses = answer.addresses as bigint[];
      assert.equal(answer.proxy, "argument");
      // Give an offer time to arrive: none may.
      await new Promise((resolve) => setTimeout(resolve, 100));
      assert.equal(live().pinned, before.pinned + addresses.length, `${kind}: pins`);
      for (const address of addresses) {
        assert.deepEqual(consumerValues(address, true), [1, 2, 3, 4], kind);
        tp.tp_consume(address, 1);
      }
      const swept = await other.expect({ op: "sweep" });
      assert.equal(swept.pinned, 0, `${kind}: the Worker released its pins`);
    } finally {
      await other.terminate();
    }
  }
  await noneLeft(before);
}, { timeout: 60_000 });

/** Runs, in a child process (reading freed memory may crash it), Workers that each export a
 * SharedArrayBuffer of their own of 65,536 floats (1, 2, 3, ...) and are terminated as soon as the
 * address arrives; then reads every export and releases it. `loadFirst`: the main thread uses the
 * library before starting them. Returns the child's report. */
function exportsOfEndedWorkers(loadFirst: boolean): Record<string, unknown> {
  const source = `
import { stats } from "${repoRoot}/mod.ts";
import { loadedCore } from "${repoRoot}/ffi/mod.ts";
import { tp } from "${repoRoot}/tests/support/producer.ts";
if (${loadFirst}) stats();
const loadedBefore = loadedCore() !== undefined;
const N = 65536;
const addresses = [];
for (let k = 0; k < 4; k++) {
  const worker = new Worker("file://${repoRoot}/tests/support/worker.ts", { type: "module" });
  const answer = await new Promise((resolve) => {
    worker.onmessage = (e) => { worker.terminate(); resolve(e.data); };
    worker.postMessage({ op: "export-own", shared: true, length: N });
  });
  if (answer.error !== undefined) throw new Error(answer.error);
  addresses.push(answer.address);
}
await new Promise((resolve) => setTimeout(resolve, 300));
for (let i = 0; i < 4; i++) {
  globalThis.gc?.();
  globalThis.Bun?.gc(true);
  await new Promise((resolve) => setTimeout(resolve, 20));
}
const out = new Float64Array(N);
const read = [];
for (const address of addresses) {
  const n = tp.tp_read_values(address, 1, out, N);
  let wrong = 0;
  for (let i = 0; i < N; i++) if (out[i] !== i + 1) wrong++;
  read.push({ n, wrong });
  tp.tp_consume(address, 1);
}
let pinned = -1;
for (let i = 0; i < 100 && pinned !== 0; i++) {
  await new Promise((resolve) => setTimeout(resolve, 20));
  pinned = stats().pinned;
}
console.log("RESULT " + JSON.stringify({ loadedBefore, read, pinned }));
`;
  const run = runIsolated(source, { gc: true });
  const line = run.stdout.split("\n").find((l) => l.startsWith("RESULT "));
  assert.ok(
    run.code === 0 && line !== undefined,
    `child exited with ${run.code}\nstdout: ${run.stdout.slice(-2000)}\nstderr: ${run.stderr.slice(-3000)}`,
  );
  return JSON.parse(line.slice(7));
}

const EVERY_VALUE_READ = Array.from({ length: 4 }, () => ({ n: 65536, wrong: 0 }));

test("a Worker's SharedArrayBuffer export outlives it when the main thread never used the library first", () => {
  const out = exportsOfEndedWorkers(false);
  assert.equal(out.loadedBefore, false, "the main thread had not loaded the library");
  assert.deepEqual(out.read, EVERY_VALUE_READ, "the exports read the Workers' values after they ended");
  assert.equal(out.pinned, 0, "the keeper pins went with the exports");
}, { timeout: 60_000 });

test("a Worker terminated right after its first SharedArrayBuffer export leaves the export readable", () => {
  const out = exportsOfEndedWorkers(true);
  assert.equal(out.loadedBefore, true);
  assert.deepEqual(out.read, EVERY_VALUE_READ, "the exports read the Workers' values after they ended");
  assert.equal(out.pinned, 0, "the keeper pins went with the exports");
}, { timeout: 60_000 });
