/**
 * Apache Arrow JS and pyarrow/numpy over one buffer: a numeric Arrow column (a JS `Vector` of one
 * chunk, no nulls) is a view and a numpy array without a copy, pyarrow wraps that numpy memory as a
 * `pyarrow.Array` without a copy, and a pyarrow array comes back through DLPack as a view and an
 * Arrow JS vector over pyarrow's buffer. DLPack has no validity bitmap: columns with nulls are not
 * exchanged this way (pyarrow's `__dlpack__` refuses them). A vector over a view's `array()` reads
 * through that view: it is empty (length 0 buffer) once the view is disposed.
 *
 * ```sh
 * tools/npm.sh && export PYTHONPATH=$(tools/python.sh)
 * deno run --allow-ffi --allow-read --allow-env --allow-run examples/integrations/arrow.ts
 * bun run examples/integrations/arrow.ts
 * ```
 * @module
 */
import { type BufferView, exportDLPack, importDLPack } from "../../mod.ts";
import { fromPython, openPython, type Python, toPython } from "../../python.ts";
import { loadPackage } from "./packages.ts";

/** The part of `apache-arrow`'s API this example uses. */
export interface Arrow {
  makeVector(values: Float64Array): ArrowVector;
}
/** An Arrow JS `Vector`. */
export interface ArrowVector {
  readonly length: number;
  readonly nullCount: number;
  readonly data: readonly { readonly values: Float64Array }[];
  get(i: number): number | null;
  toArray(): Float64Array;
}

/** The one buffer of a numeric column without nulls. */
function columnBuffer(column: ArrowVector): Float64Array {
  const chunk = column.data[0];
  if (column.data.length !== 1 || chunk === undefined || column.nullCount !== 0) {
    throw new Error("one chunk without nulls is one buffer; concatenate or fill nulls first");
  }
  return chunk.values;
}

/** The one buffer of a numeric column without nulls, as a view (no copy). */
export function columnView(column: ArrowVector): BufferView {
  return importDLPack(exportDLPack(columnBuffer(column)));
}

/** What the example saw. */
export interface ArrowResult {
  /** numpy's array from the Arrow column has the column buffer's address. */
  readonly numpyZeroCopy: boolean;
  /** pyarrow's array built from that numpy array has the same address. */
  readonly pyarrowZeroCopy: boolean;
  /** A write through the Arrow column is seen by pyarrow. */
  readonly sharedWrite: boolean;
  /** The Arrow JS vector made from a pyarrow array reads pyarrow's buffer (same address). */
  readonly backZeroCopy: boolean;
  /** Its values. */
  readonly back: number[];
}

/** Arrow JS -> view -> numpy -> pyarrow, then pyarrow -> view -> Arrow JS. */
export function arrowRoundTrip(arrow: Arrow, py: Python): ArrowResult {
  py.exec("import numpy as np\nimport pyarrow as pa");
  const column = arrow.makeVector(Float64Array.from([1.5, 2.5, 3.5, 4.5]));
  using view = columnView(column);
  const values = columnBuffer(column);
  using tensor = toPython(values, py);
  py.set("t", tensor);
  py.exec(
    "n = np.from_dlpack(t)\n" +
      "p = pa.Array.from_buffers(pa.float64(), len(n), [None, pa.py_buffer(n)])",
  );
  const address = (expr: string) => BigInt(py.eval(expr).toJS() as number);
  const numpyZeroCopy = address("n.ctypes.data") === view.address;
  const pyarrowZeroCopy = address("p.buffers()[1].address") === view.address;
  values[0] = 10;
  const sharedWrite = py.eval("p[0].as_py()").toJS() === 10;

  py.exec("q = pa.array([0.25, 0.5, 0.75])");
  using back = fromPython(py.eval("q"));
  const vector = arrow.makeVector(back.array() as Float64Array);
  const backZeroCopy = back.address === address("q.buffers()[1].address") &&
    columnBuffer(vector).buffer === back.array().buffer;
  const backValues = [...vector.toArray()];
  py.exec("del n, p, t, q");
  return { numpyZeroCopy, pyarrowZeroCopy, sharedWrite, backZeroCopy, back: backValues };
}

if (import.meta.main) {
  const loaded = loadPackage<Arrow>("apache-arrow");
  if ("missing" in loaded) throw new Error(loaded.missing);
  const result = arrowRoundTrip(loaded.module, openPython());
  console.log(result);
  if (!result.numpyZeroCopy || !result.pyarrowZeroCopy || !result.sharedWrite || !result.backZeroCopy) {
    throw new Error("arrow example failed");
  }
}
