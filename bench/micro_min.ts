// The JS side of bench/micro.ts: the per-tensor hot paths (import + dispose with each address form,
// import + array(), export made and disposed in JS or released by a foreign consumer from C), timed
// in thread CPU time, the cases interleaved batch by batch. Prints one JSON object of medians (ns).
import { exportDLPack, importDLPack } from "../mod.ts";
import { runtime } from "../ffi/mod.ts";
import { tp } from "../tests/support/producer.ts";
import { threadNs } from "./cpu_time.ts";

const BATCH = 20_000;
const BATCHES = Number((globalThis as { Deno?: typeof Deno }).Deno?.args[0] ?? 15) || 15;

const address = tp.tp_static_tensor(1024, 1);
/** The address as this runtime's FFI hands it out: a Deno.PointerObject in Deno, a number in Bun. */
const native: unknown = runtime().name === "deno" ? Deno.UnsafePointer.create(BigInt(address)) : address;
const byNumber = { versioned: address };
const byBigInt = { versioned: BigInt(address) };
const byNative = { versioned: native } as { versioned: number };
const exported = new Float32Array(256);

const cases: Record<string, () => void> = {
  import_number: () => importDLPack(byNumber).dispose(),
  import_bigint: () => importDLPack(byBigInt).dispose(),
  import_native: () => importDLPack(byNative).dispose(),
  import_array: () => {
    const v = importDLPack(byNumber);
    v.array();
    v.dispose();
  },
  export_dispose: () => exportDLPack(exported).dispose(),
  export_foreign: () => tp.tp_consume(exportDLPack(exported).take(), 1),
};

const names = Object.keys(cases);
const samples: Record<string, number[]> = {};
// `names` are the keys of `cases`, and of `samples` once the first loop set them.
for (const name of names) {
  samples[name] = [];
  const fn = cases[name]!;
  for (let i = 0; i < BATCH; i++) fn();
}
for (let b = 0; b < BATCHES; b++) {
  for (const name of names) {
    const fn = cases[name]!;
    const t0 = threadNs();
    for (let i = 0; i < BATCH; i++) fn();
    samples[name]!.push((threadNs() - t0) / BATCH);
  }
}
const out: Record<string, number | string> = { runtime: runtime().name };
for (const name of names) {
  const s = samples[name]!.sort((x, y) => x - y);
  out[name] = s[0]!;
}
console.log(JSON.stringify(out));
