/**
 * `fromArrayInterface`: the fields of numpy's `__array_interface__` / `__cuda_array_interface__`
 * (byte strides, typestr) turned into a view, through the same native validation as DLPack
 * imports: the fields become a managed tensor whose deleter releases `keepAlive`.
 * @module
 */
import { core } from "../ffi/mod.ts";
import { checkDeviceId, DLPackError, shown } from "./errors.ts";
import { type DType, type DTypeInfo, dtypeInfo } from "./dtypes.ts";
import { deviceCode, type DeviceType } from "./devices.ts";
import { I32, refusalError, scratch, U32 } from "./description.ts";
import { checkShape, cStrides } from "./layout.ts";
import { type AddressLike, toAddress } from "./address.ts";
import { pin } from "./owner.ts";
import { importManaged } from "./import.ts";
import { EXPORT_ADOPT_OWNER, EXPORT_VERSIONED } from "./export.ts";
import type { BufferView } from "./view.ts";

/** The fields of an array interface (version 3). */
export interface ArrayInterface {
  /** `[address, readonly]`. */
  readonly data: readonly [AddressLike, boolean];
  /** Extents. */
  readonly shape: readonly number[];
  /** Strides in BYTES, or null/absent for C order. */
  readonly strides?: readonly number[] | null;
  /** Element type such as "<f4", "|u1", "<c8". */
  readonly typestr: string;
  /** The interface version (2 or 3). */
  readonly version?: number;
  /** numpy's masked arrays are not supported; a non-null mask is refused. */
  readonly mask?: unknown;
  /** Where the memory lives (default the CPU; `__cuda_array_interface__` memory is on CUDA). */
  readonly device?: { readonly type: DeviceType; readonly id?: number };
  /** The producer's stream (CUDA array interface); recorded, not synchronised here. */
  readonly stream?: number | null;
}

const LITTLE_ENDIAN = new Uint8Array(new Uint16Array([1]).buffer)[0] === 1;

const KINDS: Readonly<Record<string, DType>> = {
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
};

/** The dtype of an array-interface typestr; refuses non-native byte order and unsupported kinds. */
export function parseTypestr(typestr: unknown): DType {
  const m = typeof typestr === "string" ? /^([<>|=])([a-zA-Z])(\d+)$/.exec(typestr) : null;
  if (m === null) throw new DLPackError("dtype", `typestr must look like "<f4", got ${JSON.stringify(typestr)}`);
  const [, order, kind, size] = m;
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
  let fields: Fields;
  try {
    fields = checkFields(iface);
  } catch (error) {
    if (keepAlive !== undefined) releaseKeepAlive(keepAlive);
    throw error;
  }
  const { address, readonly, info, shape, strides, deviceType, deviceId } = fields;
  const s = scratch;
  const release = keepAlive === undefined ? undefined : () => releaseKeepAlive(keepAlive);
  const owner = keepAlive === undefined ? 0 : pin(keepAlive, 0, release);
  s.setAddress(address);
  s.setOwner(owner);
  s.setLayout(shape, strides);
  s.i32[I32.deviceType] = deviceType;
  s.i32[I32.deviceId] = deviceId;
  s.u32[U32.code] = info.dl.code;
  s.u32[U32.bits] = info.dl.bits;
  s.u32[U32.flags] = readonly ? 1 : 0;
  // Versioned (to carry READ_ONLY), adopting the pin's reference.
  const status = core().dlpk_export(EXPORT_VERSIONED | EXPORT_ADOPT_OWNER, s.at);
  if (status !== 0) {
    if (owner !== 0) core().dlpk_owner_release(owner);
    throw refusalError(status, s, false);
  }
  // From here on the struct's deleter owns keepAlive: a refusal releases it through the pin.
  return importManaged(s.address(), true, false, producer, keepAlive);
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

function checkFields(iface: ArrayInterface): Fields {
  if (iface === null || typeof iface !== "object") {
    throw new DLPackError("null_data", "fromArrayInterface needs the interface's fields");
  }
  if (iface.version !== undefined && iface.version !== 2 && iface.version !== 3) {
    throw new DLPackError("version", `array interface version ${iface.version} is not supported (2 or 3)`);
  }
  if (iface.mask !== undefined && iface.mask !== null) {
    throw new DLPackError("null_data", "masked arrays (mask) are not supported");
  }
  if (!Array.isArray(iface.data) || iface.data.length !== 2) {
    throw new DLPackError("null_data", "data must be [address, readonly]");
  }
  const address = toAddress(iface.data[0], "data[0]");
  if (typeof address === "bigint") throw new DLPackError("overflow", `data address ${address} is beyond 2^53`);
  const readonly = Boolean(iface.data[1]);
  const dtype = parseTypestr(iface.typestr);
  const info = dtypeInfo(dtype);
  const itemsize = info.bits / 8;
  const shape = checkShape(iface.shape);
  let strides: number[];
  if (iface.strides === undefined || iface.strides === null) strides = cStrides(shape);
  else {
    if (!Array.isArray(iface.strides) || iface.strides.length !== shape.length) {
      throw new DLPackError("strides", `strides must list ${shape.length} byte strides`);
    }
    strides = iface.strides.map((bytes, d) => {
      if (!Number.isSafeInteger(bytes) || bytes % itemsize !== 0) {
        throw new DLPackError(
          "strides",
          `byte stride ${bytes} of dimension ${d} is not a multiple of the ${itemsize}-byte item size`,
        );
      }
      return bytes / itemsize;
    });
  }
  const device = iface.device ?? { type: "cpu" as const, id: 0 };
  if (device === null || typeof device !== "object") {
    throw new DLPackError("device", `device must be { type, id? }, got ${shown(device)}`);
  }
  const deviceType = deviceCode(device.type);
  const deviceId = device.id === undefined ? 0 : checkDeviceId(device.id);
  return { address, readonly, info, shape, strides, deviceType, deviceId };
}

function releaseKeepAlive(value: unknown): void {
  const v = value as { dispose?: () => void; release?: () => void; [Symbol.dispose]?: () => void };
  if (typeof v?.[Symbol.dispose] === "function") v[Symbol.dispose]!();
  else if (typeof v?.dispose === "function") v.dispose();
  else if (typeof v?.release === "function") v.release();
}
