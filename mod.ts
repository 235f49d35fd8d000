/**
 * Zero-copy tensor exchange for Deno and Bun through DLPack: import tensors of both DLPack
 * generations as views over the same memory, check them, and release every producer exactly once.
 *
 * ```ts
 * import { exportDLPack, importDLPack, ready, zeros } from "@dlpack-ts/dlpack"; // Bun: "dlpack-ts"
 *
 * await ready(); // loads the native library (Deno by JSR or URL: downloads and verifies it once)
 * using a = zeros([2, 3], "float32");
 * a.fill(1.5);
 * // Any DLPack consumer can take the capsule (numpy, PyTorch, a C library); here the library itself does.
 * using b = importDLPack(exportDLPack(a));
 * console.log(b.dtype, b.shape, b.toNested()); // float32 [2, 3] [[1.5, 1.5, 1.5], [1.5, 1.5, 1.5]]
 * ```
 * @module
 */
export { DLPackError, type ErrorCode } from "./src/facts/errors.ts";
export {
  type AnyTypedArray,
  arrayConstructorOf,
  type ArrayFor,
  type ArrayOf,
  type Complex,
  type DLDataType,
  type DType,
  type DTypeOfArray,
  dtypeOfArray,
  DTYPES,
  fromDLDataType,
  isDType,
  type MiniFloatDType,
  type Scalar,
  type ScalarOf,
  toDLDataType,
  type TypedArrayConstructor,
} from "./src/facts/dtypes.ts";
export {
  type Device,
  deviceCode,
  deviceName,
  type DeviceType,
  formatDevice,
  isHostAccessible,
} from "./src/facts/devices.ts";
export { type AddressLike, type PointerObject } from "./src/native/address.ts";
export {
  type Access,
  type AstypeOptions,
  BufferView,
  type CopyFromOptions,
  type DLPackVersion,
  type Flags,
  type ItemOf,
  type RequiredView,
  type TypedView,
} from "./src/view/view.ts";
export {
  type BuildTuple,
  type Minus,
  type Nested,
  type Plus1,
  type SliceDrop,
  type SliceRank,
  type Tuple,
} from "./src/view/types.ts";
export { type ViewJSON } from "./src/engines/inspect.ts";
export { type Range, type SliceItem } from "./src/facts/shape.ts";
export { fromArray, type FromArrayOptions } from "./src/api/from_array.ts";
export { Owner } from "./src/native/shares.ts";
export { type RequiredDType, type RequiredNdim, type Requirements } from "./src/engines/requirements.ts";
export {
  type DLPackProvider,
  type DLPackSource,
  fromDLPack,
  importDLPack,
  type ImportOptions,
  type ManagedAddress,
} from "./src/api/import.ts";
export { Capsule } from "./src/native/capsule.ts";
export {
  type DLPackProtocolOptions,
  type Exportable,
  exportDLPack,
  exportDLPackLegacy,
  type ExportOptions,
  share,
  toDLPack,
} from "./src/api/export.ts";
export { type AllocOptions, DEFAULT_ALIGNMENT, empty, zeros } from "./src/api/alloc.ts";
export { arange, asarray, concat, emptyLike, full, ones, onesLike, stack, zerosLike } from "./src/api/create.ts";
export { type ArrayInterface, fromArrayInterface } from "./src/api/array_interface.ts";
export { type Stats, stats } from "./src/native/stats.ts";
export { MAX_RANK } from "./src/native/scratch.ts";
export { ready, useLibrary } from "./ffi/mod.ts";
