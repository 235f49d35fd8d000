/**
 * `fromArrayInterface`: the fields of numpy's `__array_interface__` / `__cuda_array_interface__`
 * (byte strides, typestr) turned into a view, through the same native validation as DLPack
 * imports: the fields become a managed tensor whose deleter releases `keepAlive`.
 * @module
 */
import { core } from "../../ffi/mod.ts";
import { checkDeviceId, DLPackError, shown } from "../facts/errors.ts";
import { type DType, type DTypeInfo, dtypeInfo } from "../facts/dtypes.ts";
import { deviceCode, type DeviceType } from "../facts/devices.ts";
import { I32, refusalError, scratch, U32 } from "../native/description.ts";
import { checkShape, checkStrides, cStrides } from "../facts/layout.ts";
import { type AddressLike, toAddress } from "../native/address.ts";
import {
  deferredCount,
  deferredNumbers,
  deferredObjectCount,
  deferredObjects,
  pin,
  releaseDeferred,
  retryQuietly,
} from "../native/owner.ts";
import { importCapsule } from "./import.ts";
import { EXPORT_ADOPT_OWNER, EXPORT_VERSIONED } from "./export.ts";
import type { BufferView } from "../view/view.ts";
import { Capsule } from "../native/capsule.ts";
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

// Prototype-less: only these keys are found.
const KINDS: Readonly<Record<string, DType | undefined>> = {
  __proto__: null,
  b1: "bool",
  i1: "int8",
  i2: "int16",
  i4: "int32",
  i8: "int64",
  u1: "uint8",
  u2: "uint16",
  u4: "uint32",
  u8: "uint64",
  f2: "float16",
  f4: "float32",
  f8: "float64",
  c8: "complex64",
  c16: "complex128",
} as unknown as Record<string, DType | undefined>;

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
    // Nothing holds keepAlive yet (pin() gives back what it made when it throws).
    if (keepAlive !== undefined) releaseKeepAlive(keepAlive);
    throw error;
  }
  // From here on the pin owns keepAlive, and whatever throws releases the pin exactly once: the
  // native export adopts it into a struct, the struct's deleter releases it, and the struct is
  // held by a capsule until the import takes it. One frame, so the catch knows which holds it.
  let adopted = false;
  let address = 0;
  let capsule: Capsule | undefined;
  try {
    const s = scratch;
    s.setAddress(fields.address);
    s.setOwner(owner);
    s.setLayout(fields.shape, fields.strides);
    s.i32[I32.deviceType] = fields.deviceType;
    s.i32[I32.deviceId] = fields.deviceId;
    s.u32[U32.code] = fields.info.dl.code;
    s.u32[U32.bits] = fields.info.dl.bits;
    s.u32[U32.flags] = fields.readonly ? 1 : 0;
    const lib = core();
    const at = s.at;
    const status = lib.dlpk_export(EXPORT_VERSIONED | EXPORT_ADOPT_OWNER, at);
    adopted = status === 0;
    if (status !== 0) throw refusalError(status, s, null);
    address = s.u32[U32.addressHi] * 0x1_0000_0000 + s.u32[U32.addressLo];
    capsule = new Capsule(address, true);
    // A refusal from here on releases the pin through the struct's deleter.
    return importCapsule(capsule, producer, false, keepAlive);
  } catch (error) {
    // Parked without a call first: the stack may be exhausted here. A capsule the import took is
    // left alone by its disposer.
    if (capsule !== undefined) deferredObjects[deferredObjectCount[0]++] = capsule;
    else if (adopted && address !== 0) deferredNumbers[deferredCount[0]++] = -(address * 2 + 1);
    else if (!adopted && owner !== 0) deferredNumbers[deferredCount[0]++] = owner;
    retryQuietly();
    throw error;
  }
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
