// .npz archives against numpy: what np.savez and np.savez_compressed write loads here with numpy's
// dtypes, shapes and values (stored members whose data is aligned as views over the mapping, the
// others copied); what saveNpz writes np.load reads back the same, stored members aligned so that
// loadNpz maps them; archives beyond 65,535 members take the zip64 records both ways. Hostile
// archives (and seeded mutations of valid ones) are refused with DLPackError("file") before any
// view exists, and nothing stays mapped.
import assert from "node:assert/strict";
import { readFileSync, writeFileSync } from "node:fs";
import { type BufferView, DLPackError, fromArray, stats, zeros } from "../../mod.ts";
import { loadNpz, saveNpz } from "../../io.ts";
import { type Python, toPython } from "../../python.ts";
import { noPython, python } from "../support/python.ts";
import { refused } from "../support/assertions.ts";
import { test } from "../support/harness.ts";
import { Rng } from "../support/rng.ts";
import { nothingLeft, NUMPY_ARRAYS, pyValue as value, scratchFolder } from "../support/io_files.ts";

const folder = scratchFolder("npz");
const q = JSON.stringify;

/** Whether numpy, handed `view` through DLPack, sees the values and dtype of `expected`. */
function numpyEqual(py: Python, view: BufferView, expected: string): boolean {
  using handed = toPython(view, py);
  py.set("handed", handed);
  const equal = value<boolean>(
    py,
    `bool(np.array_equal(np.from_dlpack(handed), ${expected}) and np.from_dlpack(handed).dtype == ${expected}.dtype)`,
  );
  py.exec("del handed");
  return equal;
}

/** The bytes of a small valid archive numpy wrote (stored or deflated). */
function archive(py: Python, compressed: boolean): Uint8Array {
  const path = folder.path(compressed ? "small-c.npz" : "small.npz");
  py.exec(`np.${compressed ? "savez_compressed" : "savez"}(${q(path)}, a=np.arange(6, dtype=np.float32), b=np.eye(2))`);
  return new Uint8Array(readFileSync(path));
}

test("np.savez and np.savez_compressed archives of every numpy dtype load with numpy's values", () => {
  const py = python();
  py.exec(NUMPY_ARRAYS);
  py.exec("arrays['fortran'] = np.asfortranarray(np.arange(24, dtype=np.float64).reshape(2, 3, 4))");
  for (const how of ["savez", "savez_compressed"]) {
    const path = folder.path(`${how}.npz`);
    py.exec(`np.${how}(${q(path)}, **arrays)`);
    using z = loadNpz(path);
    const names = value<string[]>(py, "list(arrays)");
    assert.deepEqual(Object.keys(z.arrays), names, `${how}: np.load's keys, in order`);
    for (const name of names) {
      const view = z.arrays[name]!;
      assert.deepEqual(view.shape, value(py, `list(arrays[${q(name)}].shape)`), `${how} ${name}`);
      assert.equal(view.access, "readonly");
      assert.equal(view.producer, "npz");
      assert.ok(numpyEqual(py, view, `arrays[${q(name)}]`), `${how} ${name}: numpy's values`);
    }
    assert.deepEqual(z.arrays.fortran!.strides, [1, 2, 6], `${how}: a Fortran-order member stays F-strided`);
  }
  nothingLeft();
}, { skip: noPython });

test("saveNpz: np.load reads every array back; stored members are mapped, aligned, zero-copy", () => {
  const py = python();
  py.exec(NUMPY_ARRAYS);
  const source = folder.path("source.npz");
  py.exec(`np.savez(${q(source)}, **arrays)`);
  for (const compressed of [false, true]) {
    const ours = folder.path(compressed ? "ours-c.npz" : "ours.npz");
    {
      using z = loadNpz(source);
      using t = zeros([3, 4], "float32");
      t.fill(2.5);
      saveNpz(ours, { ...z.arrays, transposed: t.transpose(), typed: new Int16Array([1, -2, 3]) }, { compressed });
    }
    py.exec(`back = np.load(${q(ours)})`);
    for (const name of value<string[]>(py, "list(arrays)")) {
      assert.ok(
        value<boolean>(
          py,
          `bool(np.array_equal(back[${q(name)}], arrays[${q(name)}]) and back[${q(name)}].dtype == arrays[${
            q(name)
          }].dtype)`,
        ),
        `${compressed ? "deflated" : "stored"} ${name}: np.load's values`,
      );
    }
    assert.ok(value<boolean>(py, "bool((back['transposed'] == 2.5).all()) and back['transposed'].shape == (4, 3)"));
    assert.ok(
      value<boolean>(py, "back['transposed'].flags.f_contiguous and not back['transposed'].flags.c_contiguous"),
    );
    assert.deepEqual(value(py, "back['typed'].tolist()"), [1, -2, 3]);
    py.exec("back.close()");
    using z = loadNpz(ours);
    const mapped = stats().mappings;
    assert.equal(mapped, compressed ? 0 : 1, "stored members are views over one mapping; deflated ones copies");
    for (const view of Object.values(z.arrays)) {
      assert.equal(Number(view.address) % 64, 0, `${view.dtype}: data aligned as np.save aligns it`);
    }
    assert.deepEqual(z.arrays.typed!.toNested(), [1, -2, 3]);
  }
  nothingLeft(folder.dir);
}, { skip: noPython });

test("saveNpz: views outlive the archive object; writable maps privately; 65,536 members take zip64", () => {
  const many = folder.path("many.npz");
  const arrays: Record<string, Int32Array> = {};
  for (let i = 0; i < 65_536; i++) arrays[`a${i}`] = new Int32Array([i]);
  saveNpz(many, arrays);
  const bytes = readFileSync(many);
  assert.equal(bytes.readUInt16LE(bytes.length - 22 + 10), 0xffff, "the end record defers to the zip64 one");
  let kept: BufferView;
  {
    using z = loadNpz(many, { writable: true });
    assert.equal(Object.keys(z.arrays).length, 65_536);
    assert.equal(z.arrays.a65535!.get(0), 65_535);
    kept = z.arrays.a7!.copy();
    z.arrays.a1!.set(99, 0);
  }
  assert.equal(kept.get(0), 7);
  kept.dispose();
  {
    using z = loadNpz(many);
    assert.equal(z.arrays.a1!.get(0), 1, "a private mapping's write never reaches the file");
  }
  if (!noPython) {
    const py = python();
    py.exec(`import numpy as np\nz = np.load(${q(many)})`);
    assert.equal(value<number>(py, "len(z.files)"), 65_536);
    assert.equal(value<number>(py, "int(z['a65535'][0])"), 65_535);
    py.exec("z.close()");
  }
  nothingLeft(folder.dir);
});

/** `bytes` with the little-endian `width`-byte field at `at` set to `v`. */
function patched(bytes: Uint8Array, at: number, width: number, v: number): Uint8Array {
  const out = new Uint8Array(bytes);
  for (let i = 0; i < width; i++) out[at + i] = Math.floor(v / 2 ** (8 * i)) & 0xff;
  return out;
}

/** Offset of the first central directory entry and of the end record. */
function records(bytes: Uint8Array): { central: number; end: number } {
  const view = new DataView(bytes.buffer, bytes.byteOffset, bytes.length);
  const end = bytes.length - 22;
  assert.equal(view.getUint32(end, true), 0x06054b50);
  return { central: view.getUint32(end + 16, true), end };
}

function refusedFile(bytes: Uint8Array, pattern: RegExp, what: string): void {
  const path = folder.path("hostile.npz");
  writeFileSync(path, bytes);
  refused(() => loadNpz(path), "file", what, pattern);
  nothingLeft();
}

test("hostile archives are refused with DLPackError(file) naming what is wrong, nothing mapped", () => {
  const py = python();
  py.exec("import numpy as np, zipfile, io, warnings");
  const stored = archive(py, false);
  const deflated = archive(py, true);
  const { central, end } = records(stored);
  const c = records(deflated);
  refusedFile(new Uint8Array(10), /too short for a zip file/, "10 bytes");
  refusedFile(new Uint8Array(4096), /no end-of-central-directory record/, "zeros");
  refusedFile(stored.subarray(0, stored.length - 1), /no end-of-central-directory record/, "one byte cut");
  refusedFile(patched(stored, end + 20, 2, 5), /no end-of-central-directory record/, "a comment length past the end");
  refusedFile(patched(stored, end + 16, 4, end), /beyond its end record/, "directory offset past it");
  refusedFile(patched(stored, end + 10, 2, 9), /archives of several disks/, "counts that disagree");
  refusedFile(
    patched(patched(stored, end + 8, 2, 900), end + 10, 2, 900),
    /do not fit in a central directory/,
    "900 members",
  );
  refusedFile(patched(stored, central + 8, 2, 1), /is encrypted/, "encrypted flag");
  refusedFile(patched(stored, central + 10, 2, 12), /method 12/, "bzip2");
  refusedFile(patched(stored, central + 42, 4, 7), /no local header at 7/, "a local offset into nowhere");
  refusedFile(patched(stored, central + 46, 1, 0x41), /names another member/, "local name differs");
  refusedFile(patched(patched(stored, central + 20, 4, 200), central + 24, 4, 200), /overlap/, "overlapping members");
  refusedFile(patched(stored, central + 20, 4, 5), /has 5 bytes, not its size/, "stored sizes that differ");
  refusedFile(patched(deflated, c.central + 16, 4, 1), /CRC-32 does not match/, "a CRC that lies");
  refusedFile(patched(deflated, c.central + 24, 4, 100), /inflate to more than 100/, "a size that lies low");
  refusedFile(patched(deflated, c.central + 24, 4, 100_000), /inflates to \d+ bytes, not its size 100000/, "high");
  py.exec(`
buf = io.BytesIO()
with zipfile.ZipFile(buf, "w") as z:
    z.writestr("readme.txt", "hello")
other = list(buf.getvalue())
buf = io.BytesIO()
with zipfile.ZipFile(buf, "w") as z, warnings.catch_warnings():
    warnings.simplefilter("ignore")
    for _ in range(2):
        with z.open("a.npy", "w") as f:
            np.lib.format.write_array(f, np.zeros(2))
twice = list(buf.getvalue())
buf = io.BytesIO()
with zipfile.ZipFile(buf, "w") as z:
    z.writestr("x.npy", b"\\x93NUMPY\\x01\\x00\\x10\\x00{'descr': '<O'}")
bad_header = list(buf.getvalue())
`);
  refusedFile(new Uint8Array(value<number[]>(py, "other")), /"readme.txt" is not a \.npy file/, "readme");
  refusedFile(new Uint8Array(value<number[]>(py, "twice")), /two members are named "a.npy"/, "duplicate names");
  refusedFile(new Uint8Array(value<number[]>(py, "bad_header")), /member "x.npy"/, "a bad .npy header inside");
}, { skip: noPython });

test("seeded mutations of valid archives load correctly or are refused with DLPackError(file)", () => {
  const py = python();
  py.exec("import numpy as np");
  const rng = new Rng(20_261_202);
  const path = folder.path("mutant.npz");
  for (const compressed of [false, true]) {
    const base = archive(py, compressed);
    for (let i = 0; i < 400; i++) {
      const bytes = new Uint8Array(base);
      const flips = rng.int(1, 4);
      for (let k = 0; k < flips; k++) bytes[rng.int(0, bytes.length - 1)] = rng.int(0, 255);
      writeFileSync(path, rng.chance(10) ? bytes.subarray(0, rng.int(0, bytes.length)) : bytes);
      try {
        using z = loadNpz(path);
        for (const view of Object.values(z.arrays)) view.toNested();
      } catch (error) {
        assert.ok(error instanceof DLPackError, `case ${i}: ${error}`);
        assert.equal(error.code, "file", `case ${i}: ${error.message}`);
      }
      nothingLeft();
    }
  }
}, { skip: noPython });

test("saveNpz and loadNpz refuse bad arguments with DLPackError codes", () => {
  const path = folder.path("args.npz");
  using v = fromArray(new Float32Array([1, 2]));
  refused(() => saveNpz(path, null as never), "argument", /arrays must be a record/);
  refused(() => saveNpz(path, [v] as never), "argument", /arrays must be a record/);
  refused(() => saveNpz(path, { a: 3 } as never), "argument", /array "a" must be a BufferView or a TypedArray/);
  refused(() => saveNpz(path, { ["\ud800"]: v }), "argument", /no UTF-8 form/);
  refused(() => saveNpz(path, { a: v }, { compressed: "yes" } as never), "argument", /compressed/);
  refused(() => saveNpz("", { a: v }), "argument");
  const gone = fromArray(new Float32Array(1));
  gone.dispose();
  refused(() => saveNpz(path, { a: gone }), "disposed");
  refused(() => loadNpz(folder.path("missing.npz")), "file");
  refused(() => loadNpz(path, { writable: 1 } as never), "argument", /writable/);
  nothingLeft(folder.dir);
});

test("nothing is left behind: no mapping, no temporary file", () => {
  nothingLeft(folder.dir);
  folder.cleanup();
});
