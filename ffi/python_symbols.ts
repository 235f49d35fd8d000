/**
 * The CPython C API functions the embedded-Python bridge calls (stable ABI functions only, so any
 * CPython 3.9+ shared library works). Bound with the same neutral table format as libdlpack's.
 * @module
 */
import type { SymbolTable } from "./types.ts";

/** libpython's functions used by src/python/. Object pointers travel as `usize`. */
export const pythonSymbols = {
  Py_IsInitialized: { args: [], returns: "i32" },
  Py_InitializeEx: { args: ["i32"], returns: "void" },
  PyEval_SaveThread: { args: [], returns: "usize" },
  PyGILState_Ensure: { args: [], returns: "i32" },
  PyGILState_Release: { args: ["i32"], returns: "void" },
  PyRun_StringFlags: { args: ["buffer", "i32", "usize", "usize", "usize"], returns: "usize" },
  PyImport_ImportModule: { args: ["buffer"], returns: "usize" },
  PyImport_AddModule: { args: ["buffer"], returns: "usize" },
  PyModule_GetDict: { args: ["usize"], returns: "usize" },
  PyObject_GetAttrString: { args: ["usize", "buffer"], returns: "usize" },
  PyObject_Call: { args: ["usize", "usize", "usize"], returns: "usize" },
  PyTuple_New: { args: ["usize"], returns: "usize" },
  PyTuple_SetItem: { args: ["usize", "usize", "usize"], returns: "i32" },
  PyTuple_GetItem: { args: ["usize", "usize"], returns: "usize" },
  PyDict_New: { args: [], returns: "usize" },
  PyDict_SetItemString: { args: ["usize", "buffer", "usize"], returns: "i32" },
  PyLong_FromDouble: { args: ["f64"], returns: "usize" },
  PyLong_FromString: { args: ["buffer", "usize", "i32"], returns: "usize" },
  PyFloat_FromDouble: { args: ["f64"], returns: "usize" },
  PyUnicode_FromStringAndSize: { args: ["buffer", "usize"], returns: "usize" },
  PyUnicode_AsUTF8AndSize: { args: ["usize", "usize"], returns: "usize" },
  PyBool_FromLong: { args: ["i32"], returns: "usize" },
  Py_IncRef: { args: ["usize"], returns: "void" },
  Py_DecRef: { args: ["usize"], returns: "void" },
} as const satisfies SymbolTable;

/** The bound form of {@link pythonSymbols}. */
export type PythonSymbols = typeof pythonSymbols;
