/**
 * Device types: DLPack's `DLDeviceType` values <-> names, and which of them the CPU can read.
 * @module
 */
import { DLPackError, shown } from "./errors.ts";
import { freeze, isInteger } from "./intrinsics.ts";
import { DeviceType as DEVICE_TYPES } from "./abi.ts";

/** The device kinds of DLPack 1.3. */
export type DeviceType =
  | "cpu"
  | "cuda"
  | "cudaHost"
  | "opencl"
  | "vulkan"
  | "metal"
  | "vpi"
  | "rocm"
  | "rocmHost"
  | "extDev"
  | "cudaManaged"
  | "oneapi"
  | "webgpu"
  | "hexagon"
  | "maia"
  | "trn";

/** Where a tensor lives. */
export interface Device {
  /** The kind of device. */
  readonly type: DeviceType;
  /** The device ordinal (0 for CPU, pinned and managed memory). */
  readonly id: number;
}

// Prototype-less: "constructor" or "__proto__" finds nothing, and nothing installed on
// Object.prototype is ever found.
const CODES: Readonly<Record<DeviceType, number>> = freeze({
  __proto__: null,
  ...DEVICE_TYPES,
}) as unknown as Record<DeviceType, number>;

const DEVICE_LIST = Object.keys(CODES).join(", ");
/** Names by code: an array of own elements filled at load. */
const NAMES: (DeviceType | undefined)[] = new Array(32).fill(undefined);
for (const name of Object.keys(CODES) as DeviceType[]) NAMES[CODES[name]] = name;

/** The `DLDeviceType` value of a device name. */
export function deviceCode(type: DeviceType): number {
  const code = typeof type === "string" ? CODES[type] : undefined;
  if (code === undefined) {
    throw new DLPackError("device", `unknown device type ${shown(type)}; expected one of ${DEVICE_LIST}`);
  }
  return code;
}

/** The device name of a `DLDeviceType` value, or undefined for values DLPack 1.3 does not define. */
export function deviceName(code: number): DeviceType | undefined {
  return isInteger(code) && code >= 0 && code < 32 ? NAMES[code] : undefined;
}

/** Whether the CPU can dereference memory of this device (host, pinned and managed memory). */
export function isHostAccessible(type: DeviceType): boolean {
  return type === "cpu" || type === "cudaHost" || type === "cudaManaged" || type === "rocmHost";
}

/** `cpu:0`, `cuda:1`: the form requirement messages and errors use. */
export function formatDevice(device: { readonly type: DeviceType; readonly id?: number | undefined }): string {
  if (device === null || typeof device !== "object") {
    throw new DLPackError("argument", `formatDevice takes { type, id? }, got ${shown(device)}`);
  }
  const type: unknown = device.type;
  const id: unknown = device.id;
  const name = typeof type === "string" ? type : shown(type);
  return id === undefined ? name : `${name}:${typeof id === "number" ? id : shown(id)}`;
}

const CPU: Device = freeze({ type: "cpu", id: 0 });
/** Device records by code * 64 + id, for ids below 64 (own slots filled at load). */
const cache: (Device | undefined)[] = new Array(32 * 64).fill(undefined);

/** A frozen, shared device record for (code, id). */
export function deviceOf(code: number, id: number): Device {
  if (code === 1 && id === 0) return CPU;
  // Only ids below 64 are cached: a larger id would alias another device's slot.
  const cacheable = id >= 0 && id < 64 && code >= 0 && code < 32;
  const key = code * 64 + id;
  let found = cacheable ? cache[key] : undefined;
  if (found === undefined) {
    const type = deviceName(code);
    if (type === undefined) throw new DLPackError("device", `unknown DLPack device type ${code}`);
    found = freeze({ type, id });
    if (cacheable) cache[key] = found;
  }
  return found;
}
