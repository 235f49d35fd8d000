/**
 * View facts from the scratch a native import just wrote, and the caches that let imports of one
 * layout share one facts record: a program importing tensors of one shape over and over (batches)
 * allocates no layout per view.
 * @module
 */
import { DLPackError } from "../facts/errors.ts";
import { type DTypeInfo, infoOfTriple } from "../facts/dtypes.ts";
import { type Device, deviceOf } from "../facts/devices.ts";
import { numbersFrom } from "../facts/intrinsics.ts";
import { Flag, ImportOption } from "../facts/abi.ts";
import {
  DEVICE_VERIFIED,
  F64,
  I32,
  KEY_GENERATION,
  type Scratch,
  type ScratchF64,
  type ScratchU32,
  U32,
} from "../native/scratch.ts";
import { type Access, type ViewFacts, type ViewOrigin, viewOrigin } from "./state.ts";

const READ_ONLY = Flag.readOnly;

/** The facts and access of the last keyed import, remembered for its native generation: the
 * native side moves the generation on unless every fact equals the last keyed import's, so the
 * facts built for a generation are reused after one word compare. */
class KeyedFacts {
  /** The generation of the keyed scratch `facts` was built for (-1: none yet; the native
   * generation starts at 0 and only grows). */
  generation = -1;
  producer: string | null = null;
  facts: ViewFacts = placeholderFacts();
  access: Access = "unknown";

  /** Builds the facts and access of the keyed import `s` describes and remembers them for its
   * generation (nothing is remembered if building them throws). */
  refresh(s: Scratch, producer: string | null, options: number): void {
    const versioned = (options & ImportOption.versioned) !== 0;
    const generation = s.f64[KEY_GENERATION];
    const facts = factsOfScratch(s, producer, "external", undefined);
    this.access = versioned ? ((s.u32[U32.flags] & READ_ONLY) !== 0 ? "readonly" : "readwrite") : "unknown";
    this.facts = facts;
    this.producer = producer;
    this.generation = generation;
  }
}

/** The keyed imports' facts (read by the import factory of src/view/view.ts). */
export const keyed: KeyedFacts = new KeyedFacts();

/** The facts of the description in `s`, remembered (with its words) for the next import. */
export function factsOfScratch(
  s: Scratch,
  producer: string | null,
  ownerName: string,
  verified: boolean | undefined,
): ViewFacts {
  const f64 = s.f64;
  const i32 = s.i32;
  const u32 = s.u32;
  const info = infoOfTriple(u32[U32.code], u32[U32.bits]);
  if (info === undefined) throw new DLPackError("dtype", "native and TS dtype tables disagree");
  const layout = u32[U32.layout];
  const origin = viewOrigin(
    producer,
    ownerName,
    i32[I32.major],
    i32[I32.minor],
    u32[U32.flags],
    // Unless the caller knows, the native check says (CPU memory, or a claim the CUDA driver confirmed).
    verified ?? (layout & DEVICE_VERIFIED) !== 0,
  );
  const device = deviceOf(i32[I32.deviceType], i32[I32.deviceId]);
  const ndim = i32[I32.ndim];
  const facts = factsFromScratch(f64, ndim, info, layout, device, origin);
  // Remembered only where the caller left `verified` to the native check (the words then say all).
  lastProducer = producer;
  lastOwnerName = ownerName;
  lastKeyed = verified === undefined && ndim >= 1 && ndim <= 2;
  lastFacts = facts;
  for (let i = KEY_FIRST; i <= KEY_LAST; i++) lastWords[i - KEY_FIRST] = u32[i]!;
  // size, nbytes, minOffset and maxOffset are consecutive fields.
  for (let i = 0; i < 4; i++) lastNumbers[i] = f64[F64.size + i]!;
  for (let i = 0; i < ndim && i < 2; i++) {
    lastNumbers[4 + i] = f64[F64.shape + i]!;
    lastNumbers[6 + i] = f64[F64.strides + i]!;
  }
  return facts;
}

/** The facts of the description a native call other than a keyed import wrote into `s` (the
 * Python bridge's): those of the last such call when the description is the same, compared word
 * for word without building anything. */
export function describedFacts(s: Scratch, producer: string | null, ownerName: string): ViewFacts {
  return producer === lastProducer && ownerName === lastOwnerName && sameDescription(s.u32, s.f64)
    ? lastFacts
    : factsOfScratch(s, producer, ownerName, undefined);
}

/** The description words the facts derive from: ndim, device, version, flags, dtype, layout. */
const KEY_FIRST = I32.ndim;
const KEY_LAST = U32.layout;
const lastWords = new Uint32Array(KEY_LAST - KEY_FIRST + 1);
/** size, nbytes, minOffset, maxOffset, shape[0..2], strides[0..2] of the last description. */
const lastNumbers = new Float64Array(8);
let lastProducer: string | null = null;
let lastOwnerName = "";
/** Whether the words above stand for `lastFacts` (ranks 1 and 2, `verified` left to native). */
let lastKeyed = false;

/** Whether the description in the scratch is the one `lastFacts` was made from. */
function sameDescription(u32: ScratchU32, f64: ScratchF64): boolean {
  const w = lastWords;
  const n = lastNumbers;
  const ndim = u32[KEY_FIRST];
  if (!lastKeyed || ndim !== w[0]) return false;
  if (
    u32[KEY_FIRST + 1] !== w[1] || u32[KEY_FIRST + 2] !== w[2] || u32[KEY_FIRST + 3] !== w[3] ||
    u32[KEY_FIRST + 4] !== w[4] || u32[KEY_FIRST + 5] !== w[5] || u32[KEY_FIRST + 6] !== w[6] ||
    u32[KEY_FIRST + 7] !== w[7] || u32[KEY_FIRST + 8] !== w[8] || u32[KEY_FIRST + 9] !== w[9]
  ) return false;
  if (
    f64[F64.size] !== n[0] || f64[F64.nbytes] !== n[1] || f64[F64.minOffset] !== n[2] ||
    f64[F64.maxOffset] !== n[3] || f64[F64.shape] !== n[4] || f64[F64.strides] !== n[6]
  ) return false;
  return ndim === 1 || (f64[F64.shape + 1] === n[5] && f64[F64.strides + 1] === n[7]);
}

/** A 0-d float32 CPU record, standing for "nothing built yet". */
function placeholderFacts(): ViewFacts {
  return {
    info: infoOfTriple(2, 32)!,
    shape: [],
    strides: [],
    size: 1,
    nbytes: 4,
    minOffset: 0,
    maxOffset: 0,
    layout: 0,
    device: deviceOf(1, 0),
    origin: viewOrigin(null, "", -1, -1, 0, true),
  };
}

/** The facts of the last import, shared by the next one when its layout is the same. */
let lastFacts: ViewFacts = placeholderFacts();

function factsFromScratch(
  f64: ScratchF64,
  ndim: number,
  info: DTypeInfo,
  layout: number,
  device: Device,
  origin: ViewOrigin,
): ViewFacts {
  // Own elements from literals: a setter on Array.prototype never sees these values. Ranks 1 and
  // 2 are spelled out here, where the JIT sees them on the import path.
  const shape = ndim === 1
    ? [f64[F64.shape]]
    : ndim === 2
    ? [f64[F64.shape], f64[F64.shape + 1]!]
    : numbersFrom(f64, F64.shape, ndim);
  const strides = ndim === 1
    ? [f64[F64.strides]]
    : ndim === 2
    ? [f64[F64.strides], f64[F64.strides + 1]!]
    : numbersFrom(f64, F64.strides, ndim);
  return {
    info,
    shape,
    strides,
    size: f64[F64.size],
    nbytes: f64[F64.nbytes],
    minOffset: f64[F64.minOffset],
    maxOffset: f64[F64.maxOffset],
    layout,
    device,
    origin,
  };
}
