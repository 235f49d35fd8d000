/**
 * Device types: DLPack's `DLDeviceType` values <-> names, and which of them the CPU can read.
 * @module
 */
import { DLPackError } from "./errors.ts";

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

const CODES: Readonly<Record<DeviceType, number>> = {
  cpu: 1,
  cuda: 2,
  cudaHost: 3,
  opencl: 4,
  vulkan: 7,
  metal: 8,
  vpi: 9,
  rocm: 10,
  rocmHost: 11,
  extDev: 12,
  cudaManaged: 13,
  oneapi: 14,
  webgpu: 15,
  hexagon: 16,
  maia: 17,
  trn: 18,
};

const NAMES = new Map<number, DeviceType>(Object.entries(CODES).map(([name, code]) => [code, name as DeviceType]));
const HOST_ACCESSIBLE = new Set<DeviceType>(["cpu", "cudaHost", "cudaManaged", "rocmHost"]);

/** The `DLDeviceType` value of a device name. */
export function deviceCode(type: DeviceType): number {
  // Own keys only: "constructor" or "__proto__" must not resolve through Object.prototype.
  const code = typeof type === "string" && Object.hasOwn(CODES, type) ? CODES[type] : undefined;
  if (code === undefined) {
    throw new DLPackError(
      "device",
      `unknown device type ${JSON.stringify(type)}; expected one of ${Object.keys(CODES).join(", ")}`,
    );
  }
  return code;
}

/** The device name of a `DLDeviceType` value, or undefined for values DLPack 1.3 does not define. */
export function deviceName(code: number): DeviceType | undefined {
  return NAMES.get(code);
}

/** Whether the CPU can dereference memory of this device (host, pinned and managed memory). */
export function isHostAccessible(type: DeviceType): boolean {
  return HOST_ACCESSIBLE.has(type);
}

/** `cpu:0`, `cuda:1`: the form requirement messages and errors use. */
export function formatDevice(device: { type: DeviceType; id?: number }): string {
  return device.id === undefined ? device.type : `${device.type}:${device.id}`;
}

const CPU: Device = Object.freeze({ type: "cpu", id: 0 });
const cache = new Map<number, Device>([[1 * 65536, CPU]]);

/** A frozen, shared device record for (code, id). */
export function deviceOf(code: number, id: number): Device {
  if (code === 1 && id === 0) return CPU;
  const key = code * 65536 + id;
  let found = cache.get(key);
  if (found === undefined) {
    const type = deviceName(code);
    if (type === undefined) throw new DLPackError("device", `unknown DLPack device type ${code}`);
    found = Object.freeze({ type, id });
    if (id < 65536) cache.set(key, found);
  }
  return found;
}
