/**
 * Shared memory outliving a Worker. When a Worker ends, its heap goes and with it every object its
 * pins held: an ArrayBuffer's memory is freed under the consumer. A SharedArrayBuffer's backing
 * store is shared, though, so a Worker that pins one also offers it to the main thread, which pins
 * it too (a keeper pin natively tied to the Worker's) until the consumer releases the export.
 * @module
 */
import { core, loadedCore, runtime } from "../../ffi/mod.ts";
import { markStray, newPinId, pinsRecorded, realmAddress, realmMade, recordPin } from "./pins.ts";
import {
  bufferState,
  objectSlots,
  SHARED,
  slots,
  startInterval,
  stopInterval,
  typedArrayBuffer,
  typedArrayTag,
} from "../facts/intrinsics.ts";

const KEEPER_CHANNEL = "dlpack-ts/keep";
const onMainThread = runtime().mainThread;
const sabByteLength = Object.getOwnPropertyDescriptor(SharedArrayBuffer.prototype, "byteLength")!.get!;
const applyFn = Reflect.apply;

/** The SharedArrayBuffer under a TypedArray, or a SharedArrayBuffer itself; else undefined. The
 * intrinsics' brand checks decide (the prototype only picks which one runs first), so no own
 * `buffer`, replaced prototype or Proxy passes memory off as shared or unshared, and nothing throws
 * for a TypedArray over either kind of buffer with its own prototype. perf(export + dispose in a
 * Worker): a thrown TypeError cost an unshared export 50 times the export. */
function sharedBufferOf(value: unknown): SharedArrayBuffer | undefined {
  try {
    const buffer = typedArrayTag(value) === undefined ? value : typedArrayBuffer(value as ArrayBufferView);
    if (buffer === null || typeof buffer !== "object") return undefined;
    return (bufferState(buffer as ArrayBufferLike) & SHARED) !== 0 ? buffer as SharedArrayBuffer : undefined;
  } catch {
    // Neither kind of buffer.
    return undefined;
  }
}

let offers: BroadcastChannel | undefined;
/** Offers not yet taken (the main thread may not have been listening when they were posted), in
 * two plain slot arrays: no Map or iterator a caller could replace is involved. */
let offerTokens = slots(0);
let offerBuffers = objectSlots<SharedArrayBuffer>(0);
let offerCount = 0;

let repeatTimer: unknown;

/**
 * On a Worker, offers the SharedArrayBuffer under `value` (a TypedArray just pinned by the pin
 * record `pinOwner`) to the main thread, so that its memory outlives this Worker while a consumer
 * holds an export of it. Nothing on the main thread or for memory that is not shared. Never throws:
 * an offer not made leaves the export as long-lived as this Worker, as for memory that is not
 * shared.
 */
export function offerBeyondRealm(value: unknown, pinOwner: number): void {
  if (onMainThread) return;
  try {
    offer(value, pinOwner);
  } catch {
    // As for an offer the main thread never takes.
  }
}

function offer(value: unknown, pinOwner: number): void {
  const buffer = sharedBufferOf(value);
  if (buffer === undefined) return;
  const token = core().dlpk_pin_share(pinOwner);
  if (token === 0) return; // out of memory: the export lives as long as this Worker, as before
  offers ??= new BroadcastChannel(KEEPER_CHANNEL);
  offers.postMessage({ token, buffer });
  if (offerCount === offerTokens.length) {
    const tokens = slots(2 * offerCount + 4);
    const buffers = objectSlots<SharedArrayBuffer>(2 * offerCount + 4);
    for (let i = 0; i < offerCount; i++) {
      tokens[i] = offerTokens[i]!;
      buffers[i] = offerBuffers[i];
    }
    offerTokens = tokens;
    offerBuffers = buffers;
  }
  offerTokens[offerCount] = token;
  offerBuffers[offerCount++] = buffer;
  if (repeatTimer !== undefined) return;
  // Offered again now and then until taken: the main thread may not have been listening yet.
  const timer = startInterval(() => {
    repeatOffers();
    if (offerCount === 0) {
      stopInterval(repeatTimer);
      repeatTimer = undefined;
    }
  }, 250);
  repeatTimer = timer;
  runtime().unrefTimer(timer);
}

/** Posts again every offer the main thread has not taken yet; forgets taken and released ones. */
function repeatOffers(): void {
  const lib = core();
  let kept = 0;
  for (let i = 0; i < offerCount; i++) {
    const token = offerTokens[i]!;
    const buffer = offerBuffers[i];
    offerBuffers[i] = undefined;
    if (lib.dlpk_pin_kept(token) !== 0) continue;
    offers!.postMessage({ token, buffer });
    offerTokens[kept] = token;
    offerBuffers[kept++] = buffer;
  }
  offerCount = kept;
}

/** The main thread's side: pins each offered SharedArrayBuffer for as long as the Worker's pin.
 * An offer is the first call into the library this realm may make (a program that only starts
 * Workers): it loads the library here, as any first use does. Never throws: it runs as an event
 * handler, where an exception would end the program. */
function keepOffered(event: { readonly data: unknown }): void {
  try {
    const data = event.data as { token?: unknown; buffer?: unknown } | null;
    if (data === null || typeof data !== "object" || typeof data.token !== "number") return;
    const buffer = sharedBufferOf(data.buffer);
    if (buffer === undefined) return;
    const lib = core();
    const id = newPinId();
    const status = lib.dlpk_pin_keep(data.token, realmAddress(), id, applyFn(sabByteLength, buffer, []) as number);
    if (status === 0) {
      recordPin(id, buffer);
      pinsRecorded();
    } // 1: the consumer released it before the offer arrived: the keeper's id is already queued.
    else markStray();
  } catch {
    // The library cannot be loaded in this realm (nothing here could release the keeper either),
    // or the stack ran out: the Worker offers again until the offer is taken.
  }
}

let keeper: BroadcastChannel | undefined;
let keeperUnrefed = false;

function openKeeper(): void {
  keeper = new BroadcastChannel(KEEPER_CHANNEL);
  keeper.onmessage = keepOffered;
  keeperUnrefed = runtime().unrefChannel(keeper);
}

// The main thread listens from the start, whatever it did first, with the listener unref'd so that
// it never keeps the process alive (Bun's `unref()`; in Deno the method its node:worker_threads
// channel calls). Only where a runtime offers neither does it listen just while some other realm
// using the library is alive (native realm count, polled: this realm must have loaded the library).
function keeperTick(): void {
  const lib = loadedCore();
  if (lib === undefined || keeperUnrefed) return;
  const others = lib.dlpk_realms_live() - (realmMade() ? 1 : 0);
  if (others > 0 && keeper === undefined) openKeeper();
  else if (others <= 0 && keeper !== undefined) {
    keeper.close();
    keeper = undefined;
  }
}

if (onMainThread) {
  openKeeper();
  if (!keeperUnrefed) {
    keeper!.close();
    keeper = undefined;
    const timer = startInterval(keeperTick, 50);
    runtime().unrefTimer(timer);
  }
}
