// safetensors files against the reference implementation (the `safetensors` package, numpy and
// torch front ends): files it writes load here as views over the mapping with the same dtypes,
// shapes and values; files written here load in safetensors.numpy.load_file and
// safetensors.torch.load_file alike, and are byte for byte what its writer makes; the lazy form;
// and every view, derived view and export holds the mapping until the last one is released.
import assert from "node:assert/strict";
import { readFileSync, writeFileSync } from "node:fs";
import { type BufferView, exportDLPack, fromArray, importDLPack, zeros } from "../../mod.ts";
import { loadSafetensors, openSafetensors, saveSafetensors } from "../../io.ts";
import { toPython } from "../../python.ts";
import type { Python } from "../../python.ts";
import { python } from "../support/python.ts";
import { refused } from "../support/assertions.ts";
import { test } from "../support/harness.ts";
import { mapped, noSafetensors, nothingLeft, noTorch, pyValue as value, scratchFolder } from "../support/io_files.ts";

const folder = scratchFolder("safetensors");
const torchSkip = noTorch();

/** Whether numpy's view of `view` (through DLPack) has the same address and equals `expected`. */
function numpySees(
  py: Python,
  view: BufferView,
  expected: string,
): { same: boolean; equal: boolean; readonly: boolean } {
  using handed = toPython(view, py);
  py.set("handed", handed);
  py.exec("seen = np.from_dlpack(handed)");
  const result = {
    same: value<number>(py, "seen.ctypes.data") === Number(view.address),
    equal: value<boolean>(py, `bool(np.array_equal(seen, ${expected}) and seen.dtype == ${expected}.dtype)`),
    readonly: value<boolean>(py, "not seen.flags.writeable"),
  };
  py.exec("del seen, handed");
  return result;
}

const NUMPY_TENSORS = `
import numpy as np
from safetensors.numpy import save_file, load_file
ref = {
  "f64": np.linspace(-2, 2, 24).reshape(2, 3, 4),
  "f32": np.arange(12, dtype=np.float32).reshape(3, 4) - 5.5,
  "f16": np.array([1.5, -0.25, 65504, 0], dtype=np.float16),
  "i64": np.array([-(2**62), 2**62, -1], dtype=np.int64),
  "i32": np.arange(-3, 3, dtype=np.int32).reshape(2, 3),
  "i16": np.array([-32768, 32767], dtype=np.int16),
  "i8": np.array([[-128], [127]], dtype=np.int8),
  "u64": np.array([2**64 - 1, 0], dtype=np.uint64),
  "u32": np.array([4294967295], dtype=np.uint32),
  "u16": np.array([65535, 1], dtype=np.uint16),
  "u8": np.arange(7, dtype=np.uint8),
  "bool": np.array([True, False, True]),
  "c64": np.array([1 + 2j, -3.5j], dtype=np.complex64),
  "scalar": np.array(3.25, dtype=np.float32),
  "empty": np.zeros((0, 4), dtype=np.float32),
}
`;

test("files safetensors.numpy writes load as read-only views over the mapping, every dtype and value", () => {
  const py = python();
  py.exec(NUMPY_TENSORS);
  const path = folder.path("numpy.safetensors");
  py.exec(`save_file(ref, ${JSON.stringify(path)}, metadata={"format": "np", "note": "é ✓"})`);
  const before = mapped();
  {
    using file = loadSafetensors(path);
    assert.deepEqual({ ...file.metadata }, { format: "np", note: "é ✓" });
    const names = value<string[]>(py, "sorted(ref)");
    assert.deepEqual(Object.keys(file.tensors).sort(), names);
    const expected: Record<string, string> = {
      f64: "float64",
      f32: "float32",
      f16: "float16",
      i64: "int64",
      i32: "int32",
      i16: "int16",
      i8: "int8",
      u64: "uint64",
      u32: "uint32",
      u16: "uint16",
      u8: "uint8",
      bool: "bool",
      c64: "complex64",
      scalar: "float32",
      empty: "float32",
    };
    for (const name of names) {
      const view = file.tensors[name]!;
      assert.equal(view.dtype, expected[name], name);
      assert.deepEqual(view.shape, value(py, `list(ref[${JSON.stringify(name)}].shape)`), name);
      assert.equal(view.access, "readonly", name);
      assert.equal(view.cContiguous, true, name);
      const seen = numpySees(py, view, `ref[${JSON.stringify(name)}]`);
      assert.ok(seen.equal, `${name}: numpy reads the same values and dtype`);
      if (view.size > 0) assert.ok(seen.same, `${name}: numpy's array has the mapping's address`);
      assert.ok(seen.readonly, `${name}: numpy's array is read-only`);
    }
    assert.equal(file.tensors.f32!.get(2, 3), 5.5);
    assert.equal(file.tensors.u64!.get(0), 2n ** 64n - 1n);
    assert.deepEqual(mapped().mappings, before.mappings + 1, "one mapping for the whole file");
  }
  nothingLeft();
}, { skip: noSafetensors });

test("files safetensors.torch writes load with their bf16 and fp8 bits, and torch.from_dlpack shares them", () => {
  const py = python();
  const path = folder.path("torch.safetensors");
  py.exec(`
import torch
from safetensors.torch import save_file as torch_save, load_file as torch_load
t = {
  "bf16": torch.tensor([[1.0, -2.5, 3.0e38], [0.0, -0.0, 1e-3]], dtype=torch.bfloat16),
  "e4m3": torch.tensor([0.5, -448.0, 1.75], dtype=torch.float8_e4m3fn),
  "e5m2": torch.tensor([-57344.0, 0.0625], dtype=torch.float8_e5m2),
  "e4m3fnuz": torch.tensor([1.0, -2.0], dtype=torch.float8_e4m3fnuz),
  "e5m2fnuz": torch.tensor([3.0], dtype=torch.float8_e5m2fnuz),
  "e8m0": torch.tensor([1.0, 2.0, 0.5], dtype=torch.float8_e8m0fnu),
  "f32": torch.arange(6, dtype=torch.float32).reshape(2, 3),
}
torch_save(t, ${JSON.stringify(path)})
def bits(x): return x.contiguous().view(torch.uint8).flatten().tolist()
`);
  using file = loadSafetensors(path);
  const dtypes: Record<string, string> = {
    bf16: "bfloat16",
    e4m3: "float8_e4m3fn",
    e5m2: "float8_e5m2",
    e4m3fnuz: "float8_e4m3fnuz",
    e5m2fnuz: "float8_e5m2fnuz",
    e8m0: "float8_e8m0fnu",
    f32: "float32",
  };
  for (const [name, dtype] of Object.entries(dtypes)) {
    const view = file.tensors[name]!;
    assert.equal(view.dtype, dtype, name);
    assert.deepEqual(view.shape, value(py, `list(t[${JSON.stringify(name)}].shape)`), name);
    const bytes = new Uint8Array(view.array().buffer);
    assert.deepEqual([...bytes], value(py, `bits(t[${JSON.stringify(name)}])`), `${name}: the same bits`);
  }
  assert.deepEqual(file.tensors.bf16!.toNested(), value(py, "t['bf16'].float().tolist()"));
  assert.deepEqual(file.tensors.e4m3!.toNested(), [0.5, -448, 1.75]);
  assert.deepEqual(file.tensors.e5m2!.toNested(), [-57344, 0.0625]);
  // torch reads the mapping in place (it ignores DLPack's READ_ONLY: nothing here writes).
  using handed = toPython(file.tensors.f32!, py);
  py.set("handed", handed);
  py.exec("shared = torch.from_dlpack(handed)");
  assert.equal(value<number>(py, "shared.data_ptr()"), Number(file.tensors.f32!.address), "zero-copy");
  assert.equal(value<boolean>(py, "bool(torch.equal(shared, t['f32']))"), true);
  py.exec("del shared, handed");
}, { skip: torchSkip });

test("files written here load in safetensors.numpy.load_file and safetensors.torch.load_file, same values", () => {
  const py = python();
  py.exec(NUMPY_TENSORS);
  const path = folder.path("ours.safetensors");
  {
    using source = loadSafetensors(folder.path("numpy.safetensors"));
    saveSafetensors(path, source.tensors, { by: "dlpack-ts" });
  }
  py.exec(`
import torch
from safetensors import safe_open
back = load_file(${JSON.stringify(path)})
tback = torch_load(${JSON.stringify(path)})
with safe_open(${JSON.stringify(path)}, framework="np") as f:
    meta = f.metadata()
`);
  assert.equal(value<boolean>(py, "sorted(back) == sorted(ref)"), true);
  assert.equal(
    value<boolean>(py, "all(np.array_equal(back[k], ref[k]) and back[k].dtype == ref[k].dtype for k in ref)"),
    true,
  );
  assert.equal(
    value<boolean>(py, "all(np.array_equal(tback[k].numpy(), ref[k]) for k in ref)"),
    true,
  );
  assert.deepEqual(value(py, "meta"), { by: "dlpack-ts" });
  // bf16 and fp8 written here load in torch with the same bits.
  const bf16 = fromArray(new Uint16Array([0x3f80, 0xc020, 0x7f80]));
  using asBf16 = importDLPack(exportDLPack(new Uint16Array([0x3f80, 0xc020, 0x7f80]), { dtype: "bfloat16" }));
  using e4m3 = importDLPack(exportDLPack(new Uint8Array([0x38, 0xfe, 0x01]), { dtype: "float8_e4m3fn" }));
  const low = folder.path("low.safetensors");
  saveSafetensors(low, { bf16: asBf16, e4m3, bits: bf16 });
  bf16.dispose();
  py.exec(`low = torch_load(${JSON.stringify(low)})`);
  assert.deepEqual(value(py, "[str(low[k].dtype) for k in ('bf16', 'e4m3', 'bits')]"), [
    "torch.bfloat16",
    "torch.float8_e4m3fn",
    "torch.uint16",
  ]);
  assert.deepEqual(value(py, "low['bf16'].float().tolist()"), [1, -2.5, Infinity]);
  assert.deepEqual(value(py, "low['e4m3'].view(torch.uint8).tolist()"), [0x38, 0xfe, 0x01]);
  nothingLeft(folder.dir);
}, { skip: torchSkip });

test("the file written here is byte for byte what the reference writer makes (order, header, padding)", () => {
  const py = python();
  py.exec(NUMPY_TENSORS);
  const path = folder.path("same.safetensors");
  const reference = folder.path("reference.safetensors");
  py.exec(`save_file(ref, ${JSON.stringify(reference)}, metadata={"only": "one"})`);
  {
    using source = loadSafetensors(reference);
    saveSafetensors(path, source.tensors, source.metadata);
  }
  assert.deepEqual(new Uint8Array(readFileSync(path)), new Uint8Array(readFileSync(reference)));
  // Names that sort differently as UTF-16 and as UTF-8 (U+FF5E after U+10000 bytewise).
  using a = zeros([1], "float32");
  using b = zeros([2], "float32");
  const names = folder.path("names.safetensors");
  saveSafetensors(names, { "\u{ff5e}": a, "\u{10000}": b, "~": a });
  py.exec(`
from safetensors.numpy import save
odd = save({"\\uff5e": np.zeros(1, np.float32), "\\U00010000": np.zeros(2, np.float32), "~": np.zeros(1, np.float32)})
`);
  assert.deepEqual([...readFileSync(names)], value(py, "list(odd)"));
  nothingLeft(folder.dir);
}, { skip: noSafetensors });

test("non-contiguous views are written in C order; the lazy form maps once and makes views on demand", () => {
  using base = zeros([3, 4], "int32");
  base.copyFrom([[0, 1, 2, 3], [4, 5, 6, 7], [8, 9, 10, 11]]);
  using t = base.transpose();
  using stepped = base.slice("::-1", "::2");
  const path = folder.path("strided.safetensors");
  saveSafetensors(path, { t, stepped, plain: new Float64Array([1, 2]) });
  const before = mapped();
  using file = openSafetensors(path);
  assert.equal(mapped().mappings, before.mappings + 1);
  assert.deepEqual(file.keys(), ["plain", "stepped", "t"]);
  assert.equal(file.size, 3);
  assert.equal(file.has("t"), true);
  assert.equal(file.has("nope"), false);
  assert.deepEqual(file.info("t"), { dtype: "int32", shape: [4, 3], dataOffsets: [40, 88] });
  assert.equal(file.info("nope"), undefined);
  assert.equal(file.metadata, null);
  {
    using tv = file.get("t");
    assert.deepEqual(tv.toNested(), t.toNested());
    using sv = file.get("stepped");
    assert.deepEqual(sv.toNested(), [[8, 10], [4, 6], [0, 2]]);
    using pv = file.get("plain");
    assert.deepEqual(pv.toNested(), [1, 2]);
  }
  refused(() => file.get("nope"), "argument", /holds no tensor "nope"/);
  // The file object's share and each view's share are separate: the mapping lives while either does.
  const kept = file.get("t");
  file.dispose();
  file.dispose();
  assert.equal(mapped().mappings, before.mappings + 1, "the view keeps the mapping");
  refused(() => file.get("t"), "disposed");
  assert.deepEqual(kept.get(0, 1), 4);
  kept.dispose();
  nothingLeft(folder.dir);
});

test("the mapping lives until the last view, derived view and export of it is released", () => {
  const path = folder.path("life.safetensors");
  using w = zeros([4, 4], "float32");
  w.fill(2);
  saveSafetensors(path, { w });
  const file = loadSafetensors(path);
  const view = file.tensors.w!;
  using row = view.at(1);
  const capsule = exportDLPack(view);
  file.dispose();
  assert.equal(view.disposed, true);
  assert.equal(mapped().mappings, 1, "a derived view and an export hold it");
  assert.equal(row.get(3), 2);
  row.dispose();
  assert.equal(mapped().mappings, 1, "the export holds it");
  using again = importDLPack(capsule);
  assert.equal(again.get(3, 3), 2);
  again.dispose();
  nothingLeft();
});

test("writable: a private copy-on-write mapping (writes never reach the file); copy: memory of its own", () => {
  const path = folder.path("cow.safetensors");
  using w = zeros([3], "float32");
  saveSafetensors(path, { w });
  const original = new Uint8Array(readFileSync(path));
  {
    using file = loadSafetensors(path, { writable: true });
    const v = file.tensors.w!;
    assert.equal(v.access, "readwrite");
    v.set(7, 1);
    v.array()[2] = 9;
    assert.deepEqual(v.toNested(), [0, 7, 9]);
    using other = loadSafetensors(path);
    assert.deepEqual(other.tensors.w!.toNested(), [0, 0, 0], "another mapping sees the file");
    refused(() => other.tensors.w!.set(1, 0), "readonly");
  }
  assert.deepEqual(new Uint8Array(readFileSync(path)), original, "the file never changed");
  {
    const before = mapped();
    using copied = loadSafetensors(path, { copy: true });
    assert.deepEqual(mapped(), before, "nothing mapped: the file was read into library memory");
    assert.deepEqual(copied.tensors.w!.toNested(), [0, 0, 0]);
    assert.equal(copied.tensors.w!.access, "readonly");
    // The copy no longer depends on the file.
    writeFileSync(path, "gone");
    assert.deepEqual(copied.tensors.w!.toNested(), [0, 0, 0]);
  }
  nothingLeft(folder.dir);
});

test("saveSafetensors refuses what the format cannot hold, and leaves the old file alone", () => {
  const path = folder.path("refusals.safetensors");
  using ok = zeros([2], "float32");
  saveSafetensors(path, { ok });
  const before = new Uint8Array(readFileSync(path));
  using c128 = zeros([2], "complex128");
  refused(() => saveSafetensors(path, { ok, c128 }), "dtype", /safetensors has no complex128/);
  refused(() => saveSafetensors(path, { __metadata__: ok }), "argument", /__metadata__/);
  refused(
    () => saveSafetensors(path, { ok }, { n: 1 as unknown as string }),
    "argument",
    /metadata "n" must be a string/,
  );
  refused(() => saveSafetensors(path, { ok: 5 as unknown as BufferView }), "argument", /BufferView or a TypedArray/);
  refused(() => saveSafetensors(path, [ok] as unknown as Record<string, BufferView>), "argument", /record/);
  refused(() => saveSafetensors(path, { ["\ud800"]: ok }), "argument", /lone surrogate/);
  const gone = zeros([1], "float32");
  gone.dispose();
  refused(() => saveSafetensors(path, { gone }), "disposed");
  refused(() => saveSafetensors(folder.path("no/such/folder.safetensors"), { ok }), "file", /no such file or folder/);
  refused(() => saveSafetensors(folder.dir, { ok }), "file", /it is a folder|is a folder/);
  assert.deepEqual(new Uint8Array(readFileSync(path)), before);
  nothingLeft(folder.dir);
});

test("entries listed out of the order of their data are read by their offsets", () => {
  // The header lists "c" (last bytes), "a" (first), "b": the data order is a, b, c.
  const json = '{"c": {"dtype": "U8", "shape": [2], "data_offsets": [3, 5]}, ' +
    '"a": {"dtype": "U8", "shape": [1], "data_offsets": [0, 1]}, ' +
    '"b": {"dtype": "U8", "shape": [2], "data_offsets": [1, 3]}}';
  const header = new TextEncoder().encode(json);
  const bytes = new Uint8Array(8 + header.length + 5);
  new DataView(bytes.buffer).setBigUint64(0, BigInt(header.length), true);
  bytes.set(header, 8);
  bytes.set([10, 20, 21, 30, 31], 8 + header.length);
  const path = folder.path("unordered.safetensors");
  writeFileSync(path, bytes);
  const file = loadSafetensors(path);
  try {
    assert.deepEqual(Object.keys(file.tensors), ["a", "b", "c"]);
    assert.deepEqual([file.tensors.a!.get(0)], [10]);
    assert.deepEqual([file.tensors.b!.get(0), file.tensors.b!.get(1)], [20, 21]);
    assert.deepEqual([file.tensors.c!.get(0), file.tensors.c!.get(1)], [30, 31]);
  } finally {
    file.dispose();
  }
  nothingLeft();
});

test("nothing is left behind: no mapping, no temporary file", () => {
  nothingLeft(folder.dir);
  folder.cleanup();
});
