/**
 * Python traffic for the soak (`SOAK_EXTRA=tests/soak/python_workloads.ts tools/soak.sh`): numpy
 * arrays imported into JS and JS memory handed to numpy, with everything released by dispose, by
 * Python dropping it, or by Python's GC on another thread. Without Python with numpy it adds
 * nothing (and says so on stderr).
 * @module
 */
import { exportDLPack, importDLPack } from "../../mod.ts";
import { fromPython, openPython, type Python, toPython } from "../../python.ts";
import type { Workload } from "./workloads.ts";

function open(): Python | undefined {
  try {
    const py = openPython();
    py.exec([
      "import numpy as np, sys, threading",
      "source = np.arange(1024, dtype=np.float32)",
      "source_refs = sys.getrefcount(source)",
      "def consume_on_thread(t):",
      "    def run():",
      "        a = np.from_dlpack(t)",
      "        a += 1",
      "        del a",
      "    th = threading.Thread(target=run)",
      "    th.start(); th.join()",
    ].join("\n"));
    return py;
  } catch (error) {
    console.error(`soak: no Python workloads (${(error as Error).message.slice(0, 120)})`);
    return undefined;
  }
}

const py = open();

/** The workloads (empty without Python). */
export const workloads: Workload[] = py === undefined ? [] : [
  {
    name: "python: numpy -> JS, read, dispose",
    weight: 2,
    run(i) {
      using source = py.eval("source");
      using view = fromPython(source, i % 3 === 0 ? { maxVersion: null } : {});
      if (view.get(7) !== 7) throw new Error("numpy value lost");
    },
  },
  {
    name: "python: JS -> numpy, written by numpy in place",
    weight: 2,
    run(i) {
      const x = new Float32Array(256).fill(i % 100);
      using t = toPython(x, py);
      using fromDlpack = py.eval("np.from_dlpack");
      using a = fromDlpack.call(t);
      a.get("__imul__").call(2).dispose();
      if (x[5] !== (i % 100) * 2) throw new Error("numpy's write not seen from JS");
    },
  },
  {
    name: "python: JS -> numpy -> JS -> export chain, released by Python's GC on a thread",
    weight: 1,
    run(i) {
      const x = new Float64Array(64).fill(i);
      using t = toPython(x, py);
      using consume = py.eval("consume_on_thread");
      consume.call(t).dispose();
      using back = fromPython(t);
      importDLPack(exportDLPack(back)).dispose();
      if (x[0] !== i + 1) throw new Error("the thread's write was lost");
    },
  },
  {
    name: "python: refcounts stay put",
    weight: 1,
    run() {
      if (py.eval("sys.getrefcount(source) - source_refs").toJS() !== 0) throw new Error("numpy refcount drifted");
    },
  },
];
