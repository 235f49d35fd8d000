/**
 * Requirement checks on views: every failed check becomes one message of the exact form
 * `"<field>: required <x>, got <y>"`, so users see everything wrong at once.
 * @module
 */
import { DLPackError } from "./errors.ts";
import { type DType, isDType } from "./dtypes.ts";
import { type DeviceType, formatDevice } from "./devices.ts";
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
  if (req.alignment !== undefined) {
    const a = req.alignment;
    if (!Number.isInteger(a) || a <= 0 || (a & (a - 1)) !== 0 || a > 1 << 20) {
      bad(`alignment must be a power of two up to 2^20, got ${a}`);
    }
  }
  if (req.dtype !== undefined) {
    for (const d of typeof req.dtype === "string" ? [req.dtype] : req.dtype) {
      if (!isDType(d)) bad(`unknown dtype ${JSON.stringify(d)}`);
    }
  }
  if (req.shape !== undefined) {
    for (const e of req.shape) {
      if (e !== null && (!Number.isInteger(e) || e < 0)) {
        bad(`shape extents must be non-negative integers or null, got ${e}`);
      }
    }
  }
  for (const field of ["ndim", "size"] as const) {
    const v = req[field];
    if (v !== undefined && (!Number.isInteger(v) || v < 0)) bad(`${field} must be a non-negative integer, got ${v}`);
  }
  if (req.contiguous !== undefined && !["C", "F", "any"].includes(req.contiguous)) {
    bad(`contiguous must be "C", "F" or "any", got ${JSON.stringify(req.contiguous)}`);
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
