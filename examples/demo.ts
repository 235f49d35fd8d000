// The demo: a foreign C library (examples/producer.c) hands tensors over through DLPack; this
// program imports them zero-copy, reads them honouring strides, shows a refusal, shares memory
// with numpy both ways when Python is available, and shows that every producer deleter ran once
// everything was disposed. Runs unchanged in Deno and Bun.
import { DLPackError, importDLPack, stats } from "../mod.ts";
import { fromPython, openPython, type Python, toPython } from "../python.ts";
import { findLibrary, openLibrary, runtime } from "../ffi/mod.ts";

const producer = openLibrary(
  findLibrary("DLPACK_DEMO_PRODUCER", "demo_producer"),
  {
    producer_matrix: { args: [], returns: "usize" },
    producer_transposed_legacy: { args: [], returns: "usize" },
    producer_countdown: { args: [], returns: "usize" },
    producer_malformed: { args: [], returns: "usize" },
    producer_live_tensors: { args: [], returns: "i32" },
  } as const,
).symbols;

const hex = (n: bigint) => `0x${n.toString(16)}`;
console.log(`dlpack-ts demo on ${runtime().name}`);

console.log("\n1. A float32 matrix (DLManagedTensorVersioned, writable):");
{
  using m = importDLPack({ versioned: producer.producer_matrix() }, { producer: "producer.c" });
  const typed = m.as("float32", 2);
  console.log(
    `   dtype ${m.dtype}, shape [${m.shape.join(", ")}], strides [${
      m.strides.join(", ")
    }], access ${m.access}, version ${m.version?.major}.${m.version?.minor}`,
  );
  console.log(`   address ${hex(m.address)}; array() = [${typed.array().join(", ")}] (zero-copy)`);
  typed.set(99, 1, 2);
  console.log(`   set(99, 1, 2) wrote into the producer's memory: get(1, 2) = ${typed.get(1, 2)}`);
}

console.log("\n2. The same kind of data seen transposed (legacy DLManagedTensor, strides [1, 3]):");
{
  using t = importDLPack({ legacy: producer.producer_transposed_legacy() });
  console.log(
    `   shape [${t.shape.join(", ")}], strides [${
      t.strides.join(", ")
    }], F-contiguous ${t.fContiguous}, access ${t.access} (legacy carries no flag)`,
  );
  console.log(`   rows: ${[0, 1, 2].map((i) => `[${t.get(i, 0)}, ${t.get(i, 1)}]`).join(" ")}`);
  console.log(`   toArray() (a C-order copy) = [${t.toArray().join(", ")}]`);
}

console.log("\n3. int64 counting down through a negative stride, read-only, byte_offset 32:");
{
  using c = importDLPack({ versioned: producer.producer_countdown() });
  console.log(`   strides [${c.strides.join(", ")}], access ${c.access}, values [${c.toArray().join(", ")}]`);
  try {
    c.set(0n, 0);
  } catch (error) {
    console.log(`   set() refused: ${(error as DLPackError).code}: ${(error as Error).message}`);
  }
}

console.log("\n4. A malformed tensor (float6 code with 8 bits) is refused, and still released:");
try {
  importDLPack({ versioned: producer.producer_malformed() });
} catch (error) {
  if (!(error instanceof DLPackError)) throw error;
  console.log(`   DLPackError [${error.code}]: ${error.message}`);
}

console.log("\n5. The same memory shared with numpy in an embedded CPython:");
let py: Python | undefined;
try {
  py = openPython();
  py.exec("import numpy as np");
} catch (error) {
  console.log(`   Python with numpy is not available, skipping this part (${(error as Error).message.slice(0, 120)})`);
}
if (py !== undefined) {
  const x = new Float32Array([1, 2, 3, 4]);
  {
    using t = toPython(x, py);
    py.set("t", t);
    py.exec("a = np.from_dlpack(t)\na *= 10");
    console.log(`   a JS Float32Array handed to numpy, which multiplied it in place: JS now sees [${x.join(", ")}]`);
    const same = py.eval("a.ctypes.data").toJS() === runtime().addressOf(x);
    console.log(`   numpy's data pointer is the Float32Array's address: ${same}`);
    py.exec("del a, t");
  }
  {
    py.exec("m = np.arange(6.0).reshape(2, 3)");
    using m = py.eval("m");
    using v = fromPython(m);
    const same = BigInt(py.eval("m.ctypes.data").toJS() as number) === v.address;
    console.log(
      `   a numpy array imported into JS: ${v.producer}, ${v.dtype} [${v.shape.join(", ")}], same address: ${same}`,
    );
    v.set(-1, 0, 0);
    console.log(`   JS wrote -1 at [0, 0]; numpy sees m[0, 0] = ${py.eval("float(m[0, 0])").toJS()}`);
    py.exec("del m");
  }
}

const s = stats();
console.log("\n6. After disposing everything:");
console.log(`   stats(): imports ${s.imports}, exports ${s.exports}, allocations ${s.allocations}, pinned ${s.pinned}`);
console.log(`   producer.c still holds ${producer.producer_live_tensors()} tensors (every deleter ran exactly once)`);
if (s.imports !== 0 || producer.producer_live_tensors() !== 0) throw new Error("demo leaked a tensor");
