/**
 * View facts from the scratch a native import just wrote, and the one cache that lets imports of
 * one layout share one facts record, keyed by the native generation (which moves only when a fact
 * differs from the last import's, compared natively): a program importing tensors of one shape
 * over and over (batches) allocates no layout per view.
 * @module
 */
import { DLPackError } from "../facts/errors.ts";
import { type DTypeInfo, infoOfTriple } from "../facts/dtypes.ts";
import { type Device, deviceOf } from "../facts/devices.ts";
import { numbersFrom } from "../facts/intrinsics.ts";
import { Flag, ImportOption } from "../facts/abi.ts";
import { DEVICE_VERIFIED, F64, I32, KEY_GENERATION, type Scratch, type ScratchF64, U32 } from "../native/scratch.ts";
import { releaseTop } from "../native/journal.ts";
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
    const facts = factsOfScratch(s, producer, "external");
    // Read-only when the flags say so (the producer's READ_ONLY, or the native check found memory
    // this process cannot write), else what the struct's generation can say.
    this.access = (s.u32[U32.flags] & READ_ONLY) !== 0 ? "readonly" : versioned ? "readwrite" : "unknown";
    this.facts = facts;
    this.producer = producer;
    this.generation = generation;
  }
}

/** The keyed imports' facts (read by the import factory of src/view/view.ts). */
export const keyed: KeyedFacts = new KeyedFacts();

/** The refusal of an empty tensor whose element 0 lies at or beyond 2^53 (no JS number holds it
 * exactly), which an import took: its owner, the top entry, is released first. */
export function beyondExact(s: Scratch, owner: number): DLPackError {
  const error = s.beyondExact();
  releaseTop(owner);
  return error;
}

/** The facts of the description a keyed import wrote into `s`. */
function factsOfScratch(s: Scratch, producer: string | null, ownerName: string): ViewFacts {
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
    // The native check says (CPU memory, or a claim the CUDA driver confirmed).
    (layout & DEVICE_VERIFIED) !== 0,
  );
  const device = deviceOf(i32[I32.deviceType], i32[I32.deviceId]);
  return factsFromScratch(f64, i32[I32.ndim], info, layout, device, origin);
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
