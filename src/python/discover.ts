/**
 * Finding a CPython shared library: an explicit path, `DLPACK_PYTHON` (a libpython or an
 * interpreter), or the `python3` on PATH asked through sysconfig.
 * @module
 */
import { runtime } from "../../ffi/mod.ts";
import { DLPackError } from "../facts/errors.ts";

/** What the bridge needs to know about the Python it embeds. */
export interface PythonInstall {
  /** The libpython shared library to load. */
  readonly library: string;
  /** The interpreter it belongs to, when known (becomes `sys.executable`). */
  readonly executable?: string;
  /** That interpreter's `sys.path` (venvs, PYTHONPATH), appended to the embedded one. */
  readonly path: readonly string[];
  /** How it was found, for error messages. */
  readonly source: string;
}

// Printed by the interpreter we ask: where its shared library is and what its sys.path holds.
const QUERY = [
  "import json, os, sys, sysconfig",
  "v = sysconfig.get_config_var",
  "libdir, names = v('LIBDIR') or '', [v('INSTSONAME'), v('LDLIBRARY')]",
  "found = [os.path.join(d, n) for n in names if n for d in (libdir, os.path.join(sys.base_prefix, 'lib')) if os.path.isfile(os.path.join(d, n))]",
  "print(json.dumps({'shared': bool(v('Py_ENABLE_SHARED')), 'library': found[0] if found else None,",
  "  'executable': sys.executable, 'path': [p for p in sys.path if p], 'version': sys.version.split()[0]}))",
].join("\n");

function looksLikeLibrary(path: string): boolean {
  return /libpython|\.so(\.|$)|\.dylib$|\.dll$/.test(path);
}

/** Finds the Python to embed. Throws `DLPackError` ("python") saying how to point at one. */
export function discoverPython(library?: string): PythonInstall {
  const rt = runtime();
  if (library !== undefined) {
    if (!rt.granted("read", library)) throw readDenied(library, "the library option");
    if (!rt.exists(library)) throw new DLPackError("python", `libpython not found at ${library} (the library option)`);
    return { library, path: [], source: "the library option" };
  }
  if (!rt.granted("env", ENV)) {
    // A set DLPACK_PYTHON must never be passed over silently for another Python.
    throw new DLPackError(
      "python",
      `cannot tell whether ${ENV} is set: Deno denies reading it. Run with --allow-env=${ENV} (or --allow-env), ` +
        "or pass openPython({ library: '/path/to/libpython3.X.so' }).",
    );
  }
  const fromEnv = rt.env(ENV);
  if (fromEnv !== undefined && fromEnv !== "") {
    if (!rt.granted("read", fromEnv)) throw readDenied(fromEnv, ENV);
    if (!rt.exists(fromEnv)) throw new DLPackError("python", `DLPACK_PYTHON=${fromEnv}: no such file`);
    if (looksLikeLibrary(fromEnv)) return { library: fromEnv, path: [], source: "DLPACK_PYTHON" };
    return ask(fromEnv, "DLPACK_PYTHON");
  }
  return ask("python3", "python3 on PATH");
}

const ENV = "DLPACK_PYTHON";
const parseJson = JSON.parse;

function readDenied(path: string, source: string): DLPackError {
  return new DLPackError(
    "python",
    `${path} (${source}): Deno denies reading it, so it cannot be checked. Run with --allow-read=${path} ` +
      "(or --allow-read).",
  );
}

function ask(interpreter: string, source: string): PythonInstall {
  const out = runtime().runCommand(interpreter, ["-c", QUERY]);
  const hint = "Point at one with openPython({ library: '/path/to/libpython3.X.so' }) or DLPACK_PYTHON " +
    "(a libpython or a python executable); the library needs --allow-run to ask python3 itself.";
  if (out === undefined) {
    throw new DLPackError("python", `could not run ${interpreter} (${source}): not found or not permitted. ${hint}`);
  }
  if (out.code !== 0) {
    throw new DLPackError("python", `${interpreter} (${source}) failed: ${out.stderr.trim()}. ${hint}`);
  }
  let info: { shared: boolean; library: string | null; executable: string; path: string[]; version: string };
  try {
    info = parseJson(out.stdout.trim().split("\n").pop()!);
  } catch {
    throw new DLPackError("python", `could not read ${interpreter}'s answer: ${out.stdout.slice(0, 200)}`);
  }
  if (!info.shared || info.library === null) {
    throw new DLPackError(
      "python",
      `Python ${info.version} at ${info.executable} (${source}) has no shared library (it was built without ` +
        `--enable-shared). Install one (Debian: apt install libpython3-dev; pyenv: PYTHON_CONFIGURE_OPTS=--enable-shared) ` +
        `or ${hint}`,
    );
  }
  return { library: info.library, executable: info.executable, path: info.path, source };
}
