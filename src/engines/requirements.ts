/**
 * Requirement checks on views: every failed check becomes one message of the exact form
 * `"<field>: required <x>, got <y>"`, so users see everything wrong at once.
 * @module
 */
import { DLPackError, shown } from "../facts/errors.ts";
import { type DType, isDType } from "../facts/dtypes.ts";
import { deviceCode, type DeviceType, formatDevice } from "../facts/devices.ts";
import { LAYOUT_C, LAYOUT_F } from "../native/scratch.ts";
import type { ViewState } from "./state.ts";
import { listText, readExtents } from "../facts/layout.ts";
import { isArray, isCount, isInteger, objectSlots } from "../facts/intrinsics.ts";

/** What a caller needs of a view. Every field is optional. */
export interface Requirements {
  /** One dtype, or any of several. */
  readonly dtype?: DType | readonly DType[] | undefined;
  /** Extents; `null` accepts any extent in that dimension. Implies the rank. */
  readonly shape?: readonly (number | null)[] | undefined;
  /** Number of dimensions. */
  readonly ndim?: number | undefined;
  /** Element count. */
  readonly size?: number | undefined;
  /** "C" row-major, "F" column-major, "any" either (no gaps). */
  readonly contiguous?: "C" | "F" | "any" | undefined;
  /** Byte alignment of element 0's address (a power of two). */
  readonly alignment?: number | undefined;
  /** Device type, and id when given. */
  readonly device?: { readonly type: DeviceType; readonly id?: number | undefined } | undefined;
  /** The view may be written (`access` is "readwrite"). */
  readonly writable?: boolean | undefined;
}

/** The dtype a requirement pins down statically (`DType` unless it is one literal). */
export type RequiredDType<R> = R extends { readonly dtype: infer D extends DType } ? D : DType;
/** The rank a requirement pins down statically (from `ndim`, else from `shape`'s length). */
export type RequiredNdim<R> = R extends { readonly ndim: infer N extends number } ? N
  : R extends { readonly shape: infer S extends readonly unknown[] } ? S["length"]
  : number;

/** Requirements as read from the caller's object: each field once, arrays copied. */
export interface Checked {
  dtypes: DType[] | undefined;
  shape: (number | null)[] | undefined;
  ndim: number | undefined;
  size: number | undefined;
  contiguous: "C" | "F" | "any" | undefined;
  alignment: number | undefined;
  device: { type: DeviceType; id: number | undefined } | undefined;
  writable: boolean | undefined;
}

function layoutText(layout: number): string {
  if ((layout & 3) === 3) return "C and F";
  if ((layout & LAYOUT_C) !== 0) return "C";
  if ((layout & LAYOUT_F) !== 0) return "F";
  return "non-contiguous";
}

/** The largest power of two dividing the address (capped at 2^20; NULL counts as aligned). */
function alignmentOf(address: number): number {
  let alignment = 1;
  while (alignment < 1 << 20 && address % (alignment * 2) === 0) alignment *= 2;
  return alignment;
}

function bad(what: string): never {
  throw new DLPackError("requirements", `invalid requirement: ${what}`);
}

/** Reads a caller's array once: its length, then each element once. */
function readArray(value: unknown[], what: string): unknown[] {
  const n: unknown = value.length;
  if (!isCount(n) || n > 4096) bad(`${what} has an invalid length (${shown(n)})`);
  const out = objectSlots<unknown>(n);
  for (let i = 0; i < n; i++) out[i] = value[i];
  return out;
}

/** Reads and checks a caller's requirements once (throws "requirements" for a bad one). */
export function readRequirements(req: Requirements): Checked {
  if (req === null || typeof req !== "object" || isArray(req)) {
    bad(`requirements must be an object such as { dtype: "float32" }, got ${shown(req)}`);
  }
  const alignment: unknown = req.alignment;
  const dtype: unknown = req.dtype;
  const shape: unknown = req.shape;
  const ndim: unknown = req.ndim;
  const size: unknown = req.size;
  const contiguous: unknown = req.contiguous;
  const device: unknown = req.device;
  const writable: unknown = req.writable;
  if (alignment !== undefined) {
    if (!isInteger(alignment) || alignment <= 0 || (alignment & (alignment - 1)) !== 0 || alignment > 1 << 20) {
      bad(`alignment must be a power of two up to 2^20, got ${shown(alignment)}`);
    }
  }
  let dtypes: DType[] | undefined;
  if (dtype !== undefined) {
    if (typeof dtype !== "string" && !isArray(dtype)) {
      bad(`dtype must be a dtype name or an array of them, got ${shown(dtype)}`);
    }
    const names = typeof dtype === "string" ? [dtype] : readArray(dtype as unknown[], "dtype");
    for (let i = 0; i < names.length; i++) {
      const d = names[i];
      if (!isDType(d)) bad(`unknown dtype ${shown(d)}`);
    }
    dtypes = names as DType[];
  }
  let extents: (number | null)[] | undefined;
  if (shape !== undefined) {
    try {
      extents = readExtents(shape, "shape", true);
    } catch (error) {
      if (error instanceof DLPackError) bad(error.message);
      throw error;
    }
  }
  if (ndim !== undefined && !isCount(ndim)) bad(`ndim must be a non-negative integer, got ${shown(ndim)}`);
  if (size !== undefined && !isCount(size)) bad(`size must be a non-negative integer, got ${shown(size)}`);
  if (contiguous !== undefined && contiguous !== "C" && contiguous !== "F" && contiguous !== "any") {
    bad(`contiguous must be "C", "F" or "any", got ${shown(contiguous)}`);
  }
  let where: Checked["device"];
  if (device !== undefined) {
    if (device === null || typeof device !== "object") bad(`device must be { type, id? }, got ${shown(device)}`);
    const type: unknown = (device as { type?: unknown }).type;
    const id: unknown = (device as { id?: unknown }).id;
    deviceCode(type as DeviceType); // throws "device" for an unknown type
    if (id !== undefined && (!isInteger(id) || id < 0)) {
      bad(`device id must be a non-negative integer, got ${shown(id)}`);
    }
    where = { type: type as DeviceType, id: id as number | undefined };
  }
  if (writable !== undefined && typeof writable !== "boolean") {
    bad(`writable must be true or false, got ${shown(writable)}`);
  }
  return {
    dtypes,
    shape: extents,
    ndim: ndim as number | undefined,
    size: size as number | undefined,
    contiguous: contiguous as Checked["contiguous"],
    alignment: alignment as number | undefined,
    device: where,
    writable: writable as boolean | undefined,
  };
}

function orList(names: readonly string[]): string {
  let text = "";
  for (let i = 0; i < names.length; i++) text += (i === 0 ? "" : " or ") + names[i];
  return text;
}

/** The refusal messages for `view` against requirements already read. */
export function refusalsOf(view: ViewState, r: Checked): string[] {
  const found = objectSlots<string>(8);
  let count = 0;
  const facts = view.facts;
  const name = facts.info.name;
  const shape = facts.shape;
  if (r.dtypes !== undefined) {
    let ok = false;
    for (let i = 0; i < r.dtypes.length; i++) if (r.dtypes[i] === name) ok = true;
    if (!ok) found[count++] = `dtype: required ${orList(r.dtypes)}, got ${name}`;
  }
  const ndim = r.ndim ?? r.shape?.length;
  if (ndim !== undefined && shape.length !== ndim) found[count++] = `ndim: required ${ndim}, got ${shape.length}`;
  if (r.shape !== undefined) {
    let fits = shape.length === r.shape.length;
    for (let d = 0; fits && d < shape.length; d++) fits = r.shape[d] === null || r.shape[d] === shape[d];
    if (!fits) found[count++] = `shape: required ${listText(r.shape)}, got ${listText(shape)}`;
  }
  const size = facts.size;
  if (r.size !== undefined && size !== r.size) found[count++] = `size: required ${r.size}, got ${size}`;
  if (r.contiguous !== undefined) {
    const layout = facts.layout;
    const c = (layout & LAYOUT_C) !== 0;
    const f = (layout & LAYOUT_F) !== 0;
    const ok = r.contiguous === "C" ? c : r.contiguous === "F" ? f : c || f;
    const wanted = r.contiguous === "any" ? "C or F" : r.contiguous;
    if (!ok) found[count++] = `contiguous: required ${wanted}, got ${layoutText(layout)}`;
  }
  if (r.alignment !== undefined) {
    const address = view.address;
    const alignment = address === 0 ? 1 << 20 : alignmentOf(address);
    if (alignment < r.alignment) found[count++] = `alignment: required ${r.alignment}, got ${alignment}`;
  }
  if (r.device !== undefined) {
    const d = facts.device;
    if (d.type !== r.device.type || (r.device.id !== undefined && d.id !== r.device.id)) {
      found[count++] = `device: required ${formatDevice(r.device)}, got ${formatDevice(d)}`;
    }
  }
  if (r.writable !== undefined) {
    const writable = view.access === "readwrite";
    if (writable !== r.writable) found[count++] = `writable: required ${r.writable}, got ${writable}`;
  }
  const out = objectSlots<string>(count);
  for (let i = 0; i < count; i++) out[i] = found[i];
  return out as string[];
}

/** The "requirements" error listing every requirement a view failed. */
export function refusedError(what: string, refusals: string[]): DLPackError {
  return new DLPackError("requirements", `${what}: ${joinedRefusals(refusals)}`, refusals);
}

/** `view.as(dtype, ndim)`'s requirements: both must be given. */
export function asRequirements(dtype: unknown, ndim: unknown): Checked {
  if (dtype === undefined || ndim === undefined) {
    throw new DLPackError("argument", `as() needs a dtype and a rank, got ${shown(dtype)} and ${shown(ndim)}`);
  }
  return readRequirements({ dtype, ndim } as Requirements);
}

/** Refuses `view.as(dtype, ndim)` for a view of another dtype or rank, listing both mismatches. */
export function refuseAs(view: ViewState, checked: Checked, dtype: unknown, ndim: unknown): void {
  const refusals = refusalsOf(view, checked);
  if (refusals.length > 0) {
    throw refusedError(`as(${typeof dtype === "string" ? dtype : shown(dtype)}, ${shown(ndim)}) refused`, refusals);
  }
}

/** Refusals as `a; b; c` (no `join`: it is replaceable). */
export function joinedRefusals(parts: readonly string[]): string {
  let text = "";
  for (let i = 0; i < parts.length; i++) text += (i === 0 ? "" : "; ") + parts[i];
  return text;
}
