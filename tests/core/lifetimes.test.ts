// The lifetime invariants: every deleter exactly once, JS memory pinned until the consumer's
// deleter ran (on any thread), chains keeping the first producer alive, GC as a backstop only.
import assert from "node:assert/strict";
import {
  type BufferView,
  exportDLPack,
  exportDLPackLegacy,
  fromArrayInterface,
  importDLPack,
  stats,
  zeros,
} from "../../mod.ts";
import { consumerValues, deleted, make, tp } from "../support/producer.ts";
import { collectGarbage, gcUnavailable, test } from "../support/harness.ts";
import { live, settledLive } from "../support/assertions.ts";

test("an export nobody took is released by dispose()", () => {
  const before = live();
  const c = exportDLPack(new Float32Array(8));
  assert.equal(stats().pinned, before.pinned + 1);
  assert.equal(stats().exports, before.exports + 1);
  c.dispose();
  c.dispose();
  assert.deepEqual(live(), before);
});

test("an export taken by a foreign consumer is released when it calls the deleter, on any thread", () => {
  const before = live();
  for (const versioned of [true, false]) {
    for (const onThread of [false, true]) {
      const data = new Float64Array([1, 2, 3]);
      const c = versioned ? exportDLPack(data) : exportDLPackLegacy(data);
      const address = c.take();
      assert.equal(stats().pinned, before.pinned + 1, "pinned while the consumer holds it");
      assert.deepEqual(consumerValues(address, versioned), [1, 2, 3]);
      if (onThread) assert.equal(tp.tp_consume_on_thread(address, versioned ? 1 : 0), 0);
      else tp.tp_consume(address, versioned ? 1 : 0);
      assert.deepEqual(live(), before, `released (versioned ${versioned}, thread ${onThread})`);
    }
  }
});

test("a chain of length 3 frees the first producer only when the last view anywhere is gone", () => {
  const before = deleted();
  const alive = live();
  const first = importDLPack(make({ shape: [4] }).source); // producer 1 -> view 1
  const second = importDLPack(exportDLPack(first)); // -> export -> view 2
  const third = exportDLPack(second).take(); // -> export taken by a foreign consumer
  first.dispose();
  second.dispose();
  assert.equal(deleted(), before, "the foreign consumer still holds the chain");
  assert.equal(consumerValues(third, true).length, 4);
  tp.tp_consume_on_thread(third, 1);
  assert.equal(deleted() - before, 1, "released exactly once, at the end");
  assert.deepEqual(live(), alive);
});

test("a chain through our own capsules keeps a library allocation alive", () => {
  const before = live();
  const m = zeros([8], "int32");
  m.set(5, 7);
  const a = importDLPack(exportDLPack(m));
  const b = importDLPack(exportDLPackLegacy(a));
  m.dispose();
  a.dispose();
  assert.equal(b.get(7), 5, "memory still valid");
  assert.equal(stats().allocations, before.allocations + 1);
  b.dispose();
  assert.deepEqual(live(), before);
});

test("GC does not free JS memory a foreign consumer still holds", async () => {
  // Settled first: bun test runs every file in one process, and earlier files' collected exports unpin meanwhile.
  const before = await settledLive();
  // The TypedArray and the capsule are unreachable from JS after this scope.
  const address = (() => exportDLPack(new Float32Array([4, 5, 6, 7])).take())();
  for (let i = 0; i < 5; i++) {
    await collectGarbage();
    new Float32Array(1 << 16).fill(1); // churn the heap so freed memory would be reused
  }
  assert.deepEqual(consumerValues(address, true), [4, 5, 6, 7], "still the same values");
  assert.equal(stats().pinned, before.pinned + 1);
  tp.tp_consume(address, 1);
  assert.deepEqual(live(), before);
}, { skip: gcUnavailable() });

test("a capsule nobody took or disposed is released by the GC backstop", async () => {
  const before = live();
  (() => void exportDLPack(new Float32Array(16)))();
  for (let i = 0; i < 20 && stats().exports !== before.exports; i++) await collectGarbage();
  assert.deepEqual(live(), before);
}, { skip: gcUnavailable() });

test(
  "views of one tick, beyond a batch: the disposed released once, the dropped by the GC",
  async () => {
    const before = live();
    const producerBefore = deleted();
    const kept: BufferView[] = [];
    (() => {
      // 100 views wait before any microtask, disposed in mixed orders: some the last one added,
      // some waiting deeper in the backstop's list.
      const views: BufferView[] = [];
      for (let i = 0; i < 100; i++) {
        views.push(importDLPack(make({ shape: [4] }).source));
        if (i % 3 === 0) views.pop()!.dispose();
      }
      for (let i = 0; i < views.length; i++) {
        const view = views[i]!;
        if (i % 2 === 0) view.dispose();
        else if (i % 5 === 0) kept.push(view);
      }
    })();
    const disposed = 34 + 33;
    assert.equal(deleted() - producerBefore, disposed, "each disposed view released at once, exactly once");
    const dropped = 100 - disposed - kept.length;
    for (let i = 0; i < 30 && deleted() - producerBefore < disposed + dropped; i++) await collectGarbage();
    assert.equal(deleted() - producerBefore, disposed + dropped, "every dropped view released by the backstop");
    for (const view of kept) assert.equal(view.array().length, 4, "a kept view was not released");
    for (const view of kept) view.dispose();
    for (let i = 0; i < 3; i++) await collectGarbage();
    assert.equal(deleted() - producerBefore, 100, "nothing released twice");
    assert.deepEqual(live(), before);
  },
  { skip: gcUnavailable() },
);

test(
  "views waiting while the backstop renews its young list: dropped ones released by the GC, none twice",
  async () => {
    const before = live();
    const producerBefore = deleted();
    let kept: BufferView | undefined;
    (() => {
      // Three views wait (no microtask runs) while 2,500 import/dispose pairs make the backstop
      // renew its young list twice (where the runtime renews it: Deno) and move the waiting ones
      // over each time.
      const waiting = [0, 1, 2].map(() => importDLPack(make({ shape: [3] }).source)) as [
        BufferView,
        BufferView,
        BufferView,
      ];
      for (let i = 0; i < 2500; i++) importDLPack(make({ shape: [1] }).source).dispose();
      assert.equal(deleted() - producerBefore, 2500, "each disposed view released at once");
      waiting[1].dispose();
      kept = waiting[2];
      // waiting[0] is dropped undisposed.
    })();
    assert.equal(deleted() - producerBefore, 2501);
    for (let i = 0; i < 30 && deleted() - producerBefore < 2502; i++) await collectGarbage();
    assert.equal(deleted() - producerBefore, 2502, "the dropped view released by the backstop");
    assert.equal(kept!.array().length, 3, "the kept view was not released");
    kept!.dispose();
    for (let i = 0; i < 3; i++) await collectGarbage();
    assert.equal(deleted() - producerBefore, 2503, "nothing released twice");
    assert.deepEqual(live(), before);
  },
  { skip: gcUnavailable() },
);

test("array-interface keepAlive is released once the view and its exports are gone", () => {
  const before = live();
  const memory = zeros([4], "float32");
  let released = 0;
  const keepAlive = { [Symbol.dispose]: () => released++ };
  const view = fromArrayInterface(
    { data: [memory.address, false], shape: [4], strides: null, typestr: "<f4", version: 3 },
    keepAlive,
  );
  assert.equal(view.keepAliveValue, keepAlive);
  const capsule = exportDLPack(view).take();
  view.dispose();
  stats();
  assert.equal(released, 0, "the export still needs it");
  tp.tp_consume(capsule, 1);
  stats(); // sweeps released pins
  assert.equal(released, 1);
  memory.dispose();
  assert.deepEqual(live(), before);
});

test("100,000 export/consume cycles end with stats() at zero", () => {
  const before = live();
  const data = new Float32Array(16);
  for (let i = 0; i < 100_000; i++) {
    const c = i % 2 === 0 ? exportDLPack(data) : exportDLPackLegacy(data);
    if (i % 3 === 0) c.dispose();
    else if (i % 3 === 1) tp.tp_consume(c.take(), c.versioned ? 1 : 0);
    else importDLPack(c).dispose();
  }
  assert.deepEqual(live(), before);
}, { timeout: 120_000 });

test("exports released from 8 threads at once", () => {
  const before = live();
  const data = new Float32Array(4);
  const addresses = new Float64Array(20_000);
  for (let i = 0; i < addresses.length; i++) addresses[i] = Number(exportDLPack(data).take());
  assert.equal(stats().pinned, before.pinned + addresses.length);
  assert.equal(tp.tp_consume_many(addresses, addresses.length, 1, 8), 0);
  assert.deepEqual(live(), before);
});

test(
  "the lazy GC backstop: thousands of views across flushes, some disposed, others collected, each released once",
  async () => {
    const before = deleted();
    const alive = live();
    const count = 3000; // crosses the 1024-handle synchronous flush more than twice
    let keep: Array<ReturnType<typeof importDLPack>> = [];
    (() => {
      for (let i = 0; i < count; i++) {
        const v = importDLPack(make({ shape: [2] }).source);
        if (i % 3 === 0) v.dispose(); // disposed before any flush
        else keep.push(v);
      }
    })();
    await Promise.resolve(); // the microtask flush registers the live ones
    for (let i = 0; i < keep.length; i += 2) keep[i]!.dispose(); // disposed after being registered
    keep = [];
    for (let i = 0; i < 30 && deleted() - before < count; i++) await collectGarbage();
    assert.equal(deleted() - before, count, "every producer released exactly once");
    assert.deepEqual(live(), alive);
  },
  { skip: gcUnavailable(), timeout: 120_000 },
);

test(
  "the GC backstop past its first slot table, twice (the second round on slots the collector freed): each view released once",
  async () => {
    const before = deleted();
    const alive = live();
    const count = 10_000; // the backstop's first table holds 4096 waiting or registered views
    let released = 0;
    for (let round = 0; round < 2; round++) {
      let keep: BufferView[] = [];
      (() => {
        for (let i = 0; i < count; i++) {
          const v = importDLPack(make({ shape: [2] }).source);
          if (i % 4 === 0) v.dispose(); // disposed at once, still the newest waiting view
          else keep.push(v);
        }
        // Disposed while still waiting behind newer views (the last ones, not yet registered).
        for (let i = keep.length - 2; i > keep.length - 60; i -= 3) keep[i]!.dispose();
      })();
      await Promise.resolve(); // the microtask flush registers the live ones
      for (let i = 0; i < keep.length; i += 5) keep[i]!.dispose(); // disposed after being registered
      keep = [];
      released += count;
      for (let i = 0; i < 30 && deleted() - before < released; i++) await collectGarbage();
      assert.equal(deleted() - before, released, `round ${round}: every producer released exactly once`);
      assert.deepEqual(live(), alive);
    }
  },
  { skip: gcUnavailable(), timeout: 120_000 },
);
