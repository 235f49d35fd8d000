// A self-contained round trip, with no foreign producer, so it runs wherever the module does: from
// a checkout, imported by URL (the library is then downloaded and verified by `ready()`), and
// compiled into a single binary. A TypedArray is exported as a DLPack capsule and imported back as
// a view over the very same memory.
import { exportDLPack, importDLPack, ready, stats } from "../mod.ts";
import { runtime } from "../ffi/mod.ts";

const library = await ready(); // loads the local build, or fetches the release build once
console.log(`dlpack-ts roundtrip on ${runtime().name} ${runtime().os}-${runtime().arch}`);
console.log(`library: ${library}`);

const data = Float32Array.from([1, 2, 3, 4, 5, 6]);
{
  using view = importDLPack(exportDLPack(data, { shape: [2, 3] }), { producer: "roundtrip" });
  const m = view.as("float32", 2);
  console.log(`imported: dtype ${view.dtype}, shape [${view.shape.join(", ")}], access ${view.access}`);
  m.set(42, 1, 2);
  console.log(`view.set(42, 1, 2) -> data[5] = ${data[5]} (${data[5] === 42 ? "same memory" : "A COPY"})`);
  console.log(`row 1: [${[0, 1, 2].map((j) => m.get(1, j)).join(", ")}]`);
}
const s = stats();
console.log(`after dispose: ${s.exports} exports, ${s.imports} imports, ${s.pinned} pinned`);
if (data[5] !== 42 || s.exports !== 0 || s.imports !== 0 || s.pinned !== 0) {
  console.log("roundtrip FAILED");
  throw new Error("roundtrip failed");
}
console.log("roundtrip ok");
