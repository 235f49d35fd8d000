// The tensors-on-disk rows of the benchmark, in the runtime it is started with: loading a 1 GiB
// safetensors file of 256 tensors (every tensor a view over one mapping), the RSS that costs, and
// the lazy form taking one tensor. bench/peers.py times safetensors.numpy.load_file and safe_open
// on the same file in the same run. bench/run.ts writes the file first (`ensureIoFile`) and names
// it in DLPACK_BENCH_IO_FILE; run alone (`deno run -A bench/io.ts`, `bun run bench/io.ts`) this
// writes it if needed and prints its figures as one JSON object. bench/cases.ts includes them.
import { closeSync, existsSync, mkdirSync, openSync, readFileSync, statSync, writeSync } from "node:fs";
import { loadSafetensors, openSafetensors } from "../io.ts";
import { runtime } from "../ffi/mod.ts";

type Figures = Record<string, number | string | boolean>;

/** 256 float32 tensors of [1024, 1024]: 1 GiB of data. */
const TENSORS = 256;
const SIDE = 1024;
const TENSOR_BYTES = SIDE * SIDE * 4;
const SAMPLES = 9;
const WARM_UP = 10;
const LAZY_WARM_UP = 200;

/** Where bench/run.ts puts the file. */
export function ioFilePath(root: string): string {
  return `${root}.scratch/bench/1GiB.safetensors`;
}

/** Writes the 1 GiB file unless it is there with the right size (real bytes, not a sparse file: a
 * reader then reads what is on the disk or in the page cache, as for a real model). */
export function ensureIoFile(path: string): void {
  const names = Array.from({ length: TENSORS }, (_, i) => `layer.${String(i).padStart(3, "0")}.weight`);
  const header: Record<string, unknown> = {};
  names.forEach((name, i) => {
    header[name] = { dtype: "F32", shape: [SIDE, SIDE], data_offsets: [i * TENSOR_BYTES, (i + 1) * TENSOR_BYTES] };
  });
  const json = JSON.stringify(header);
  const text = new TextEncoder().encode(json.padEnd(Math.ceil(json.length / 8) * 8, " "));
  const size = 8 + text.length + TENSORS * TENSOR_BYTES;
  if (existsSync(path) && statSync(path).size === size) return;
  mkdirSync(path.slice(0, path.lastIndexOf("/")), { recursive: true });
  const fd = openSync(path, "w");
  try {
    const prefix = new Uint8Array(8 + text.length);
    new DataView(prefix.buffer).setBigUint64(0, BigInt(text.length), true);
    prefix.set(text, 8);
    writeSync(fd, prefix);
    const chunk = new Float32Array(SIDE * SIDE);
    for (let i = 0; i < TENSORS; i++) {
      chunk.fill(i);
      writeSync(fd, new Uint8Array(chunk.buffer));
    }
  } finally {
    closeSync(fd);
  }
}

function rssBytes(): number {
  return Number(readFileSync("/proc/self/statm", "utf8").split(" ")[1]) * 4096;
}

function median(values: number[]): number {
  values.sort((a, b) => a - b);
  return values[values.length >> 1]!;
}

/** Adds the figures to `out` (`io` says why when the file is not there). */
export function ioCases(out: Figures, path = runtime().env("DLPACK_BENCH_IO_FILE")): void {
  if (path === undefined || !existsSync(path)) {
    out.io = "unavailable: DLPACK_BENCH_IO_FILE names no file (bench/run.ts writes it)";
    return;
  }
  out.io = "measured";
  // Warm-up: the library, the JIT, the header's pages.
  for (let i = 0; i < WARM_UP; i++) loadSafetensors(path).dispose();
  // The lazy open's header parse is hot code that runs once per open: JavaScriptCore compiles it
  // in its optimizing tiers only after some dozens of opens (10 left Bun's figure 1.5-2x its warm one).
  for (let i = 0; i < LAZY_WARM_UP; i++) {
    const file = openSafetensors(path);
    file.get("layer.000.weight").dispose();
    file.dispose();
  }
  const load: number[] = [];
  const rss: number[] = [];
  for (let s = 0; s < SAMPLES; s++) {
    const before = rssBytes();
    const t0 = performance.now();
    const file = loadSafetensors(path);
    load.push(performance.now() - t0);
    rss.push(rssBytes() - before);
    if (Object.keys(file.tensors).length !== TENSORS) throw new Error("the bench file lost tensors");
    file.dispose();
  }
  out.io_load_1GiB_ms = median(load);
  out.io_load_1GiB_rss_bytes = median(rss);
  // The lazy form: map, check the header, take one tensor, read its last element.
  const lazy: number[] = [];
  for (let s = 0; s < SAMPLES; s++) {
    const t0 = performance.now();
    const file = openSafetensors(path);
    const view = file.get("layer.255.weight");
    if (view.get(SIDE - 1, SIDE - 1) !== 255) throw new Error("the bench file holds other values");
    lazy.push(performance.now() - t0);
    view.dispose();
    file.dispose();
  }
  out.io_open_get_one_ms = median(lazy);
}

if (import.meta.main) {
  const root = new URL("../", import.meta.url).pathname;
  const path = runtime().env("DLPACK_BENCH_IO_FILE") ?? ioFilePath(root);
  ensureIoFile(path);
  const out: Figures = { runtime: runtime().name };
  ioCases(out, path);
  console.log(JSON.stringify(out));
}
