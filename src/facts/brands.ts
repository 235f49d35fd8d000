/**
 * Brands of the classes a lower layer must recognise without importing them: a private field,
 * checked with `in`, which no prototype, Proxy or getter of a caller's can fake or run during.
 * @module
 */

/** A constructor that returns its argument: a subclass's private fields land on that object. */
export class Stamp {
  constructor(target: object) {
    return target;
  }
}

let pythonBranded: (x: object) => boolean;

class PythonBrand extends Stamp {
  #python = true;
  static {
    pythonBranded = (x) => #python in x;
  }
}

/** Marks a `PyObject` of the Python bridge (its constructor calls this), so that the import
 * functions tell a Python object apart (it is imported with `fromPython`, not `importDLPack`)
 * without depending on the bridge. */
export function brandPythonObject(target: object): void {
  new PythonBrand(target);
}

/** Whether `x` is a `PyObject` of the Python bridge. */
export function isPythonObject(x: unknown): boolean {
  return typeof x === "object" && x !== null && pythonBranded(x);
}
