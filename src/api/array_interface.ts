/**
 * `fromArrayInterface`: the fields of numpy's `__array_interface__` / `__cuda_array_interface__`
 * (byte strides, typestr) turned into a view, through the same native validation as DLPack
 * imports: the fields become a managed tensor whose deleter releases `keepAlive`.
 * @module
 */
import { core } from "../../ffi/mod.ts";
import { checkDeviceId, DLPackError, shown } from "../facts/errors.ts";
import { type DType, type DTypeInfo, dtypeInfo, NUMPY_TYPE_CODES } from "../facts/dtypes.ts";
import { deviceCode, type DeviceType } from "../facts/devices.ts";
import { I32, scratch, U32 } from "../native/scratch.ts";
import { refusalError } from "../native/refusals.ts";
import { checkShape, checkStrides, cStrides } from "../facts/layout.ts";
import { type AddressLike, toAddress } from "../native/address.ts";
import { releaseDeferred, releaseTop } from "../native/journal.ts";
import { pin } from "../native/pins.ts";
import { importJournaled } from "./import.ts";
import { EXPORT_ADOPT_OWNER, EXPORT_VERSIONED } from "../engines/exports.ts";
import type { BufferView } from "../view/view.ts";
import { callWith, isArray } from "../facts/intrinsics.ts";

/** The fields of an array interface (version 3). */
export interface ArrayInterface {
  /** `[address, readonly]`. */
  readonly data: readonly [AddressLike, boolean];
  /** Extents. */
  readonly shape: readonly number[];
  /** Strides in BYTES, or null/absent for C order. */
  readonly strides?: readonly number[] | null | undefined;
  /** Element type such as "<f4", "|u1", "<c8". */
  readonly typestr: string;
  /** The interface version (2 or 3). */
  readonly version?: number | undefined;
  /** numpy's masked arrays are not supported; a non-null mask is refused. */
  readonly mask?: unknown;
  /** Where the memory lives (default the CPU; `__cuda_array_interface__` memory is on CUDA). */
  readonly device?: { readonly type: DeviceType; readonly id?: number | undefined } | undefined;
  /** The producer's stream (CUDA array interface); recorded, not synchronised here. */
  readonly stream?: number | null | undefined;
}

const LITTLE_ENDIAN = new Uint8Array(new Uint16Array([1]).buffer)[0] === 1;

const KINDS = NUMPY_TYPE_CODES;

/** The dtype of an array-interface typestr; refuses non-native byte order and unsupported kinds. */
export function parseTypestr(typestr: unknown): DType {
  const m = typeof typestr === "string" ? /^([<>|=])([a-zA-Z])(\d+)$/.exec(typestr) : null;
  if (m === null) throw new DLPackError("dtype", `typestr must look like "<f4", got ${shown(typestr)}`);
  // Three groups, none optional: each matched.
  const order = m[1]!;
  const kind = m[2]!;
  const size = m[3]!;
  const dtype = KINDS[kind + size];
  if (dtype === undefined) {
    throw new DLPackError("dtype", `typestr ${typestr} (kind ${kind}, ${size} bytes) has no DLPack dtype`);
  }
  const native = order === "=" || order === "|" || (order === "<") === LITTLE_ENDIAN;
  if (!native && size !== "1") {
    throw new DLPackError("dtype", `typestr ${typestr} is in non-native byte order; byteswap it first`);
  }
  return dtype;
}

/**
 * Imports the fields of an `__array_interface__` / `__cuda_array_interface__` as a view. Byte
 * strides must divide by the item size. `keepAlive` stays reachable until the view and every
 * export of it are released; then its `[Symbol.dispose]()` / `dispose()` / `release()` is called.
 * Like a DLPack producer, `keepAlive` is released right away when the fields are refused.
 */
export function fromArrayInterface(iface: ArrayInterface, keepAlive?: unknown): BufferView {
  return importArrayInterface(iface, keepAlive, null);
}

/** `fromArrayInterface` recording the producer's name (the Python bridge knows it). */
export function importArrayInterface(iface: ArrayInterface, keepAlive: unknown, producer: string | null): BufferView {
  releaseDeferred();
  let fields: Fields;
  let owner = 0;
  try {
    fields = checkFields(iface);
    owner = keepAlive === undefined ? 0 : pin(keepAlive, 0, () => releaseKeepAlive(keepAlive));
  } catch (error) {
    // Nothing holds keepAlive yet (a pin() that throws recorded nothing to release it).
    if (keepAlive !== undefined) releaseKeepAlive(keepAlive);
    throw error;
  }
  // From here on the pin owns keepAlive, and is released exactly once: it is journaled (by pin())
  // until the native export adopts it into a struct (which journals the struct instead), and the
  // struct's deleter releases it once the import took or refused the struct. An exception in
  // between leaves what is journaled to be released.
  const s = scratch;
  s.setAddress(fields.address);
  s.setOwner(owner);
  s.setLayout(fields.shape, fields.strides);
  s.i32[I32.deviceType] = fields.deviceType;
  s.i32[I32.deviceId] = fields.deviceId;
  s.u32[U32.code] = fields.info.dl.code;
  s.u32[U32.bits] = fields.info.dl.bits;
  s.u32[U32.flags] = fields.readonly ? 1 : 0;
  const status = core().dlpk_export(EXPORT_VERSIONED | EXPORT_ADOPT_OWNER, s.at);
  if (status !== 0) {
    const error = refusalError(status, s, null);
    if (owner !== 0) releaseTop(owner); // the pin, never adopted: keepAlive is released now
    throw error;
  }
  // A refusal from here on releases the pin through the struct's deleter.
  return importJournaled(s.u32[U32.addressHi] * 0x1_0000_0000 + s.u32[U32.addressLo], producer, keepAlive);
}

interface Fields {
  address: number;
  readonly: boolean;
  info: DTypeInfo;
  shape: number[];
  strides: number[];
  deviceType: number;
  deviceId: number;
}

/** Reads each field of the interface once, checks it, and copies it. */
function checkFields(iface: ArrayInterface): Fields {
  if (iface === null || typeof iface !== "object") {
    throw new DLPackError("null_data", `fromArrayInterface needs the interface's fields, got ${shown(iface)}`);
  }
  const version: unknown = iface.version;
  const mask: unknown = iface.mask;
  const data: unknown = iface.data;
  const typestr: unknown = iface.typestr;
  const shapeField: unknown = iface.shape;
  const stridesField: unknown = iface.strides;
  const deviceField: unknown = iface.device;
  if (version !== undefined && version !== 2 && version !== 3) {
    const text = typeof version === "number" ? `${version}` : shown(version);
    throw new DLPackError("version", `array interface version ${text} is not supported (2 or 3)`);
  }
  if (mask !== undefined && mask !== null) {
    throw new DLPackError("null_data", "masked arrays (mask) are not supported");
  }
  if (!isArray(data)) throw new DLPackError("null_data", `data must be [address, readonly], got ${shown(data)}`);
  const dataLength: unknown = data.length;
  if (dataLength !== 2) throw new DLPackError("null_data", `data must be [address, readonly], got ${shown(data)}`);
  const first: unknown = data[0];
  const second: unknown = data[1];
  const address = toAddress(first, "data[0]");
  const readonly = !!second;
  const dtype = parseTypestr(typestr);
  const info = dtypeInfo(dtype);
  const itemsize = info.bits / 8;
  const shape = checkShape(shapeField);
  let strides: number[];
  if (stridesField === undefined || stridesField === null) strides = cStrides(shape);
  else {
    strides = checkStrides(stridesField, shape.length, "byte strides");
    for (let d = 0; d < strides.length; d++) {
      const stride = strides[d]!;
      if (stride % itemsize !== 0) {
        throw new DLPackError(
          "strides",
          `byte stride ${stride} of dimension ${d} is not a multiple of the ${itemsize}-byte item size`,
        );
      }
      strides[d] = stride / itemsize;
    }
  }
  let deviceType = 1;
  let deviceId = 0;
  if (deviceField !== undefined) {
    if (deviceField === null || typeof deviceField !== "object") {
      throw new DLPackError("device", `device must be { type, id? }, got ${shown(deviceField)}`);
    }
    const type: unknown = (deviceField as { type?: unknown }).type;
    const id: unknown = (deviceField as { id?: unknown }).id;
    deviceType = deviceCode(type as DeviceType);
    deviceId = id === undefined ? 0 : checkDeviceId(id);
  }
  return { address, readonly, info, shape, strides, deviceType, deviceId };
}

/** Calls keepAlive's `[Symbol.dispose]`, `dispose` or `release`, the first that is a function
 * (each read once). */
function releaseKeepAlive(value: unknown): void {
  if (value === null || (typeof value !== "object" && typeof value !== "function")) return;
  const v = value as Record<PropertyKey, unknown>;
  for (let i = 0; i < RELEASE_METHODS.length; i++) {
    const method = v[RELEASE_METHODS[i]!];
    if (typeof method === "function") {
      callWith(method as () => void, value, undefined);
      return;
    }
  }
}

const RELEASE_METHODS: readonly PropertyKey[] = [Symbol.dispose, "dispose", "release"];
