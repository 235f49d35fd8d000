/**
 * Brands of the classes a lower layer must recognise without importing them: a private field,
 * checked with `in`, which no prototype, Proxy or getter of a caller's can fake or run during.
 * @module
 */

let pythonBranded: (x: object) => boolean;

/** The base of the Python bridge's `PyObject`: the import functions tell a Python object apart
 * (it is imported with `fromPython`, not `importDLPack`) without depending on the bridge. */
export class PythonObjectBrand {
  #python = true;
  static {
    pythonBranded = (x) => #python in x;
  }
}

/** Whether `x` is a `PyObject` of the Python bridge. */
export function isPythonObject(x: unknown): boolean {
  return typeof x === "object" && x !== null && pythonBranded(x);
}
