// The validator fuzz property (tests/native/fuzz_validator.zig) again, from TypeScript through the
// public importDLPack / fromDLPack and the test producer, in whichever runtime runs this file:
// random, often hostile tensors of both generations; each one is refused with a DLPackError whose
// code an independent model (BigInt arithmetic) allows and the deleter ran exactly once, or it is
// accepted with every field as the model says, its array() span inside the producer's allocation
// and every element readable, and disposing it runs the deleter once. Live counters return. The
// data range of host memory at a fake address must be readable (judged from /proc/self/maps, read
// by the test producer), and is read-only where it cannot be written.
import assert from "node:assert/strict";
import { deviceCode, DLPackError, exportDLPack, fromDLPack, importDLPack } from "../../mod.ts";
import type { BufferView } from "../../mod.ts";
import { runtime } from "../../ffi/mod.ts";
import { deleted, listedAccess, make, tp } from "../support/producer.ts";
import { test } from "../support/harness.ts";
import { live } from "../support/assertions.ts";
import { Rng } from "../support/rng.ts";

// DLPACK_FUZZ_CASES and DLPACK_FUZZ_SEED lengthen or vary a run (docs/reliability.md).
const CASES = Number(runtime().env("DLPACK_FUZZ_CASES") ?? 10_000);
const SEED = Number(runtime().env("DLPACK_FUZZ_SEED") ?? 20_260_101);
const RANK = 64;
const EXACT = 2n ** 53n;
const U64_MAX = 2n ** 64n - 1n;

const SUPPORTED = new Set([
  "0:8",
  "0:16",
  "0:32",
  "0:64",
  "1:8",
  "1:16",
  "1:32",
  "1:64",
  "2:16",
  "2:32",
  "2:64",
  "4:16",
  "5:32",
  "5:64",
  "5:128",
  "6:8",
  ...[7, 8, 9, 10, 11, 12, 13, 14].map((c) => `${c}:8`),
  "15:6",
  "16:6",
  "17:4",
]);
const HOST = new Set([1, 3, 11, 13]);

interface Case {
  versioned: boolean;
  major: number;
  minor: number;
  flags: bigint;
  ndim: number;
  code: number;
  bits: number;
  lanes: number;
  deviceType: number;
  deviceId: number;
  shapeNull: boolean;
  stridesNull: boolean;
  shape: bigint[];
  strides: bigint[];
  strict: boolean;
  counted: boolean;
  data: "alloc" | "null" | bigint;
  byteOffset: bigint;
  dataBytes: number;
}

const HOSTILE = [-1n, -(2n ** 63n), 2n ** 63n - 1n, 2n ** 31n, 2n ** 32n, EXACT, EXACT + 1n, 2n ** 62n, -(2n ** 62n)];
const hostile = (r: Rng) => (r.chance(70) ? r.pick(HOSTILE) : r.i64());

function generate(r: Rng): Case {
  const dtypes = [...SUPPORTED].map((k) => k.split(":").map(Number) as [number, number]);
  const [code, bits] = r.chance(90) ? r.pick(dtypes) : [r.chance(50) ? r.int(0, 19) : r.int(0, 255), r.int(0, 255)];
  const ndim = r.chance(85) ? r.int(0, 5) : r.chance(60) ? r.int(6, 64) : r.pick([65, 200, -1, -(2 ** 31)]);
  const rank = Math.max(0, Math.min(ndim, RANK));
  const hostileShape = r.chance(10);
  const shape = Array.from(
    { length: rank },
    () =>
      hostileShape && r.chance(30)
        ? hostile(r)
        : r.chance(8)
        ? 0n
        : rank > 8 && r.chance(70)
        ? 1n
        : BigInt(r.int(1, 5)),
  );
  const pattern = r.int(0, 5);
  const strides = new Array<bigint>(rank);
  let step = 1n;
  for (let i = 0; i < rank; i++) {
    const d = pattern === 1 ? i : rank - 1 - i;
    strides[d] = step;
    const extent = shape[d]!;
    step = BigInt.asIntN(64, step * (extent > 0n ? extent : 1n));
  }
  for (let d = 0; d < rank; d++) {
    if (pattern === 2) strides[d] = BigInt.asIntN(64, -strides[d]!);
    else if (pattern === 3) strides[d] = BigInt(r.int(-6, 6));
    else if (pattern === 4 && r.chance(30)) strides[d] = 0n;
    else if (pattern === 5 && r.chance(25)) strides[d] = hostile(r);
  }
  return {
    versioned: r.chance(50),
    major: r.chance(92) ? 1 : r.pick([0, 2, 0xffff_ffff]),
    minor: r.chance(80) ? r.int(0, 4) : 0xffff_ffff,
    flags: r.chance(60) ? 0n : r.chance(75) ? BigInt(r.int(0, 7)) : r.chance(50) ? 1n << BigInt(r.int(0, 63)) : r.i64(),
    ndim,
    code,
    bits,
    lanes: r.chance(95) ? 1 : r.int(0, 65535),
    deviceType: r.chance(85) ? r.pick([...HOST]) : r.chance(70) ? r.int(0, 20) : r.int(-(2 ** 31), 2 ** 31 - 1),
    deviceId: r.chance(90) ? 0 : r.chance(50) ? r.int(0, 7) : r.int(-(2 ** 31), 2 ** 31 - 1),
    shapeNull: r.chance(4),
    stridesNull: r.chance(25),
    shape,
    strides,
    strict: r.chance(10),
    counted: !r.chance(6),
    data: "null",
    byteOffset: 0n,
    dataBytes: 1,
  };
}

interface Model {
  /** Error codes the refusal may carry; empty when the tensor must be accepted. */
  codes: Set<string>;
  layoutKnown: boolean;
  empty: boolean;
  size: bigint;
  strides: bigint[];
  min: bigint;
  max: bigint;
  lo: bigint;
  hi: bigint;
  /** Accepted read-only because its data cannot be written. */
  dataReadOnly: boolean;
}

const floorDiv = (a: bigint, b: bigint) => (a >= 0n ? a / b : -((-a + b - 1n) / b));

function modelLayout(c: Case): Model {
  const m: Model = {
    codes: new Set(),
    layoutKnown: false,
    empty: false,
    size: 0n,
    strides: [],
    min: 0n,
    max: 0n,
    lo: 0n,
    hi: 0n,
    dataReadOnly: false,
  };
  if (c.versioned && c.major !== 1) {
    m.codes.add("version");
    return m;
  }
  if (c.versioned && (BigInt.asUintN(64, c.flags) & ~7n) !== 0n) m.codes.add("flags");
  if (c.lanes !== 1 || !SUPPORTED.has(`${c.code}:${c.bits}`)) m.codes.add("dtype");
  if (![1, 2, 3, 4, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16, 17, 18].includes(c.deviceType) || c.deviceId < 0) {
    m.codes.add("device");
  }
  if (c.ndim < 0 || c.ndim > RANK) {
    m.codes.add("rank");
    return m;
  }
  if (c.ndim > 0 && c.shapeNull) {
    m.codes.add("shape");
    return m;
  }
  if (c.shape.some((e) => e < 0n)) {
    m.codes.add("shape");
    return m;
  }
  m.empty = c.shape.includes(0n);
  m.size = m.empty ? 0n : c.shape.reduce((a, e) => a * e, 1n);
  if (m.size > EXACT || c.shape.some((e) => e > EXACT)) {
    m.codes.add("overflow");
    return m;
  }
  if (c.stridesNull) {
    let step = 1n;
    m.strides = new Array<bigint>(c.ndim);
    for (let d = c.ndim - 1; d >= 0; d--) {
      m.strides[d] = step;
      step *= c.shape[d]!;
    }
  } else m.strides = c.strides.slice();
  if (!m.empty) {
    for (let d = 0; d < c.ndim; d++) {
      const reach = (c.shape[d]! - 1n) * m.strides[d]!;
      if (reach < 0n) m.min += reach;
      else m.max += reach;
    }
  }
  const padded = c.versioned && (c.flags & 4n) !== 0n;
  const slot = BigInt(c.bits < 8 && padded ? 8 : c.bits);
  m.lo = floorDiv(m.min * slot, 8n);
  m.hi = floorDiv((m.max + 1n) * slot + 7n, 8n);
  if (
    !m.empty && (m.hi - m.lo > EXACT || -m.lo > EXACT || m.hi > EXACT || -m.min > EXACT || m.max > EXACT)
  ) {
    m.codes.add("overflow");
    return m;
  }
  m.layoutKnown = true;
  return m;
}

function modelPlacement(c: Case, m: Model, data: bigint): void {
  if (!m.layoutKnown) return;
  if (data === 0n && m.size !== 0n) m.codes.add("null_data");
  if (c.strict && c.byteOffset !== 0n) m.codes.add("byte_offset");
  const address = data + c.byteOffset;
  if (address > U64_MAX || (!m.empty && (address + m.lo < 0n || address + m.hi > U64_MAX))) {
    m.codes.add("overflow");
    return;
  }
  // The data range of host memory, checked natively once everything else holds.
  if (m.codes.size === 0 && !m.empty && HOST.has(c.deviceType)) {
    const access = c.data === "alloc" ? "rw" : listedAccess(address + m.lo, address + m.hi);
    if (access === "none") m.codes.add("null_data");
    m.dataReadOnly = access === "r";
  }
  // Addresses reach JS as numbers: element 0 at or beyond 2^53 is refused on the JS side.
  if (m.codes.size === 0 && address >= EXACT) m.codes.add("overflow");
}

function place(r: Rng, c: Case, m: Model): void {
  if (m.layoutKnown && !m.empty && m.hi - m.lo <= 65536n && r.chance(85)) {
    // Honest: element 0 sits -lo bytes (plus some slack) into an allocation covering the span.
    c.data = "alloc";
    c.byteOffset = c.strict && r.chance(90) ? 0n : -m.lo + BigInt(r.chance(50) ? 0 : r.int(0, 32));
    if (c.strict && c.byteOffset === 0n && m.lo < 0n) c.byteOffset = -m.lo;
    c.dataBytes = Number(c.byteOffset + m.hi) + (r.chance(50) ? 0 : r.int(0, 16));
    return;
  }
  c.data = r.chance(20) ? "null" : r.pick([
    0x1000n,
    BigInt(r.int(0x10000, 0x7fff_ffff)) << 12n,
    EXACT - 64n,
    EXACT + 4096n,
    U64_MAX - BigInt(r.int(0, 4096)),
    BigInt.asUintN(64, r.i64()),
  ]);
  if (r.chance(35)) c.byteOffset = r.pick([BigInt(r.int(0, 4096)), U64_MAX, 2n ** 63n, BigInt.asUintN(64, r.i64())]);
}

function checkView(c: Case, m: Model, view: BufferView, data: bigint): void {
  const address = data + c.byteOffset;
  assert.equal(view.address, address, "address");
  assert.deepEqual(view.shape, c.shape.slice(0, c.ndim).map(Number), "shape");
  const clamp = (s: bigint) => Number(s > EXACT ? EXACT : s < -EXACT ? -EXACT : s);
  assert.deepEqual(view.strides, m.strides.map(clamp), "strides");
  assert.equal(view.size, Number(m.size), "size");
  assert.deepEqual(view.dl, { code: c.code, bits: c.bits, lanes: 1 }, "dtype");
  assert.equal(deviceCode(view.device.type), c.deviceType, "device type");
  assert.equal(view.device.id, c.deviceId, "device id");
  if (c.versioned) {
    assert.deepEqual(view.version, { major: 1, minor: Math.min(c.minor, 2 ** 31 - 1) });
    assert.equal(view.access, (c.flags & 1n) !== 0n || m.dataReadOnly ? "readonly" : "readwrite");
    assert.equal(view.flags.subbytePadded, (c.flags & 4n) !== 0n);
  } else {
    assert.equal(view.version, null);
    assert.equal(view.access, m.dataReadOnly ? "readonly" : "unknown");
  }
}

/** array() must cover exactly the reachable bytes, inside the allocation; every element is read. */
function checkMemory(c: Case, m: Model, view: BufferView, data: bigint): number {
  if (!HOST.has(c.deviceType)) {
    assert.throws(() => view.array(), (e: unknown) => e instanceof DLPackError && e.code === "device");
    return 0;
  }
  const array = view.array();
  const start = BigInt(runtime().addressOf(array));
  const element0 = data + c.byteOffset;
  assert.equal(start, element0 + m.lo, "array() starts at the lowest element");
  assert.ok(BigInt(array.byteLength) <= m.hi - m.lo, "array() ends at the highest element");
  assert.ok(BigInt(array.byteLength) > m.hi - m.lo - BigInt(array.BYTES_PER_ELEMENT), "array() covers the span");
  assert.ok(start >= data && start + BigInt(array.byteLength) <= data + BigInt(c.dataBytes), "inside the allocation");
  if (view.size <= 2048) {
    const copy = view.toArray(); // reads every element through the strides
    assert.equal(copy.length, view.size * (view.dtype.startsWith("complex") ? 2 : 1));
    return view.size;
  }
  view.get(...view.shape.map((e) => e - 1));
  view.get(...view.shape.map(() => 0));
  return 2;
}

test(`importDLPack fuzz: ${CASES.toLocaleString("en")} random producers, refused or checked in memory`, () => {
  const r = new Rng(SEED);
  const baseline = live();
  const tally = { accepted: 0, inMemory: 0, elements: 0, refused: new Map<string, number>(), roundTrips: 0 };
  for (let k = 0; k < CASES; k++) {
    const c = generate(r);
    const m = modelLayout(c);
    place(r, c, m);
    const made = make({
      versioned: c.versioned,
      version: [c.major, c.minor],
      flags: c.flags,
      dtype: { code: c.code, bits: c.bits, lanes: c.lanes },
      device: [c.deviceType, c.deviceId],
      shape: c.shapeNull ? null : c.shape,
      ndim: c.ndim,
      strides: c.stridesNull ? null : c.strides,
      byteOffset: c.byteOffset,
      data: c.data,
      dataBytes: c.dataBytes,
      deleter: c.counted ? "counted" : "null",
    });
    const data = c.data === "alloc" ? BigInt(made.data) : c.data === "null" ? 0n : c.data;
    modelPlacement(c, m, data);
    const before = deleted();
    const at = `case ${k} (seed ${SEED}): ${JSON.stringify(c, (_, v) => typeof v === "bigint" ? `${v}n` : v)}`;
    let view: BufferView | undefined;
    let error: unknown;
    try {
      view = c.strict ? fromDLPack(made.source).view : importDLPack(made.source);
    } catch (e) {
      error = e;
    }
    if (m.codes.size > 0) {
      assert.ok(view === undefined, `accepted, but the model refuses with ${[...m.codes]}: ${at}`);
      assert.ok(error instanceof DLPackError, `not a DLPackError (${error}): ${at}`);
      assert.ok(m.codes.has(error.code), `refused with "${error.code}", model allows ${[...m.codes]}: ${at}`);
      assert.equal(deleted() - before, c.counted ? 1 : 0, `deleter calls on refusal: ${at}`);
      tally.refused.set(error.code, (tally.refused.get(error.code) ?? 0) + 1);
    } else {
      assert.ok(view !== undefined, `refused (${error}), but the model accepts: ${at}`);
      try {
        checkView(c, m, view, data);
        if (c.data === "alloc") {
          tally.elements += checkMemory(c, m, view, data);
          tally.inMemory++;
          if (r.chance(10) && HOST.has(c.deviceType)) {
            // Through our own export and back: same memory, and the producer waits for both.
            const again = importDLPack(exportDLPack(view));
            assert.equal(again.address, view.address);
            assert.deepEqual(again.shape, view.shape);
            view.dispose();
            assert.equal(deleted(), before, `released while re-imported: ${at}`);
            view = again;
            tally.roundTrips++;
          }
        }
      } catch (e) {
        view.dispose();
        throw e;
      }
      assert.equal(deleted(), before, `deleter ran while the view lives: ${at}`);
      view.dispose();
      assert.equal(deleted() - before, c.counted ? 1 : 0, `deleter calls after dispose: ${at}`);
      tally.accepted++;
    }
    if (!c.counted) tp.tp_free_uncounted(made.address, c.versioned ? 1 : 0);
  }
  assert.deepEqual(live(), baseline, "live counters back where they were");
  console.log(
    `importDLPack fuzz: ${CASES} cases (seed ${SEED}): ${tally.accepted} accepted (${tally.inMemory} checked in ` +
      `memory, ${tally.elements} elements read, ${tally.roundTrips} re-exported), refused: ${
        [...tally.refused].map(([code, n]) => `${code} ${n}`).join(", ")
      }`,
  );
  // The run must exercise both sides, or it proves little.
  assert.ok(tally.inMemory > CASES / 4, `only ${tally.inMemory} cases were checked in memory`);
  for (const code of ["version", "flags", "rank", "dtype", "device", "shape", "overflow", "null_data"]) {
    assert.ok((tally.refused.get(code) ?? 0) > 10, `too few "${code}" refusals: ${tally.refused.get(code)}`);
  }
}, { timeout: 120_000 });
