/**
 * Values in bulk: a view's elements as nested JS arrays (`toNested`) and back (`copyFrom(nested)`),
 * and one value written into every element (`fill`). Device memory goes through the copy engine.
 * @module
 */
import { DLPackError, shown } from "../facts/errors.ts";
import type { AnyTypedArray, DTypeInfo, Scalar } from "../facts/dtypes.ts";
import { isHostAccessible } from "../facts/devices.ts";
import { listText, nextOffset } from "../facts/layout.ts";
import { ArrayBufferCtor, isArray, objectSlots, slots } from "../facts/intrinsics.ts";
import { releaseTop } from "../native/journal.ts";
import { decodeElement, encodeElement, gather, jsBuffer, slotBitsOf, spanArray, writeBits } from "./codec.ts";
import { copyFromArray, refuseWrite, toHost } from "./copy.ts";
import type { ViewFacts, ViewState } from "./state.ts";

/** The most elements a JS array holds (2^32 - 1): nested arrays of more could not even be a flat
 * list (and would exhaust the JS heap long before; the engine's heap limit still applies below). */
const MAX_JS_ARRAY = 2 ** 32 - 1;

/** Whether a view's memory can be read and written from JS. */
function onHost(facts: ViewFacts): boolean {
  const type = facts.device.type;
  return type === "cpu" || isHostAccessible(type);
}

/** `view.toNested()`: nested arrays of values (device memory is copied to the host first). */
export function toNested(view: ViewState): unknown {
  const f = view.facts;
  const info = f.info;
  const shape = f.shape;
  if (f.size > MAX_JS_ARRAY) {
    throw new DLPackError(
      "overflow",
      `toNested() of ${f.size} elements (shape ${listText(shape)}): JS arrays hold at most 2^32 - 1; ` +
        `take part of the view with slice(), or copy() it into library memory`,
    );
  }
  const flat = elementsOf(view);
  if (shape.length === 0) return decodeElement(info, flat, 0);
  let k = 0;
  const build = (d: number): unknown[] => {
    const n = shape[d]!;
    const out = objectSlots<unknown>(n);
    for (let i = 0; i < n; i++) out[i] = d === shape.length - 1 ? decodeElement(info, flat, k++) : build(d + 1);
    return out;
  };
  return build(0);
}

/** A view's elements in C order, in the form of `toArray()`: device memory through a host copy
 * (`gatheredOnHost`). */
export function elementsOf(view: ViewState): AnyTypedArray {
  const f = view.facts;
  return onHost(f) ? gather(f, spanArray(view.address, f)) : gatheredOnHost(view);
}

/** The elements of a device view in C order, through a host copy released before this returns
 * (journaled until then: an exception leaves it to be released). */
function gatheredOnHost(view: ViewState): AnyTypedArray {
  const host = toHost(view, undefined);
  const values = gather(host.facts, spanArray(host.address, host.facts));
  releaseTop(host.owner);
  return values;
}

/** `value` checked as one element of `info`'s dtype, in the form of `toArray()` (read before any
 * view's state is taken: a complex value is a caller's array). */
export function encodeOne(info: DTypeInfo, value: Scalar): AnyTypedArray {
  const one = new info.array(new ArrayBufferCtor(info.slots * info.slotBytes));
  encodeElement(info, value, one, 0);
  return one;
}

/** `view.fill(value)`: `one` (from {@link encodeOne}) written into every element. */
export function fill(view: ViewState, one: AnyTypedArray): void {
  refuseWrite(view.access, "fill()", view.facts);
  const f = view.facts;
  const info = f.info;
  const size = f.size;
  if (size === 0) return;
  if (!onHost(f)) {
    // A host array of the value in the form of `toArray()`, copied over.
    const full = new info.array(new ArrayBufferCtor(size * info.slots * info.slotBytes));
    for (let k = 0; k < size * info.slots; k++) full[k] = one[k % info.slots]!;
    copyFromArray(view, full, info.tag, undefined);
    return;
  }
  const a = spanArray(view.address, f);
  const shape = f.shape;
  const strides = f.strides;
  const minOffset = f.minOffset;
  const slotBits = slotBitsOf(f);
  const packed = info.bits < 8 && slotBits < 8;
  const index = slots(shape.length);
  let at = -minOffset;
  for (let k = 0; k < size; k++) {
    // `one` holds one element: info.slots slots.
    if (packed) writeBits(a as Uint8Array, at, slotBits, minOffset, one[0] as number);
    else if (info.slots === 2) {
      a[2 * at] = one[0]!;
      a[2 * at + 1] = one[1]!;
    } else a[at] = one[0]!;
    at = nextOffset(index, shape, strides, at);
  }
}

/** `copyFrom(nested)`: the values in the form of `toArray()`, checked against the shape (a
 * caller's arrays: read before any view's state is taken). */
export function flatten(facts: ViewFacts, nested: readonly unknown[]): AnyTypedArray {
  const info = facts.info;
  const shape = facts.shape;
  const out = new info.array(jsBuffer(facts.size * info.slots * info.slotBytes, "copyFrom()"));
  let k = 0;
  const walk = (value: unknown, d: number): void => {
    if (d === shape.length) {
      encodeElement(info, value as Scalar, out, k++);
      return;
    }
    if (!isArray(value)) {
      throw new DLPackError("shape", `copyFrom: expected an array of ${shape[d]} at depth ${d}, got ${shown(value)}`);
    }
    const n: unknown = value.length; // read once
    const extent = shape[d]!;
    if (n !== extent) {
      throw new DLPackError(
        "shape",
        `copyFrom: an array at depth ${d} has ${shown(n)} entries; shape ${listText(shape)} needs ${extent}`,
      );
    }
    for (let i = 0; i < extent; i++) walk(value[i], d + 1);
  };
  walk(nested, 0);
  return out;
}
