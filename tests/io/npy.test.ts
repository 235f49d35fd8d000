// .npy files against numpy: what np.save (and np.lib.format.write_array for versions 2.0 and 3.0)
// writes loads here as a view over the mapping with numpy's dtype, shape and values, Fortran-order
// files as F-strided views without a copy; what saveNpy writes is byte for byte np.save's and loads
// in np.load with the same values and dtype.
import assert from "node:assert/strict";
import { readFileSync } from "node:fs";
import { type BufferView, exportDLPack, importDLPack, zeros } from "../../mod.ts";
import { loadNpy, NPY_DTYPES, saveNpy } from "../../io.ts";
import { type Python, toPython } from "../../python.ts";
import { noPython, python } from "../support/python.ts";
import { refused } from "../support/assertions.ts";
import { test } from "../support/harness.ts";
import { mapped, nothingLeft, NUMPY_ARRAYS as ARRAYS, pyValue as value, scratchFolder } from "../support/io_files.ts";

const folder = scratchFolder("npy");

/** numpy's view of `view` through DLPack: same address, same values and dtype as `expected`. */
function numpySees(py: Python, view: BufferView, expected: string): boolean {
  using handed = toPython(view, py);
  py.set("handed", handed);
  py.exec("seen = np.from_dlpack(handed)");
  const same = view.size === 0 || value<number>(py, "seen.ctypes.data") === Number(view.address);
  const equal = value<boolean>(py, `bool(np.array_equal(seen, ${expected}) and seen.dtype == ${expected}.dtype)`);
  py.exec("del seen, handed");
  return same && equal;
}

test("np.save files of every numpy dtype the library has load as views over the mapping", () => {
  const py = python();
  py.exec(ARRAYS);
  const names = value<string[]>(py, "list(arrays)");
  assert.deepEqual([...names].sort(), [...NPY_DTYPES].sort());
  for (const name of names) {
    const path = folder.path(`${name}.npy`);
    py.exec(`np.save(${JSON.stringify(path)}, arrays[${JSON.stringify(name)}])`);
    using view = loadNpy(path);
    assert.equal(view.dtype, name);
    assert.deepEqual(view.shape, value(py, `list(arrays[${JSON.stringify(name)}].shape)`), name);
    assert.equal(view.access, "readonly");
    assert.equal(view.producer, "npy");
    assert.ok(numpySees(py, view, `arrays[${JSON.stringify(name)}]`), `${name}: numpy reads the mapping in place`);
  }
  nothingLeft();
}, { skip: noPython });

test("Fortran-order files load as F-strided views (no copy); versions 2.0 and 3.0 and 0-d, empty arrays", () => {
  const py = python();
  py.exec("import numpy as np");
  const fortran = folder.path("fortran.npy");
  py.exec(
    `f = np.asfortranarray(np.arange(24, dtype=np.float64).reshape(2, 3, 4))\nnp.save(${JSON.stringify(fortran)}, f)`,
  );
  {
    using view = loadNpy(fortran);
    assert.deepEqual(view.shape, [2, 3, 4]);
    assert.deepEqual(view.strides, [1, 2, 6]);
    assert.equal(view.fContiguous, true);
    assert.equal(view.cContiguous, false);
    assert.equal(view.get(1, 2, 3), 23);
    assert.ok(numpySees(py, view, "f"));
  }
  for (const version of ["(2, 0)", "(3, 0)"]) {
    const path = folder.path("versioned.npy");
    py.exec(`
a = np.arange(10, dtype=np.int16)
with open(${JSON.stringify(path)}, "wb") as out:
    np.lib.format.write_array(out, a, version=${version})
`);
    assert.equal(readFileSync(path)[6], Number(version[1]));
    using view = loadNpy(path);
    assert.deepEqual(view.toNested(), [0, 1, 2, 3, 4, 5, 6, 7, 8, 9]);
  }
  for (const [expr, shape] of [["np.zeros((0, 3), np.float32)", [0, 3]], ["np.array(7, np.int64)", []]] as const) {
    const path = folder.path("edge.npy");
    py.exec(`np.save(${JSON.stringify(path)}, ${expr})`);
    using view = loadNpy(path);
    assert.deepEqual(view.shape, shape);
    if (shape.length === 0) assert.equal(view.get(), 7n);
  }
  nothingLeft();
}, { skip: noPython });

test("saveNpy writes np.save's bytes exactly, and np.load reads the same values and dtype", () => {
  const py = python();
  py.exec(ARRAYS);
  for (const name of value<string[]>(py, "list(arrays)")) {
    const theirs = folder.path(`np-${name}.npy`);
    const ours = folder.path(`ours-${name}.npy`);
    py.exec(`np.save(${JSON.stringify(theirs)}, arrays[${JSON.stringify(name)}])`);
    {
      using view = loadNpy(theirs);
      saveNpy(ours, view);
    }
    assert.deepEqual(new Uint8Array(readFileSync(ours)), new Uint8Array(readFileSync(theirs)), name);
    py.exec(`back = np.load(${JSON.stringify(ours)})`);
    assert.equal(
      value<boolean>(
        py,
        `bool(np.array_equal(back, arrays[${JSON.stringify(name)}]) and back.dtype == arrays[${
          JSON.stringify(name)
        }].dtype)`,
      ),
      true,
      name,
    );
  }
  // Layouts: F-contiguous written as Fortran order (np.save does the same), others in C order.
  using base = zeros([3, 4], "float32");
  base.copyFrom([[0, 1, 2, 3], [4, 5, 6, 7], [8, 9, 10, 11]]);
  using t = base.transpose();
  using stepped = base.slice("::-1", "1::2");
  for (const [label, view, fortran] of [["t", t, true], ["stepped", stepped, false]] as const) {
    const path = folder.path(`${label}.npy`);
    saveNpy(path, view);
    py.exec(`back = np.load(${JSON.stringify(path)})`);
    assert.deepEqual(value(py, "back.tolist()"), view.toNested(), label);
    assert.equal(value(py, "bool(back.flags.f_contiguous and not back.flags.c_contiguous)"), fortran, label);
    const theirs = folder.path(`np-${label}.npy`);
    py.exec(`np.save(${JSON.stringify(theirs)}, back)`);
    assert.deepEqual(new Uint8Array(readFileSync(path)), new Uint8Array(readFileSync(theirs)), label);
  }
  // A TypedArray is a 1-d array.
  saveNpy(folder.path("typed.npy"), new Int16Array([3, -4]));
  assert.deepEqual(value(py, `np.load(${JSON.stringify(folder.path("typed.npy"))}).tolist()`), [3, -4]);
  nothingLeft(folder.dir);
}, { skip: noPython });

test("saveNpy refuses dtypes numpy lacks and what is no tensor; loadNpy's views hold the mapping", () => {
  using bf16 = importDLPack(exportDLPack(new Uint16Array([0x3f80]), { dtype: "bfloat16" }));
  refused(() => saveNpy(folder.path("bf16.npy"), bf16), "dtype", /\.npy has no bfloat16/);
  refused(() => saveNpy(folder.path("x.npy"), {} as BufferView), "argument");
  using z = zeros([2, 2], "uint8");
  const path = folder.path("held.npy");
  saveNpy(path, z);
  const view = loadNpy(path);
  const before = mapped();
  using row = view.at(1);
  view.dispose();
  assert.deepEqual(mapped(), before, "the derived view holds the mapping");
  assert.equal(row.get(1), 0);
  row.dispose();
  nothingLeft(folder.dir);
});

test("nothing is left behind: no mapping, no temporary file", () => {
  nothingLeft(folder.dir);
  folder.cleanup();
});
