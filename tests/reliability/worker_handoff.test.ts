// Handing a view to a Worker, the documented way (docs/workers.md): the sender posts
// `exportDLPack(view).take()`, a bigint, and the Worker imports `{ versioned: address }`: zero-copy,
// in both directions, the sender free to dispose its view at once. Posting or cloning a view itself
// throws a DLPackError that says so, instead of delivering `{}`.
import assert from "node:assert/strict";
import { arange, DLPackError, exportDLPack, importDLPack, zeros } from "../../mod.ts";
import { test } from "../support/harness.ts";
import { noneLeft, refused, settledLive } from "../support/assertions.ts";

const WORKER_URL = new URL("../support/handoff_worker.ts", import.meta.url).href;

/** One Worker, asked one thing at a time; its errors fail the test. */
class Peer {
  readonly #worker = new Worker(WORKER_URL, { type: "module" });
  #pending: ((value: Record<string, unknown>) => void)[] = [];

  constructor() {
    this.#worker.onmessage = (e: MessageEvent<Record<string, unknown>>) => {
      if (e.data.op === "delivered") return;
      this.#pending.shift()?.(e.data);
    };
    this.#worker.onerror = (e: Event) => {
      (e as Event).preventDefault?.();
      for (const resolve of this.#pending.splice(0)) resolve({ error: (e as ErrorEvent).message ?? String(e) });
    };
  }

  async ask(message: Record<string, unknown>): Promise<Record<string, unknown>> {
    const answer = await new Promise<Record<string, unknown>>((resolve) => {
      this.#pending.push(resolve);
      this.#worker.postMessage(message);
    });
    assert.equal(answer.error, undefined, `the Worker failed on ${message.op}: ${answer.error}`);
    return answer;
  }

  post(value: unknown): void {
    this.#worker.postMessage(value);
  }

  terminate(): void {
    this.#worker.terminate();
  }
}

test("a Worker writes a view the main thread handed it zero-copy; the main thread reads the writes", async () => {
  const before = await settledLive();
  const peer = new Peer();
  try {
    using view = zeros([2, 3], "float32");
    const answer = await peer.ask({ op: "write", address: exportDLPack(view).take(), value: 10 });
    assert.deepEqual(answer.shape, [2, 3]);
    assert.deepEqual(view.toNested(), [[10, 11, 12], [13, 14, 15]], "the Worker's writes, read here");
    // A slice goes the same way: the Worker sees only the slice.
    using column = view.slice(null, 1);
    await peer.ask({ op: "write", address: exportDLPack(column).take(), value: -1 });
    assert.deepEqual(view.toNested(), [[10, -1, 12], [13, 0, 15]]);
  } finally {
    peer.terminate();
  }
  await noneLeft(before, "every share released");
}, { timeout: 60_000 });

test("the sender may dispose its view right after take(): the Worker's import holds the memory", async () => {
  const before = await settledLive();
  const peer = new Peer();
  try {
    const view = zeros([4], "int32");
    const address = exportDLPack(view).take();
    view.dispose();
    // The struct holds a share of the memory: it is alive though no view is.
    assert.equal((await settledLive()).allocations, before.allocations + 1);
    await peer.ask({ op: "write", address, value: 7 });
    await noneLeft(before, "the Worker's dispose released the last share");
    // And back: a view the Worker made, imported here, outlives the Worker.
    const made = await peer.ask({ op: "make" });
    peer.terminate();
    using back = importDLPack({ versioned: made.address as bigint });
    assert.deepEqual(back.toNested(), [10, 11, 12, 13]);
  } finally {
    peer.terminate();
  }
  await noneLeft(before);
}, { timeout: 60_000 });

test("an address posted but never imported keeps its memory until someone imports it", async () => {
  const before = await settledLive();
  const view = arange(5, "float32");
  const address = exportDLPack(view).take();
  view.dispose();
  // The message was lost (the Worker ended, nobody listened): the struct still holds the memory.
  assert.equal((await settledLive()).allocations, before.allocations + 1);
  // Its sender, knowing it was never consumed, releases it by importing it itself.
  importDLPack({ versioned: address }).dispose();
  await noneLeft(before);
});

test("postMessage(view) and structuredClone(view) throw a DLPackError naming the hand-off", async () => {
  using view = arange(4, "float32");
  const hint = /cannot be cloned or posted.*exportDLPack\(view\)\.take\(\).*importDLPack\(\{ versioned: address \}\)/;
  refused(() => structuredClone(view), "argument", hint);
  refused(() => structuredClone({ nested: [view] }), "argument", hint);
  const channel = new MessageChannel();
  refused(() => channel.port1.postMessage(view), "argument", hint);
  channel.port1.close();
  channel.port2.close();
  const peer = new Peer();
  try {
    refused(() => peer.post({ view }), "argument", hint);
    // And from inside a Worker, to the main thread.
    const answer = await peer.ask({ op: "post-view" });
    assert.equal(answer.code, "argument", String(answer.message));
    assert.match(String(answer.message), hint);
  } finally {
    peer.terminate();
  }
  // The view is unharmed by the refused clones.
  assert.deepEqual(view.toNested(), [0, 1, 2, 3]);
  assert.ok(!(structuredClone(view.toJSON()) instanceof DLPackError), "toJSON() metadata still clones");
}, { timeout: 60_000 });
