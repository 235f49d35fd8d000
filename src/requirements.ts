/**
 * Requirement checks on views: every failed check becomes one message of the exact form
 * `"<field>: required <x>, got <y>"`, so users see everything wrong at once.
 * @module
 */
import { DLPackError, shown } from "./errors.ts";
import { type DType, isDType } from "./dtypes.ts";
import { deviceCode, type DeviceType, formatDevice } from "./devices.ts";
import type { BufferView } from "./view.ts";

/** What a caller needs of a view. Every field is optional. */
export interface Requirements {
  /** One dtype, or any of several. */
  readonly dtype?: DType | readonly DType[];
  /** Extents; `null` accepts any extent in that dimension. Implies the rank. */
  readonly shape?: readonly (number | null)[];
  /** Number of dimensions. */
  readonly ndim?: number;
  /** Element count. */
  readonly size?: number;
  /** "C" row-major, "F" column-major, "any" either (no gaps). */
  readonly contiguous?: "C" | "F" | "any";
  /** Byte alignment of element 0's address (a power of two). */
  readonly alignment?: number;
  /** Device type, and id when given. */
  readonly device?: { readonly type: DeviceType; readonly id?: number };
  /** The view may be written (`access` is "readwrite"). */
  readonly writable?: boolean;
}

function shapeText(shape: readonly (number | null)[]): string {
  return `[${shape.map((e) => (e === null ? "*" : String(e))).join(", ")}]`;
}

function layoutText(view: BufferView): string {
  if (view.cContiguous && view.fContiguous) return "C and F";
  if (view.cContiguous) return "C";
  if (view.fContiguous) return "F";
  return "non-contiguous";
}

/** The largest power of two dividing the address (capped at 2^20; NULL counts as aligned). */
function alignmentOf(address: bigint): number {
  if (address === 0n) return 1 << 20;
  let alignment = 1;
  while (alignment < 1 << 20 && (address & BigInt(alignment * 2 - 1)) === 0n) alignment *= 2;
  return alignment;
}

function checkRequirements(req: Requirements): void {
  const bad = (what: string) => {
    throw new DLPackError("requirements", `invalid requirement: ${what}`);
  };
  if (req === null || typeof req !== "object" || Array.isArray(req)) {
    bad(`requirements must be an object such as { dtype: "float32" }, got ${shown(req)}`);
  }
  if (req.alignment !== undefined) {
    const a = req.alignment;
    if (typeof a !== "number" || !Number.isInteger(a) || a <= 0 || (a & (a - 1)) !== 0 || a > 1 << 20) {
      bad(`alignment must be a power of two up to 2^20, got ${shown(a)}`);
    }
  }
  if (req.dtype !== undefined) {
    if (typeof req.dtype !== "string" && !Array.isArray(req.dtype)) {
      bad(`dtype must be a dtype name or an array of them, got ${shown(req.dtype)}`);
    }
    for (const d of typeof req.dtype === "string" ? [req.dtype] : req.dtype) {
      if (!isDType(d)) bad(`unknown dtype ${typeof d === "string" ? JSON.stringify(d) : shown(d)}`);
    }
  }
  if (req.shape !== undefined) {
    if (!Array.isArray(req.shape)) bad(`shape must be an array of extents or null, got ${shown(req.shape)}`);
    for (const e of req.shape) {
      if (e !== null && (typeof e !== "number" || !Number.isSafeInteger(e) || e < 0)) {
        bad(`shape extents must be non-negative integers or null, got ${shown(e)}`);
      }
    }
  }
  for (const field of ["ndim", "size"] as const) {
    const v = req[field];
    if (v !== undefined && (typeof v !== "number" || !Number.isSafeInteger(v) || v < 0)) {
      bad(`${field} must be a non-negative integer, got ${shown(v)}`);
    }
  }
  if (req.contiguous !== undefined && !["C", "F", "any"].includes(req.contiguous)) {
    bad(`contiguous must be "C", "F" or "any", got ${shown(req.contiguous)}`);
  }
  if (req.device !== undefined) {
    const d = req.device;
    if (d === null || typeof d !== "object") bad(`device must be { type, id? }, got ${shown(d)}`);
    deviceCode(d.type); // throws "device" for an unknown type
    if (d.id !== undefined && (typeof d.id !== "number" || !Number.isInteger(d.id) || d.id < 0)) {
      bad(`device id must be a non-negative integer, got ${shown(d.id)}`);
    }
  }
  if (req.writable !== undefined && typeof req.writable !== "boolean") {
    bad(`writable must be true or false, got ${shown(req.writable)}`);
  }
}

/** The refusal messages for `view` against `req` (empty when everything holds). */
export function requirementRefusals(view: BufferView, req: Requirements): string[] {
  checkRequirements(req);
  const out: string[] = [];
  if (req.dtype !== undefined) {
    const allowed = typeof req.dtype === "string" ? [req.dtype] : req.dtype;
    if (!allowed.includes(view.dtype)) out.push(`dtype: required ${allowed.join(" or ")}, got ${view.dtype}`);
  }
  const ndim = req.ndim ?? req.shape?.length;
  if (ndim !== undefined && view.ndim !== ndim) out.push(`ndim: required ${ndim}, got ${view.ndim}`);
  if (req.shape !== undefined) {
    const shape = view.shape;
    const fits = shape.length === req.shape.length && req.shape.every((e, d) => e === null || e === shape[d]);
    if (!fits) out.push(`shape: required ${shapeText(req.shape)}, got ${shapeText(shape)}`);
  }
  if (req.size !== undefined && view.size !== req.size) out.push(`size: required ${req.size}, got ${view.size}`);
  if (req.contiguous !== undefined) {
    const ok = req.contiguous === "C"
      ? view.cContiguous
      : req.contiguous === "F"
      ? view.fContiguous
      : view.cContiguous || view.fContiguous;
    const wanted = req.contiguous === "any" ? "C or F" : req.contiguous;
    if (!ok) out.push(`contiguous: required ${wanted}, got ${layoutText(view)}`);
  }
  if (req.alignment !== undefined) {
    const alignment = alignmentOf(view.address);
    if (alignment < req.alignment) out.push(`alignment: required ${req.alignment}, got ${alignment}`);
  }
  if (req.device !== undefined) {
    const d = view.device;
    if (d.type !== req.device.type || (req.device.id !== undefined && d.id !== req.device.id)) {
      out.push(`device: required ${formatDevice(req.device)}, got ${formatDevice(d)}`);
    }
  }
  if (req.writable !== undefined && view.writable !== req.writable) {
    out.push(`writable: required ${req.writable}, got ${view.writable}`);
  }
  return out;
}
