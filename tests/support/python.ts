/**
 * Opens the embedded Python for the interop tests, or says why the tests must skip (no shared
 * libpython, packages not installed: run tools/python.sh and set PYTHONPATH, as tools/test.sh does).
 * @module
 */
import { openPython, type Python } from "../../python.ts";
import { DLPackError } from "../../mod.ts";

function tryOpen(): { py: Python; skip: false } | { py: undefined; skip: string } {
  try {
    const py = openPython();
    py.exec("import numpy");
    return { py, skip: false };
  } catch (error) {
    if (!(error instanceof DLPackError)) throw error;
    return { py: undefined, skip: `Python with numpy is not available (${error.message.slice(0, 160)})` };
  }
}

const opened = tryOpen();

/** The shared bridge (undefined when skipped). */
export const py: Python | undefined = opened.py;

/** Why Python tests skip, or false. */
export const noPython: string | false = opened.skip;

/** Why tests needing module `name` skip, or false. */
export function missing(name: string): string | false {
  if (py === undefined) return noPython;
  try {
    py.exec(`import ${name}`);
    return false;
  } catch {
    return `${name} is not installed for this Python (tools/python.sh installs the pinned set)`;
  }
}

/** The bridge, for tests that run only when it is available. */
export function python(): Python {
  if (py === undefined) throw new Error("python() called in a skipped test");
  return py;
}
