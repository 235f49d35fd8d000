/**
 * Joins: `concat` (views laid end to end along an existing axis) and `stack` (along a new one), into
 * a new C-contiguous library allocation on the views' device. The copies are the copy engine's,
 * so any strides it reads are accepted (transposed, sliced, broadcast inputs).
 * @module
 */
import { DLPackError } from "../facts/errors.ts";
import { type Device, formatDevice, isHostAccessible } from "../facts/devices.ts";
import { listText } from "../facts/layout.ts";
import { axisOf } from "../facts/shape.ts";
import { copyNumbers, objectSlots, slots, Uint8ArrayCtor } from "../facts/intrinsics.ts";
import { releaseTop } from "../native/journal.ts";
import { cudaAllocationKind } from "../native/cuda_memory.ts";
import { allocate, DEFAULT_ALIGNMENT, HOST, type Placement } from "./alloc.ts";
import { gather, spanArray } from "./codec.ts";
import { copyFromArray, copyInto } from "./copy.ts";
import { expanded, permuted, sliced } from "./derive.ts";
import { derivedFacts, type DerivedLayout, type Owned, type ViewState } from "./state.ts";

/** The state of part of `base`'s memory (a layout derived from it), for one copy. */
function partOf(base: ViewState, d: DerivedLayout): ViewState {
  return {
    owner: base.owner,
    address: base.address + d.byteOffset,
    facts: derivedFacts(base.facts, d),
    access: d.readonly ? "readonly" : base.access,
    key: base.key,
  };
}

/** The state of memory an engine made (its own key). */
function stateOfOwned(owned: Owned): ViewState {
  return { owner: owned.owner, address: owned.address, facts: owned.facts, access: owned.access, key: owned };
}

/** Where a join's result goes: the views' device, which the copy engine reaches. */
function placementOf(device: Device, what: string): Placement {
  if (device.type === "cpu") return HOST;
  if (device.type === "cuda" || isHostAccessible(device.type)) {
    return { kind: cudaAllocationKind(device), id: device.id };
  }
  throw new DLPackError("device", `${what}() copies host and CUDA memory; these views are on ${formatDevice(device)}`);
}

/** Refuses views that differ in dtype, device or (except along `axis`, -1: none) shape. */
function checkAlike(views: readonly ViewState[], axis: number, what: string): void {
  const first = views[0]!.facts;
  for (let i = 1; i < views.length; i++) {
    const f = views[i]!.facts;
    if (f.info !== first.info) {
      throw new DLPackError("dtype", `${what}(): view ${i} is ${f.info.name}, view 0 is ${first.info.name}`);
    }
    const a = f.device;
    const b = first.device;
    if (a.type !== b.type || a.id !== b.id) {
      throw new DLPackError(
        "device",
        `${what}(): view ${i} is on ${formatDevice(a)}, view 0 on ${formatDevice(b)}; copy them to one device first`,
      );
    }
    let same = f.shape.length === first.shape.length;
    for (let d = 0; same && d < f.shape.length; d++) same = d === axis || f.shape[d] === first.shape[d];
    if (!same) {
      throw new DLPackError(
        "shape",
        `${what}(): view ${i} has shape ${listText(f.shape)}, view 0 ${listText(first.shape)}` +
          (axis < 0 ? "; stack() needs equal shapes" : `; only axis ${axis} may differ`),
      );
    }
  }
}

/** `stack(views, axis)`: equal shapes, joined along a new axis `axis` of the result. */
export function stacked(views: readonly ViewState[], axis: unknown): Owned {
  checkAlike(views, -1, "stack");
  const parts = objectSlots<ViewState>(views.length) as ViewState[];
  for (let i = 0; i < views.length; i++) parts[i] = partOf(views[i]!, expanded(views[i]!, axis ?? 0));
  return joinAlong(parts, axisOf(axis ?? 0, views[0]!.facts.shape.length + 1), "stack");
}

/** `concat(views, axis)`: shapes equal but along `axis`, joined along it. */
export function concatenated(views: readonly ViewState[], axis: unknown): Owned {
  const ndim = views[0]!.facts.shape.length;
  if (ndim === 0) throw new DLPackError("shape", "concat() joins along an axis; 0-d views have none (stack() them)");
  const a = axisOf(axis ?? 0, ndim);
  checkAlike(views, a, "concat");
  return joinAlong(views, a, "concat");
}

/** Checked views joined along axis `a`: each copied into its block of a C-contiguous result. */
function joinAlong(views: readonly ViewState[], a: number, what: string): Owned {
  const first = views[0]!.facts;
  const shape = copyNumbers(first.shape);
  let total = 0;
  for (let i = 0; i < views.length; i++) total += views[i]!.facts.shape[a]!;
  shape[a] = total;
  const placement = placementOf(first.device, what);
  if (first.info.bits < 8) return joinCodes(views, a, shape, placement);
  if (a === 0) {
    const out = allocate(shape, first.info, placement, DEFAULT_ALIGNMENT, false);
    copyBlocks(stateOfOwned(out), views, null);
    return out;
  }
  // The blocks along an inner axis are not contiguous: join with that axis first, then copy back.
  const ndim = shape.length;
  const order = slots(ndim);
  order[0] = a;
  for (let d = 0, k = 1; d < ndim; d++) if (d !== a) order[k++] = d;
  const back = slots(ndim);
  for (let d = 0; d < ndim; d++) back[order[d]!] = d;
  const out = allocate(shape, first.info, placement, DEFAULT_ALIGNMENT, false);
  const moved = slots(ndim);
  for (let d = 0; d < ndim; d++) moved[d] = shape[order[d]!]!;
  const tmp = allocate(moved, first.info, placement, DEFAULT_ALIGNMENT, false);
  const tmpState = stateOfOwned(tmp);
  copyBlocks(tmpState, views, order);
  copyInto(stateOfOwned(out), partOf(tmpState, permuted(tmpState, back)), undefined);
  releaseTop(tmp.owner);
  return out;
}

/** Copies each view (its axes in `order` first, when given) into consecutive blocks along axis 0
 * of `dst`, a C-contiguous allocation. */
function copyBlocks(dst: ViewState, views: readonly ViewState[], order: number[] | null): void {
  let start = 0;
  for (let i = 0; i < views.length; i++) {
    const v = views[i]!;
    const src = order === null ? v : partOf(v, permuted(v, order));
    const n = src.facts.shape[0]!;
    if (n > 0) copyInto(partOf(dst, sliced(dst, [`${start}:${start + n}`])), src, undefined);
    start += n;
  }
}

/** A join of sub-byte data on the host: one code per element, laid out in JS, packed once. */
function joinCodes(views: readonly ViewState[], a: number, shape: number[], placement: Placement): Owned {
  const first = views[0]!.facts;
  if (placement !== HOST) {
    throw new DLPackError(
      "dtype",
      `joining packed ${first.info.name} data is done on the host; toHost() the views first`,
    );
  }
  let outer = 1;
  for (let d = 0; d < a; d++) outer *= shape[d]!;
  let inner = 1;
  for (let d = a + 1; d < shape.length; d++) inner *= shape[d]!;
  const codes = new Uint8ArrayCtor(outer * shape[a]! * inner);
  let at = 0;
  const parts = objectSlots<Uint8Array>(views.length) as Uint8Array[];
  for (let i = 0; i < views.length; i++) {
    const v = views[i]!;
    parts[i] = gather(v.facts, spanArray(v.address, v.facts)) as Uint8Array;
  }
  for (let o = 0; o < outer; o++) {
    for (let i = 0; i < views.length; i++) {
      const block = views[i]!.facts.shape[a]! * inner;
      const part = parts[i]!;
      for (let k = 0; k < block; k++) codes[at++] = part[o * block + k]!;
    }
  }
  const out = allocate(shape, first.info, HOST, DEFAULT_ALIGNMENT, false);
  copyFromArray(stateOfOwned(out), codes, "Uint8Array", undefined);
  return out;
}
