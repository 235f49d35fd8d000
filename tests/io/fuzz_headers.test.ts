// Fuzzing the header parsers: seeded random safetensors and .npy headers, valid ones and mutations of
// them (flipped, inserted, deleted and duplicated bytes, cut files, tampered lengths, numbers made
// huge, whole headers of random bytes). Each one is refused with a DLPackError ("file") or loaded
// correctly: a valid header exactly as it was generated, any accepted header with ranges that cover
// the data exactly and sizes that match; an accepted safetensors header is also one the reference
// reader accepts with the same tensors, and an accepted .npy header one np.load reads the same way.
// A sample goes through the files API, whose views must hold the bytes at their ranges. Nothing else
// may be thrown, and nothing stays mapped.
import assert from "node:assert/strict";
import { writeFileSync } from "node:fs";
import { type BufferView, DLPackError, type DType } from "../../mod.ts";
import { loadNpy, loadSafetensors } from "../../io.ts";
import { runtime } from "../../ffi/mod.ts";
import { parseHeader, SAFETENSORS_DTYPES } from "../../src/io/safetensors.ts";
import { formatDType } from "../../src/io/safetensors.ts";
import { NPY_DTYPES, npyDescr, parseNpyHeader } from "../../src/io/npy.ts";
import { dtypeInfo } from "../../src/facts/dtypes.ts";
import { Rng } from "../support/rng.ts";
import { test } from "../support/harness.ts";
import { noPython, python } from "../support/python.ts";
import { noSafetensors, nothingLeft, scratchFolder } from "../support/io_files.ts";

// DLPACK_FUZZ_CASES and DLPACK_FUZZ_SEED lengthen or vary a run (docs/reliability.md).
const CASES = Number(runtime().env("DLPACK_FUZZ_CASES") ?? 3_000);
const SEED = Number(runtime().env("DLPACK_FUZZ_SEED") ?? 20_260_311);
const folder = scratchFolder("fuzz");
const text = new TextEncoder();

interface Tensor {
  name: string;
  dtype: DType;
  shape: number[];
  begin: number;
  end: number;
}

function bytesOf(dtype: DType, shape: readonly number[]): number {
  return (shape.reduce((a, b) => a * b, 1) * dtypeInfo(dtype).bits) / 8;
}

const NAMES = ["w", "bias", "layer.0.weight", "é", "\u{1f600}", 'a"b', "x\\y", "__proto__", "constructor", ""];

/** A valid safetensors file with its tensors (JSON formatted in one of several ways). */
function validSafetensors(r: Rng): { bytes: Uint8Array; tensors: Tensor[]; metadata: Record<string, string> | null } {
  const n = r.int(0, 5);
  const tensors: Tensor[] = [];
  let offset = 0;
  const used = new Set<string>();
  for (let i = 0; i < n; i++) {
    let name = r.pick(NAMES) + (r.chance(50) ? String(i) : "");
    while (used.has(name) || name === "__metadata__") name += "_";
    used.add(name);
    const dtype = r.pick(SAFETENSORS_DTYPES);
    const rank = r.int(0, 3);
    const shape = Array.from({ length: rank }, () => r.int(0, 4));
    if (dtypeInfo(dtype).bits < 8 && (shape.reduce((a, b) => a * b, 1) * dtypeInfo(dtype).bits) % 8 !== 0) {
      shape.push(8);
    }
    const bytes = bytesOf(dtype, shape);
    tensors.push({ name, dtype, shape, begin: offset, end: offset + bytes });
    offset += bytes;
  }
  const metadata = r.chance(40) ? { k: "v", [r.pick(NAMES)]: r.pick(NAMES) } : null;
  const space = () => (r.chance(20) ? r.pick([" ", "\n", "\t", "  "]) : "");
  const order = [...tensors].sort(() => (r.chance(50) ? -1 : 1));
  const parts = order.map((t) =>
    `${JSON.stringify(t.name)}:${space()}{"dtype":${space()}"${formatDType(t.dtype)}",${space()}"shape":[${
      t.shape.join(`,${space()}`)
    }],"data_offsets":[${t.begin},${t.end}]${r.chance(10) ? ',"extra":{"n":[1,2.5e3,null,true]}' : ""}}`
  );
  if (metadata !== null) parts.splice(r.int(0, parts.length), 0, `"__metadata__":${JSON.stringify(metadata)}`);
  const json = text.encode(`${space()}{${parts.join(`,${space()}`)}}${" ".repeat(r.int(0, 7))}`);
  const file = new Uint8Array(8 + json.length + offset);
  new DataView(file.buffer).setBigUint64(0, BigInt(json.length), true);
  file.set(json, 8);
  for (let i = 8 + json.length; i < file.length; i++) file[i] = r.int(0, 255);
  return { bytes: file, tensors, metadata };
}

/** A mutation of `bytes` (a fresh array). */
function mutate(r: Rng, bytes: Uint8Array, headerEnd: number): Uint8Array {
  const copy = () => new Uint8Array(bytes);
  const at = (limit = bytes.length) => r.int(0, Math.max(0, limit - 1));
  switch (r.int(0, 9)) {
    case 0: { // flip bytes, mostly in the header
      const out = copy();
      for (let k = r.int(1, 4); k > 0; k--) out[at(r.chance(80) ? headerEnd : out.length)] = r.int(0, 255);
      return out;
    }
    case 1: { // insert a byte
      const i = at(headerEnd);
      return new Uint8Array([
        ...bytes.subarray(0, i),
        r.pick([0x7b, 0x7d, 0x22, 0x2c, 0x5b, 0x30, 0x39, 0x2d]),
        ...bytes.subarray(i),
      ]);
    }
    case 2: { // delete a byte
      const i = at(headerEnd);
      return new Uint8Array([...bytes.subarray(0, i), ...bytes.subarray(i + 1)]);
    }
    case 3: // cut the file
      return bytes.slice(0, at());
    case 4: { // tamper with the length field (or the npy version and length)
      const out = copy();
      out[r.int(0, 11)] = r.pick([0, 1, 0x7f, 0x80, 0xff, r.int(0, 255)]);
      return out;
    }
    case 5: { // a number made huge or negative
      const s = new TextDecoder().decode(bytes.subarray(0, headerEnd));
      const replaced = s.replace(
        /\d+/,
        r.pick(["9007199254740993", "18446744073709551616", "-1", "1e400", "01", "1.5"]),
      );
      return new Uint8Array([...text.encode(replaced), ...bytes.subarray(headerEnd)]);
    }
    case 6: { // duplicate a stretch of the header
      const i = at(headerEnd);
      const j = Math.min(headerEnd, i + r.int(1, 40));
      return new Uint8Array([...bytes.subarray(0, j), ...bytes.subarray(i, j), ...bytes.subarray(j)]);
    }
    case 7: { // random bytes after a valid prefix
      const out = copy();
      for (let i = at(headerEnd); i < headerEnd; i++) out[i] = r.int(0, 255);
      return out;
    }
    case 8: // random bytes throughout
      return Uint8Array.from({ length: r.int(0, 64) }, () => r.int(0, 255));
    default: { // bytes appended to the data
      return new Uint8Array([...bytes, ...Array.from({ length: r.int(1, 9) }, () => r.int(0, 255))]);
    }
  }
}

/** Runs `parse`; returns what it returned, or undefined for a DLPackError("file"). Anything else fails. */
function outcome<T>(parse: () => T, label: string): T | undefined {
  try {
    return parse();
  } catch (error) {
    if (error instanceof DLPackError && error.code === "file" && error.message.startsWith(`"${label}": `)) {
      return undefined;
    }
    throw new Error(`${label}: not a DLPackError("file") naming the file: ${(error as Error)?.stack ?? error}`);
  }
}

/** The invariants of an accepted safetensors header, for the file `bytes`. */
function checkAccepted(header: ReturnType<typeof parseHeader>, bytes: Uint8Array, label: string): void {
  let next = 0;
  const names = new Set<string>();
  for (const t of header.tensors) {
    assert.equal(t.begin, next, `${label}: ranges in order without gaps`);
    assert.equal(t.end - t.begin, bytesOf(t.dtype, t.shape), `${label}: ${t.name}'s size`);
    assert.ok(!names.has(t.name), `${label}: names unique`);
    names.add(t.name);
    next = t.end;
  }
  assert.equal(header.dataStart + next, bytes.length, `${label}: the data covered exactly`);
}

test("fuzz: safetensors headers are refused with DLPackError or read correctly, as the reference reads them", () => {
  const r = new Rng(SEED);
  const accepted: { bytes: Uint8Array; tensors: [string, string, number[], number, number][] }[] = [];
  let refusals = 0;
  for (let c = 0; c < CASES; c++) {
    const label = `safetensors seed ${SEED} case ${c}`;
    const valid = validSafetensors(r);
    const headerEnd = 8 + Number(new DataView(valid.bytes.buffer).getBigUint64(0, true));
    const bytes = r.chance(15) ? valid.bytes : mutate(r, valid.bytes, headerEnd);
    const header = outcome(() => parseHeader(bytes, bytes.length, `"${label}"`), label);
    if (bytes === valid.bytes) {
      assert.ok(header !== undefined, `${label}: a valid header was refused`);
      // Tensors of equal ranges (empty ones) keep the header's order: compare them as sets.
      const key = (t: { name: string; begin: number; end: number }) => `${t.begin}:${t.end}:${t.name}`;
      const got = header.tensors.map((t) => ({ ...t, shape: [...t.shape] })).sort((a, b) => (key(a) < key(b) ? -1 : 1));
      const want = [...valid.tensors].sort((a, b) => (key(a) < key(b) ? -1 : 1));
      assert.deepEqual(
        got.map((t) => [t.name, t.dtype, t.shape, t.begin, t.end]),
        want.map((t) => [t.name, t.dtype, t.shape, t.begin, t.end]),
        label,
      );
      assert.deepEqual(header.metadata === null ? null : { ...header.metadata }, valid.metadata, label);
    }
    if (header === undefined) {
      refusals++;
      continue;
    }
    checkAccepted(header, bytes, label);
    if (accepted.length < 400) {
      accepted.push({
        bytes,
        tensors: header.tensors.map((t) => [t.name, formatDType(t.dtype)!, [...t.shape], t.begin, t.end]),
      });
    }
  }
  assert.ok(
    refusals > CASES / 4 && refusals < CASES,
    `${refusals} of ${CASES} refused: the mutations must hit both ways`,
  );
  if (noSafetensors) return;
  // What was accepted here, the reference reader accepts with the same tensors.
  const py = python();
  py.exec("import base64\nfrom safetensors import deserialize\ncases = []");
  for (const a of accepted) {
    py.exec(`cases.append(base64.b64decode(${JSON.stringify(btoa(String.fromCharCode(...a.bytes)))}))`);
  }
  py.exec(`
def read(b):
    out = []
    for name, t in deserialize(b):
        out.append([name, t["dtype"], list(t["shape"])])
    return sorted(out)
results = [read(b) for b in cases]
`);
  using results = py.eval("results");
  const theirs = results.toJS() as [string, string, number[]][][];
  for (let i = 0; i < accepted.length; i++) {
    const ours = accepted[i]!.tensors.map(([n, d, s]) => [n, d, s]).sort((
      a,
      b,
    ) => (a[0]! < b[0]! ? -1 : a[0]! > b[0]! ? 1 : 0));
    assert.deepEqual(theirs[i], ours, `accepted case ${i}: the reference reads the same tensors`);
  }
  py.exec("del cases, results");
});

/** A valid .npy file, its header written in one of the forms numpy readers accept. */
function validNpy(r: Rng): { bytes: Uint8Array; dtype: DType; shape: number[]; fortran: boolean } {
  const dtype = r.pick(NPY_DTYPES);
  const shape = Array.from({ length: r.int(0, 3) }, () => r.int(0, 4));
  const fortran = r.chance(30);
  const q = r.chance(80) ? "'" : '"';
  const tuple = shape.length === 1 ? `(${shape[0]},)` : `(${shape.join(r.pick([", ", ","]))})`;
  const fields = [
    `${q}descr${q}: ${q}${npyDescr(dtype)}${q}`,
    `${q}fortran_order${q}: ${fortran ? "True" : "False"}`,
    `${q}shape${q}: ${tuple}`,
  ].sort(() => (r.chance(50) ? -1 : 1));
  const dict = `{${fields.join(", ")}${r.chance(70) ? ", " : ""}}`;
  const major = r.pick([1, 2, 3]);
  const before = major === 1 ? 10 : 12;
  const length = Math.ceil((before + dict.length + 1) / 64) * 64 - before;
  const data = bytesOf(dtype, shape);
  const out = new Uint8Array(before + length + data);
  out.set([0x93, 0x4e, 0x55, 0x4d, 0x50, 0x59, major, 0]);
  if (major === 1) new DataView(out.buffer).setUint16(8, length, true);
  else new DataView(out.buffer).setUint32(8, length, true);
  out.set(text.encode(dict.padEnd(length - 1, " ") + "\n"), before);
  for (let i = before + length; i < out.length; i++) out[i] = r.int(0, 255);
  return { bytes: out, dtype, shape, fortran };
}

test("fuzz: .npy headers are refused with DLPackError or read correctly, as np.load reads them", () => {
  const r = new Rng(SEED + 1);
  const accepted: { bytes: Uint8Array; dtype: string; shape: number[]; fortran: boolean }[] = [];
  let refusals = 0;
  for (let c = 0; c < CASES; c++) {
    const label = `npy seed ${SEED + 1} case ${c}`;
    const valid = validNpy(r);
    const headerEnd = valid.bytes.length - bytesOf(valid.dtype, valid.shape);
    const bytes = r.chance(15) ? valid.bytes : mutate(r, valid.bytes, headerEnd);
    const header = outcome(() => parseNpyHeader(bytes, bytes.length, `"${label}"`), label);
    if (bytes === valid.bytes) {
      assert.ok(header !== undefined, `${label}: a valid header was refused`);
      assert.deepEqual(
        [header.dtype, [...header.shape], header.fortran],
        [valid.dtype, valid.shape, valid.fortran],
        label,
      );
    }
    if (header === undefined) {
      refusals++;
      continue;
    }
    assert.ok(header.dataStart + header.dataBytes <= bytes.length, `${label}: the data is inside the file`);
    assert.equal(header.dataBytes, bytesOf(header.dtype, header.shape), label);
    if (accepted.length < 400) {
      accepted.push({ bytes, dtype: npyDescr(header.dtype)!, shape: [...header.shape], fortran: header.fortran });
    }
  }
  assert.ok(refusals > CASES / 4 && refusals < CASES, `${refusals} of ${CASES} refused`);
  if (noPython) return;
  const py = python();
  py.exec("import base64, io\nimport numpy as np\nfrom numpy.lib import _format_impl\ncases = []");
  for (const a of accepted) {
    py.exec(`cases.append(base64.b64decode(${JSON.stringify(btoa(String.fromCharCode(...a.bytes)))}))`);
  }
  // numpy's own reader of the header, then np.load of the whole file.
  py.exec(`
def read(b):
    f = io.BytesIO(b)
    version = np.lib.format.read_magic(f)
    shape, fortran, dtype = _format_impl._read_array_header(f, version, max_header_size=1 << 20)
    np.load(io.BytesIO(b), allow_pickle=False)
    return [dtype.str, list(shape), bool(fortran)]
results = [read(b) for b in cases]
`);
  using results = py.eval("results");
  const theirs = results.toJS() as [string, number[], boolean][];
  for (let i = 0; i < accepted.length; i++) {
    const a = accepted[i]!;
    assert.deepEqual(theirs[i], [a.dtype, a.shape, a.fortran], `accepted case ${i}: numpy reads the same header`);
  }
  py.exec("del cases, results");
});

test("fuzz through the files API: views hold the bytes at their ranges, or DLPackError; nothing stays mapped", () => {
  const r = new Rng(SEED + 2);
  const path = folder.path("fuzz.safetensors");
  for (let c = 0; c < Math.min(CASES, 300); c++) {
    const label = JSON.stringify(path).slice(1, -1);
    const valid = validSafetensors(r);
    const headerEnd = 8 + Number(new DataView(valid.bytes.buffer).getBigUint64(0, true));
    const bytes = r.chance(40) ? valid.bytes : mutate(r, valid.bytes, headerEnd);
    writeFileSync(path, bytes);
    const file = outcome(() => loadSafetensors(path, { copy: r.chance(30) }), label);
    if (file !== undefined) {
      const header = parseHeader(bytes, bytes.length, "again");
      for (const t of header.tensors) {
        const view: BufferView = file.tensors[t.name]!;
        assert.equal(view.dtype, t.dtype);
        const got = new Uint8Array(view.array().buffer);
        assert.deepEqual(
          got,
          bytes.subarray(header.dataStart + t.begin, header.dataStart + t.end),
          `case ${c}: ${t.name}`,
        );
      }
      file.dispose();
    }
    nothingLeft();
  }
  const npyPath = folder.path("fuzz.npy");
  for (let c = 0; c < Math.min(CASES, 300); c++) {
    const valid = validNpy(r);
    const bytes = r.chance(40)
      ? valid.bytes
      : mutate(r, valid.bytes, valid.bytes.length - bytesOf(valid.dtype, valid.shape));
    writeFileSync(npyPath, bytes);
    const view = outcome(() => loadNpy(npyPath), JSON.stringify(npyPath).slice(1, -1));
    if (view !== undefined) {
      const header = parseNpyHeader(bytes, bytes.length, "again");
      const got = new Uint8Array(view.array().buffer);
      assert.deepEqual(got, bytes.subarray(header.dataStart, header.dataStart + header.dataBytes), `npy case ${c}`);
      view.dispose();
    }
    nothingLeft();
  }
  nothingLeft(folder.dir);
  folder.cleanup();
});
