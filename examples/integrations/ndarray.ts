/**
 * scijs `ndarray` over a view, no copy: `ndarray(view.array(), view.shape, view.strides,
 * view.spanOffset)`. `array()` spans every element of the view from the lowest address to the
 * highest, `strides` are in elements, and `spanOffset` is where element 0 sits in that array, so
 * negative strides (reversed axes) work as they are. The ndarray reads and writes the view's memory
 * and, like `array()`, is empty once the view is disposed. Not for complex dtypes (interleaved
 * parts), bfloat16 (raw bits) or the sub-byte floats (packed codes): ndarray indexes plain elements.
 *
 * ```sh
 * tools/npm.sh
 * deno run --allow-ffi --allow-read --allow-env examples/integrations/ndarray.ts
 * bun run examples/integrations/ndarray.ts
 * ```
 * @module
 */
import { type BufferView, exportDLPack, importDLPack } from "../../mod.ts";
import { loadPackage } from "./packages.ts";

/** A scijs ndarray (the part this example uses). */
export interface NdArray {
  readonly shape: number[];
  readonly stride: number[];
  readonly offset: number;
  get(...index: number[]): number;
  set(...indexThenValue: number[]): number;
}
/** The `ndarray` constructor. */
export type NdArrayFn = (data: ArrayLike<number>, shape: number[], stride: number[], offset: number) => NdArray;

/** The ndarray over `view`'s memory. */
export function toNdarray(ndarray: NdArrayFn, view: BufferView): NdArray {
  if (view.dl.code === 5 || view.dtype === "bfloat16" || view.dl.code >= 7) {
    throw new Error(`ndarray indexes plain elements; ${view.dtype} is not one`);
  }
  return ndarray(view.array() as unknown as ArrayLike<number>, [...view.shape], [...view.strides], view.spanOffset);
}

if (import.meta.main) {
  const loaded = loadPackage<NdArrayFn>("ndarray");
  if ("missing" in loaded) throw new Error(loaded.missing);
  // Rows reversed: element (0, j) is data[3 + j], strides [-3, 1], element 0 three elements in.
  const data = Float32Array.from([0, 1, 2, 3, 4, 5]);
  using view = importDLPack(exportDLPack(data, { shape: [2, 3], strides: [-3, 1], offset: 3 }));
  const nd = toNdarray(loaded.module, view);
  console.log(view);
  console.log(`nd.get(0, 0) = ${nd.get(0, 0)}, nd.get(1, 2) = ${nd.get(1, 2)}`);
  nd.set(0, 1, 42); // (0, 1) is data[4]
  console.log(`after nd.set(0, 1, 42): data = [${data.join(", ")}]`);
  if (nd.get(0, 0) !== 3 || data[4] !== 42) throw new Error("ndarray example failed");
}
