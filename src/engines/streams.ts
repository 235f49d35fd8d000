/**
 * Producer streams and the DLPack protocol's stream fencing: which stream's work a view's data
 * waits on, and how an export or a consumer is ordered after it. The export and copy engines
 * consult it; src/cuda/cuda.ts gives the public functions, which take views.
 * @module
 */
import { core, runtime } from "../../ffi/mod.ts";
import { DLPackError, shown } from "../facts/errors.ts";
import type { Device } from "../facts/devices.ts";
import { formatDevice } from "../facts/devices.ts";
import { isCount, newWeakMap, toBigInt } from "../facts/intrinsics.ts";
import type { ViewState } from "./state.ts";
import { type Capsule, capsuleAddress, capsuleOwned, capsuleVersioned, isCapsule } from "../native/capsule.ts";
import { cudaCheck, cudaError, ensureDriver, isCudaFamily } from "../native/cuda_driver.ts";
import { releaseTop } from "../native/journal.ts";
import { structEntry } from "../facts/abi.ts";

/** A `CUstream` / `cudaStream_t` handle, or 1 (legacy default stream) or 2 (per-thread default). */
export type StreamHandle = bigint | number;

/** The legacy default stream (the protocol's `stream=1`, and what `None` means). */
export const LEGACY_STREAM = 1n;
/** The per-thread default stream (the protocol's `stream=2`). */
export const PER_THREAD_STREAM = 2n;

/** A handle argument as a bigint (numbers, bigints and pointer objects accepted). */
export function handleOf(value: unknown, what: string): bigint {
  const v = typeof value === "object" && value !== null ? runtime().pointerValue(value) : value;
  if (typeof v === "bigint" && v >= 0n && v < 1n << 64n) return v;
  if (isCount(v)) return toBigInt(v);
  if (typeof v !== "bigint" && typeof v !== "number") {
    throw new DLPackError(
      "argument",
      `${what} must be a stream or event handle (a non-negative integer or bigint), got ${shown(value)}`,
    );
  }
  throw new DLPackError(
    "cuda",
    `${what} must be a stream or event handle (a non-negative integer), got ${shown(value)}`,
  );
}

/** The producer stream recorded per view (its `key`; see {@link setProducerStream}). */
export const producerStreams = newWeakMap<object, bigint>();

/** The device whose context fences and copies of this view use. */
function ordinalOf(device: Device): number {
  return device.type === "cuda" ? device.id : 0;
}

/**
 * Records that work writing `view`'s data is queued on `stream` (for instance the stream a
 * producer was asked to make the data ready on): later fences, copies and exports of the view
 * order themselves after that work. `null` forgets it (the legacy default stream is assumed).
 */
export function setProducerStream(view: ViewState, stream: StreamHandle | null): void {
  const device = view.facts.device;
  if (!isCudaFamily(device.type)) {
    throw new DLPackError("device", `a producer stream only applies to CUDA data; this view is on ${device.type}`);
  }
  if (stream === null) producerStreams.delete(view.key);
  else producerStreams.set(view.key, handleOf(stream, "stream"));
}

/** A view derived from `base` (both keys of views) waits for the same producer work. */
export function inheritStream(base: object, derived: object): void {
  const stream = producerStreams.get(base);
  if (stream !== undefined) producerStreams.set(derived, stream);
}

function sameStream(a: bigint, b: bigint): boolean {
  return (a === 0n ? 1n : a) === (b === 0n ? 1n : b);
}

/**
 * A `__dlpack__(stream=...)` value as the consumer stream: null for -1 (no synchronization),
 * 1 for `None`/`undefined` (the legacy default stream); 0 is refused (the protocol disallows it).
 */
export function consumerStream(stream: unknown): bigint | null {
  if (stream === undefined || stream === null) return LEGACY_STREAM;
  if (stream === -1 || stream === -1n) return null;
  if (stream === 0 || stream === 0n) {
    throw new DLPackError(
      "cuda",
      "stream 0 is not allowed by the DLPack protocol (ambiguous): pass 1 for the legacy default stream, " +
        "2 for the per-thread default stream, -1 for no synchronization, or a stream handle",
    );
  }
  return handleOf(stream, "stream");
}

/**
 * The producer side of `__dlpack__(stream=...)` for `view`: makes the consumer's stream wait for
 * the work queued on the view's producer stream (see {@link setProducerStream}; the legacy
 * default stream when none was recorded), by recording an event there and making the consumer
 * stream wait on it. `stream` follows the protocol: `undefined`/`null` (Python's None) is the
 * legacy default stream, -1 means no synchronization, 0 is refused, 1 and 2 are the legacy and
 * per-thread default streams, anything larger is a stream handle. Nothing happens when both are
 * the same stream. For host data only `undefined`/`null` is allowed (as the protocol says for
 * CPU). The Python bridge calls this before handing a capsule to a consumer that passed a stream.
 */
export function fenceForConsumer(view: ViewState, stream: unknown): void {
  const device = view.facts.device;
  if (!isCudaFamily(device.type)) {
    if (stream === undefined || stream === null) return;
    throw new DLPackError("device", `stream must be None for ${device.type} data, got ${shown(stream)}`);
  }
  const consumer = consumerStream(stream);
  if (consumer === null) return;
  const producer = producerStreams.get(view.key) ?? LEGACY_STREAM;
  if (sameStream(producer, consumer)) return;
  const what = `synchronizing stream ${consumer} with ${formatDevice(device)} data`;
  ensureDriver(what);
  cudaCheck(core().dlpk_cuda_fence(ordinalOf(device), producer, consumer), what, ordinalOf(device));
}

const NO_SYNC_WORD = (1n << 64n) - 1n;

/**
 * `__dlpack__(stream=...)` for an exported capsule of CUDA data, done natively from the export
 * itself: the consumer stream waits on the event the export recorded on its producer stream (an
 * export of a view with a producer stream carries both), else on the legacy default stream's
 * work. Same stream conventions as {@link fenceForConsumer}. The native function behind it,
 * `dlpk_cuda_export_fence(managed, versioned, stream)`, can be called from any thread (a Python
 * `__dlpack__` via ctypes, with -1 as all ones).
 */
export function fenceExport(capsule: Capsule, stream: unknown): void {
  if (!isCapsule(capsule)) throw new DLPackError("argument", `fenceExport takes a Capsule, got ${shown(capsule)}`);
  // A taken or disposed capsule's struct may be freed already.
  if (!capsuleOwned(capsule)) throw new DLPackError("consumed", "this capsule was already taken or disposed");
  const consumer = consumerStream(stream);
  const word = consumer === null ? NO_SYNC_WORD : consumer;
  const what = "fencing an exported capsule";
  ensureDriver(what);
  cudaCheck(
    core().dlpk_cuda_export_fence(capsuleAddress(capsule), capsuleVersioned(capsule) ? 1 : 0, word),
    what,
  );
}

/** The export struct at `address` (just made, journaled as the top entry) of a view with a producer
 * stream carries it, and an event recorded on it; the struct is released if that fails. */
export function attachProducerStream(address: number, versioned: boolean, view: ViewState): void {
  const where = view.facts.device;
  // Only CUDA data has producer streams: host exports skip the lookup.
  if (!isCudaFamily(where.type)) return;
  const stream = producerStreams.get(view.key);
  if (stream === undefined) return;
  const device = ordinalOf(where);
  const status = core().dlpk_cuda_export_attach_stream(address, versioned ? 1 : 0, device, stream);
  if (status !== 0) {
    const error = cudaError(status, "attaching the producer stream to an export", device);
    releaseTop(structEntry(address, versioned));
    if (error !== undefined) throw error;
  }
}
