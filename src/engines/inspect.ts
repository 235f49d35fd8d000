/**
 * How a view prints: pure functions from a view's facts and an element reader to text, numpy-style
 * (nested brackets per axis, large tensors summarised with "..."), and the metadata `toJSON()`
 * gives. Nothing here touches memory: the caller decides whether values may be read and passes a
 * reader only then.
 * @module
 */
import type { Scalar } from "../facts/dtypes.ts";
import { type Device, formatDevice, isHostAccessible } from "../facts/devices.ts";
import { DLPackError, shown } from "../facts/errors.ts";
import type { Access, ViewFacts } from "./state.ts";
import { abs, floor, freeze, slots } from "../facts/intrinsics.ts";

// Captured at load: printing must not depend on what a caller later puts on Math or Number.prototype.
const fround = Math.fround;
const toPrecision = Number.prototype.toPrecision;
const ReflectApply = Reflect.apply;

/** `Reflect.apply` as found at load. */
export const applyTo: (fn: (...args: never[]) => unknown, thisArg: unknown, args: readonly unknown[]) => unknown =
  ReflectApply;
/** The key Deno's `console.log` looks up on an object to print it. */
export const DENO_INSPECT: unique symbol = Symbol.for("Deno.customInspect") as never;
/** The key Bun's and Node's `console.log` look up on an object to print it. */
export const NODE_INSPECT: unique symbol = Symbol.for("nodejs.util.inspect.custom") as never;

function precise(value: number, digits: number): number {
  return +(ReflectApply(toPrecision, value, [digits]) as string);
}

function repeated(text: string, n: number): string {
  let out = "";
  for (let i = 0; i < n; i++) out += text;
  return out;
}

/** What a printed view shows besides its values. */
export interface InspectFacts {
  readonly dtype: string;
  /** The dtype's storage kind ("int", "float", "bigint", "bool", "bfloat16", "complex", "minifloat"). */
  readonly kind: string;
  /** Bits per element (per complex element: both parts). */
  readonly bits: number;
  readonly shape: readonly number[];
  readonly strides: readonly number[];
  /** `formatDevice` of the view's device ("cpu:0", "cuda:1"). */
  readonly device: string;
  readonly access: string;
  readonly disposed: boolean;
}

/** Why values are not shown; `undefined` when they are. */
type Unread = "disposed" | "device" | { readonly error: string } | undefined;

/** How much of a tensor is printed. */
interface InspectOptions {
  /** Above this many elements, each axis shows only its first and last `edgeItems`. Default 1000 (numpy's). */
  readonly threshold?: number | undefined;
  /** Items kept at each end of a summarised axis. Default 3. */
  readonly edgeItems?: number | undefined;
  /** Rows of the last axis wrap past this width. Default 100. */
  readonly lineWidth?: number | undefined;
}

const THRESHOLD = 1000;
const EDGE_ITEMS = 3;
const LINE_WIDTH = 100;

/** Reads the element at `index` (one integer per axis, within the shape). */
type ElementReader = (index: number[]) => Scalar;

/** The text `console.log(view)` prints: a header line, then the values (or why they are not shown). */
function formatView(
  facts: InspectFacts,
  read: ElementReader | undefined,
  unread: Unread,
  opts?: InspectOptions,
): string {
  const header = `BufferView<${facts.dtype}> shape ${listOf(facts.shape)}, strides ${listOf(facts.strides)}, ` +
    `${facts.device}, ${facts.access}`;
  if (unread === "disposed" || facts.disposed) return `${header}, disposed`;
  if (unread === "device") return `${header}\n(device memory: values are not read; toHost() copies them)`;
  if (unread !== undefined) return `${header}\n(values unavailable: ${unread.error})`;
  if (read === undefined) return header;
  return `${header}\n${formatValues(facts, read, opts)}`;
}

/** The values alone, numpy-style: `[[1, 2, 3],\n [4, 5, 6]]`, summarised above `threshold` elements. */
export function formatValues(facts: InspectFacts, read: ElementReader, opts?: InspectOptions): string {
  const shape = facts.shape;
  const ndim = shape.length;
  let size = 1;
  for (let d = 0; d < ndim; d++) size *= shape[d]!;
  const threshold = opts?.threshold ?? THRESHOLD;
  const edge = opts?.edgeItems ?? EDGE_ITEMS;
  const format = elementFormatter(facts.kind, facts.bits);
  if (ndim === 0) return format(read([]));
  if (size === 0) return `${repeated("[", ndim)}${repeated("]", ndim)}`;
  const summarise = size > threshold;
  // First pass: every shown element as text, in order, and the widest one (columns line up).
  const cells: string[] = [];
  let width = 0;
  const index = slots(ndim);
  // d < ndim throughout.
  const visit = (d: number): void => {
    const kept = keptIndices(shape[d]!, summarise, edge);
    for (let k = 0; k < kept.length; k++) {
      const i = kept[k]!;
      if (i < 0) continue;
      index[d] = i;
      if (d === ndim - 1) {
        const text = format(read(index));
        cells[cells.length] = text;
        if (text.length > width) width = text.length;
      } else visit(d + 1);
    }
  };
  visit(0);
  const layout: Layout = { shape, summarise, edge, width, lineWidth: opts?.lineWidth ?? LINE_WIDTH, cells, next: 0 };
  return nested(layout, 0);
}

interface Layout {
  readonly shape: readonly number[];
  readonly summarise: boolean;
  readonly edge: number;
  readonly width: number;
  readonly lineWidth: number;
  readonly cells: readonly string[];
  next: number;
}

/** The indices shown along an axis of extent `n`; -1 marks the "..." between the two ends. */
export function keptIndices(n: number, summarise: boolean, edge: number): number[] {
  const out: number[] = [];
  if (!summarise || n <= 2 * edge) {
    for (let i = 0; i < n; i++) out[i] = i;
    return out;
  }
  for (let i = 0; i < edge; i++) out[out.length] = i;
  out[out.length] = -1;
  for (let i = n - edge; i < n; i++) out[out.length] = i;
  return out;
}

/** The bracketed block of axis `d` (below the rank), taking its cells from `layout.cells` in order
 * (one per index the first pass kept). */
function nested(layout: Layout, d: number): string {
  const ndim = layout.shape.length;
  const kept = keptIndices(layout.shape[d]!, layout.summarise, layout.edge);
  const indent = repeated(" ", d + 1);
  if (d === ndim - 1) {
    // One row: items padded to a common width, wrapped past lineWidth under the bracket.
    let text = "[";
    let line = d + 1;
    for (let k = 0; k < kept.length; k++) {
      const item = kept[k]! < 0 ? "..." : padded(layout.cells[layout.next++]!, layout.width);
      const sep = k === 0 ? "" : ",";
      if (k > 0 && line + 2 + item.length + 1 > layout.lineWidth) {
        text += `${sep}\n${indent}${item}`;
        line = d + 1 + item.length;
      } else {
        text += k === 0 ? item : `${sep} ${item}`;
        line += (k === 0 ? 0 : 2) + item.length;
      }
    }
    return `${text}]`;
  }
  // Blocks of a higher axis: one line between rows, one more blank line per axis above that.
  const between = `,${repeated("\n", ndim - d - 1)}${indent}`;
  let text = "[";
  for (let k = 0; k < kept.length; k++) {
    if (k > 0) text += between;
    text += kept[k]! < 0 ? "..." : nested(layout, d + 1);
  }
  return `${text}]`;
}

function padded(text: string, width: number): string {
  let out = text;
  for (let i = text.length; i < width; i++) out = ` ${out}`;
  return out;
}

function listOf(values: readonly number[]): string {
  let text = "[";
  for (let i = 0; i < values.length; i++) text += (i === 0 ? "" : ", ") + values[i];
  return `${text}]`;
}

/** How one element of a dtype is written: integers and bigints in full, floats to their type's
 * precision (float32 as the shortest text that reads back to the same float32), complex as `a+bj`. */
export function elementFormatter(kind: string, bits: number): (value: Scalar) => string {
  switch (kind) {
    case "bool":
      return (v) => (v ? "true" : "false");
    case "int":
    case "bigint":
      return (v) => `${v}`;
    case "complex": {
      const part = floatFormatter(bits / 2);
      return (v) => {
        const pair = v as readonly [number, number];
        const imText = part(pair[1]);
        return `${part(pair[0])}${imText[0] === "-" ? "" : "+"}${imText}j`;
      };
    }
    default:
      return floatFormatter(kind === "float" ? bits : 16) as (value: Scalar) => string;
  }
}

/** Floats of `bits` bits as text: float64 as JS writes it, float32 shortest round-trip, smaller
 * formats to the digits they carry (5 significant digits tell every float16 apart). */
function floatFormatter(bits: number): (value: number) => string {
  if (bits >= 64) return (v) => (v === 0 && 1 / v < 0 ? "-0" : `${v}`);
  const digits = bits >= 32 ? 9 : bits >= 16 ? 5 : 3;
  return (v) => {
    if (v !== v || abs(v) === Infinity) return `${v}`;
    if (v === 0) return 1 / v < 0 ? "-0" : "0";
    for (let p = 1; p < digits; p++) {
      const shortened = precise(v, p);
      if (bits >= 32 ? fround(shortened) === v : shortened === v) return `${shortened}`;
    }
    return `${precise(v, digits)}`;
  };
}

/** The metadata `toJSON()` gives for a view. */
export interface ViewJSON {
  /** The dtype name. */
  readonly dtype: string;
  /** Extents per dimension. */
  readonly shape: readonly number[];
  /** Strides in elements. */
  readonly strides: readonly number[];
  /** Where the memory lives. */
  readonly device: { readonly type: string; readonly id: number };
  /** "readwrite", "readonly" or "unknown". */
  readonly access: string;
  /** Number of elements. */
  readonly size: number;
  /** Bytes of the elements. */
  readonly nbytes: number;
  /** Element 0's address in hexadecimal ("0x7f..."). */
  readonly address: string;
  /** "external" for imports, the library's name for its own allocations. */
  readonly owner: string;
  /** The producer's name when known. */
  readonly producer: string | null;
  /** The producer's DLPack version, null for the legacy struct. */
  readonly version: { readonly major: number; readonly minor: number } | null;
  /** Whether `dispose()` ran. */
  readonly disposed: boolean;
}

/** Builds the frozen `toJSON()` object (arrays copied, so the caller may keep it). */
function viewJSON(fields: ViewJSON): ViewJSON {
  const shape: number[] = [];
  for (let i = 0; i < fields.shape.length; i++) shape[i] = fields.shape[i]!;
  const strides: number[] = [];
  for (let i = 0; i < fields.strides.length; i++) strides[i] = fields.strides[i]!;
  return freeze({
    dtype: fields.dtype,
    shape,
    strides,
    device: { type: fields.device.type, id: fields.device.id },
    access: fields.access,
    size: fields.size,
    nbytes: fields.nbytes,
    address: fields.address,
    owner: fields.owner,
    producer: fields.producer,
    version: fields.version === null ? null : { major: fields.version.major, minor: fields.version.minor },
    disposed: fields.disposed,
  });
}

/** `0x` and the address in hexadecimal. */
function hexAddress(address: number): string {
  let digits = "";
  let rest = address;
  if (rest === 0) return "0x0";
  while (rest > 0) {
    digits = "0123456789abcdef"[rest % 16] + digits;
    rest = floor(rest / 16);
  }
  return `0x${digits}`;
}

/** What `console.log(view)` prints for a view of `facts`: its values when it is live and over
 * host memory (read with `read`), else why not (`error`: what checking it could be read threw). */
export function inspectText(
  own: ViewFacts,
  access: Access,
  disposed: boolean,
  error: unknown,
  read: ElementReader,
): string {
  const facts: InspectFacts = {
    dtype: own.info.name,
    kind: own.info.kind,
    bits: own.info.bits,
    shape: own.shape as number[],
    strides: own.strides as number[],
    device: formatDevice(own.device),
    access,
    disposed,
  };
  if (disposed) return formatView(facts, undefined, "disposed");
  if (own.device.type !== "cpu" && !isHostAccessible(own.device.type)) return formatView(facts, undefined, "device");
  if (error !== undefined) return unreadable(facts, error);
  try {
    return formatView(facts, read, undefined);
  } catch (thrown) {
    return unreadable(facts, thrown);
  }
}

function unreadable(facts: InspectFacts, error: unknown): string {
  return formatView(facts, undefined, { error: error instanceof DLPackError ? error.message : shown(error) });
}

/** `JSON.stringify(view)` of a view of `facts`. */
export function jsonOf(facts: ViewFacts, access: Access, address: number, disposed: boolean): ViewJSON {
  const origin = facts.origin;
  const device: Device = facts.device;
  return viewJSON({
    dtype: facts.info.name,
    shape: facts.shape as number[],
    strides: facts.strides as number[],
    device,
    access,
    size: facts.size,
    nbytes: facts.nbytes,
    address: hexAddress(address),
    owner: origin.ownerName,
    producer: origin.producer,
    version: origin.version === null ? null : { major: origin.version.major, minor: origin.version.minor },
    disposed,
  });
}
