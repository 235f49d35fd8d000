// astype against numpy (and ml_dtypes for bfloat16 and the small floats) over every pair of the 27
// dtypes, on edge values (NaN, infinities, -0, out of range, subnormals, ties, 64-bit integers past
// 2^53): the same bytes element by element (NaNs compared as NaN), and a refusal exactly where numpy
// reports an invalid cast. copyFrom(src, { cast: true }) gives what astype gives.
import assert from "node:assert/strict";
import { type BufferView, DLPackError, type DType, DTYPES, fromArray, zeros } from "../../mod.ts";
import { dtypeInfo } from "../../src/facts/dtypes.ts";
import { missing, python } from "../support/python.ts";
import { test } from "../support/harness.ts";
import { live, refused } from "../support/assertions.ts";

const skip = { skip: missing("ml_dtypes") };

// The reference: per source dtype, the source's bytes, and per target the expected slots of each
// element ("nan", or the slot's bytes in hex) or "invalid" where numpy warns "invalid value".
// complex32 (no numpy dtype) is modelled as a pair of float16 parts.
const HELPER = String.raw`
import numpy as np, ml_dtypes, warnings, json
BUILTIN = {'bool','int8','int16','int32','int64','uint8','uint16','uint32','uint64','float16','float32','float64','complex64','complex128'}
def npdt(name):
    return np.dtype(name) if name in BUILTIN else np.dtype(getattr(ml_dtypes, name))
F = [0.0, -0.0, 1.0, -1.0, 0.5, 1.5, 2.5, -2.5, 3.7, -3.7, 127.9, 128.0, -128.9, -129.0, 255.5, 256.0,
     300.7, -300.7, 65504.0, 65520.0, 1e5, -1e5, 2.0**31 - 1, 2.0**31, -2.0**31, -2.0**31 - 1, 2.0**32,
     2.0**53 + 2, 2.0**63, -2.0**63, 2.0**64, 1e30, -1e30, 3.4e38, 1e300, float('nan'), float('inf'), float('-inf'),
     2.0**-24, 3 * 2.0**-25, 2.0**-25, 2.0**-133, 2.0**-9, 1.5 * 2.0**-10, 2.0**-149, 1e-45, 1e-300, 448.0, 464.0, 57344.0, 6.0, 7.0]
I = [0, 1, -1, 2, 127, -128, -129, 128, 255, 256, -32769, 32767, 65535, 65536, 2**31 - 1, -2**31, 2**32 - 1,
     2**24 + 1, 2**24 + 3, 2**53 + 1, 2**63 - 1, -2**63, 2**54 + 3, 2**62 + 2**40 + 1, -(2**62 + 2**38 + 1)]
U = [v % 2**64 for v in I] + [2**64 - 1, 2**63 + 2**11 + 1, 2**63 + 2**40]
C = [complex(a, b) for a, b in zip(F, F[7:] + F[:7])]
def source(name):
    with warnings.catch_warnings():
        warnings.simplefilter('ignore')
        if name == 'bool': return np.array([True, False, True], dtype=bool)
        if name in ('int8','int16','int32','int64'): return np.array(I, dtype=np.int64).astype(name)
        if name.startswith('uint'): return np.array(U, dtype=np.uint64).astype(name)
        if name == 'complex32': return np.array(C, dtype=np.complex128).astype(np.complex64)
        if name.startswith('complex'): return np.array(C, dtype=name)
        return np.array(F, dtype=np.float64).astype(npdt(name))
def as_source(name, a):
    # complex32: the parts rounded to float16, held exactly by complex64
    if name == 'complex32':
        with warnings.catch_warnings():
            warnings.simplefilter('ignore')
            out = np.empty(a.shape, dtype=np.complex64)
            out.real = a.real.astype(np.float16)
            out.imag = a.imag.astype(np.float16)
        return out
    return a
def src_bytes(name, a):
    if name == 'complex32':
        return np.stack([a.real.astype(np.float16), a.imag.astype(np.float16)], -1).view(np.uint8).tobytes().hex()
    return a.view(np.uint8).tobytes().hex()
def cast1(a, name):
    # numpy's cast of a (one element), or None where numpy warns of an invalid value
    with warnings.catch_warnings(record=True) as w:
        warnings.simplefilter('always')
        if name == 'complex32':
            parts = [a.real if a.dtype.kind == 'c' else a, a.imag if a.dtype.kind == 'c' else np.zeros_like(a, dtype=np.float64)]
            out = [cast_direct(p, 'float16') for p in parts]
        else:
            out = [cast_direct(a, name)]
        if any('invalid value' in str(x.message) for x in w): return None
    return out
def cast_direct(a, name):
    t = npdt(name)
    try:
        return a.astype(t)
    except (TypeError, ValueError):
        # no direct cast between two ml_dtypes formats: through float64, exact for every source
        return a.astype(np.float64).astype(t)
def slots(name, outs):
    res = []
    for o in outs:
        k = o.dtype.kind
        if k == 'c':
            parts = [o.real, o.imag]
        else:
            parts = [o]
        for p in parts:
            isnan = p.dtype != bool and p.dtype.kind not in 'iu' and bool(np.isnan(p.astype(np.float64))[0])
            res.append('nan' if isnan else p.view(np.uint8).tobytes().hex())
    return res
def reference(name, targets):
    a = as_source(name, source(name))
    out = {'source': src_bytes(name, a), 'n': int(a.size), 'targets': {}}
    for t in targets:
        per = []
        for i in range(a.size):
            r = cast1(a[i:i+1], t)
            # formats with neither NaN nor infinity: NaN is refused (ml_dtypes' result is arbitrary)
            if r is not None and t.startswith(('float6_', 'float4_')) and a.dtype.kind in 'fcV' and bool(np.isnan(a[i:i+1].astype(np.complex128).real)[0]):
                r = None
            # NaN and infinities to an integer: refused from every dtype (numpy warns of an invalid
            # value; ml_dtypes' small floats give 0 for NaN and saturate infinities instead)
            if r is not None and t != 'complex32' and npdt(t).kind in 'iu' and a.dtype.kind not in 'iub' and not bool(np.isfinite(a[i:i+1].astype(np.complex128).real)[0]):
                r = None
            per.append(None if r is None else slots(t, r))
        out['targets'][t] = per
    return json.dumps(out)
`;

interface Reference {
  source: string;
  n: number;
  targets: Record<string, (string[] | null)[]>;
}

function bytesOf(hex: string): Uint8Array {
  const out = new Uint8Array(hex.length / 2);
  for (let i = 0; i < out.length; i++) out[i] = parseInt(hex.slice(2 * i, 2 * i + 2), 16);
  return out;
}

function hexOf(bytes: Uint8Array): string {
  let s = "";
  for (const b of bytes) s += b.toString(16).padStart(2, "0");
  return s;
}

/** A view of `dtype` holding the elements `bytes` encode (the form of `toArray()`). */
function viewOf(dtype: DType, bytes: Uint8Array, n: number): BufferView {
  const info = dtypeInfo(dtype);
  const v = zeros([n], dtype);
  v.copyFrom(new info.array(bytes.buffer as ArrayBuffer, 0, n * info.slots));
  return v;
}

/** The slots of element `k` of `v` as the reference writes them. */
function slotsOf(v: BufferView, flat: ArrayBufferView, k: number): string[] {
  const info = dtypeInfo(v.dtype);
  const bytes = new Uint8Array(flat.buffer, flat.byteOffset, flat.byteLength);
  const value = v.get(k);
  const values = Array.isArray(value) ? value : [value];
  const out: string[] = [];
  for (let s = 0; s < info.slots; s++) {
    const x = values[s];
    const at = (k * info.slots + s) * info.slotBytes;
    out.push(typeof x === "number" && Number.isNaN(x) ? "nan" : hexOf(bytes.subarray(at, at + info.slotBytes)));
  }
  return out;
}

/** The indices of the elements numpy casts, and the bytes of those elements of the source. */
function validPart(dtype: DType, source: Uint8Array, expected: (string[] | null)[]): [number[], Uint8Array] {
  const info = dtypeInfo(dtype);
  const size = info.slots * info.slotBytes;
  const keep = expected.flatMap((e, i) => e === null ? [] : [i]);
  const out = new Uint8Array(keep.length * size);
  keep.forEach((i, j) => out.set(source.subarray(i * size, (i + 1) * size), j * size));
  return [keep, out];
}

test("astype over every dtype pair matches numpy and ml_dtypes, refusing where numpy's cast is undefined", () => {
  const py = python();
  py.exec(HELPER);
  py.set("targets", [...DTYPES]);
  const before = live();
  const failures: string[] = [];
  let compared = 0;
  let refusals = 0;
  for (const from of DTYPES) {
    const ref = JSON.parse(py.eval(`reference(${JSON.stringify(from)}, targets)`).toJS() as string) as Reference;
    const source = bytesOf(ref.source);
    for (const to of DTYPES) {
      const expected = ref.targets[to]!;
      const [keep, part] = validPart(from, source, expected);
      if (keep.length < expected.length) {
        using all = viewOf(from, source, ref.n);
        const e = refused(() => all.astype(to), "dtype", `${from} -> ${to}`, /has no .* value|cannot hold NaN/);
        assert.ok(e instanceof DLPackError);
        refusals++;
      }
      using src = viewOf(from, part, keep.length);
      using out = src.astype(to);
      assert.equal(out.dtype, to);
      assert.deepEqual(out.shape, [keep.length]);
      const flat = out.toArray();
      keep.forEach((i, j) => {
        const want = expected[i]!;
        const got = slotsOf(out, flat, j);
        compared++;
        if (JSON.stringify(got) !== JSON.stringify(want)) {
          failures.push(`${from} -> ${to}, element ${i}: ${JSON.stringify(got)} vs numpy ${JSON.stringify(want)}`);
        }
      });
    }
  }
  assert.deepEqual(failures.slice(0, 30), [], `${failures.length} mismatches of ${compared}`);
  assert.ok(compared > 20000, `only ${compared} elements compared`);
  assert.ok(refusals > 50, `only ${refusals} refusals checked`);
  assert.deepEqual(live(), before, "every view and temporary was released");
}, skip);

test("copyFrom(src, { cast: true }) converts as astype does, from views and TypedArrays; refused without cast", () => {
  using src = fromArray(new Float64Array([1.9, -2.9, 300.5, -0.5, 65535.5, 7]), { shape: [2, 3] });
  using dst = zeros([2, 3], "uint8");
  refused(() => dst.copyFrom(src), "dtype", /cast: true/);
  dst.copyFrom(src, { cast: true });
  using expected = src.astype("uint8");
  assert.deepEqual(dst.toNested(), expected.toNested());
  assert.deepEqual(dst.toNested(), [[1, 254, 44], [0, 255, 7]]);
  // A strided source and destination: the transposed source into a Fortran-ordered half.
  using wide = zeros([3, 4], "bfloat16");
  using into = wide.slice(null, "::2");
  using srcT = src.T;
  into.copyFrom(srcT, { cast: true });
  using viaAstype = srcT.astype("bfloat16");
  assert.deepEqual(into.toNested(), viaAstype.toNested());
  assert.deepEqual(into.toNested(), [[1.8984375, -0.5], [-2.90625, 65536], [300, 7]]);
  // A TypedArray of another dtype, converted from its own dtype.
  dst.copyFrom(new Int32Array([256, 257, -1, 0, 1, 2]), { cast: true });
  assert.deepEqual(dst.toNested(), [[0, 1, 255], [0, 1, 2]]);
  refused(() => dst.copyFrom(new Int32Array(6)), "dtype");
  // The form of toArray() is copied as it is, cast or not: a Uint16Array into bfloat16 is its bits.
  using bf = zeros([2], "bfloat16");
  bf.copyFrom(new Uint16Array([0x3f80, 0xc000]), { cast: true });
  assert.deepEqual(bf.toNested(), [1, -2]);
  bf.copyFrom(new Float32Array([0.5, 3]), { cast: true });
  assert.deepEqual(bf.toNested(), [0.5, 3]);
  refused(() => dst.copyFrom(new Int32Array(5), { cast: true }), "shape");
  using row = src.slice(0);
  refused(() => dst.copyFrom(row, { cast: true }), "shape");
  using flat = fromArray(new Float64Array([NaN, 0, 0, 0, 0, 0]));
  refused(() => dst.copyFrom(flat, { cast: true }), "shape");
  using nan = fromArray(new Float64Array([NaN, 0, 0, 0, 0, 0]), { shape: [2, 3] });
  refused(() => dst.copyFrom(nan, { cast: true }), "dtype", /NaN/);
  refused(() => dst.copyFrom(src, { cast: "yes" as never }), "argument");
  using ro = src.broadcastTo([2, 3]);
  refused(() => ro.copyFrom(dst, { cast: true }), "readonly");
});
