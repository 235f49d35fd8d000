// Hostile files and paths: every malformed safetensors or .npy file is refused with a DLPackError
// ("file") that names the file and says what is wrong, before any view exists (nothing stays
// mapped); paths with a NUL byte, folders, FIFOs (never opened blocking), devices, missing and empty
// files are refused as such; Deno's read permission is asked before native code opens anything. The
// cases that crash a process by design (a mapped file truncated under its views, a write through
// array() of a read-only mapping) run in a child process.
import assert from "node:assert/strict";
import { execFileSync } from "node:child_process";
import { mkdirSync, symlinkSync, writeFileSync } from "node:fs";
import { loadNpy, loadSafetensors, openSafetensors } from "../../io.ts";
import { refused } from "../support/assertions.ts";
import { repoRoot, runIsolated, runtimeName, selfExecutable, spawn, test } from "../support/harness.ts";
import { nothingLeft, scratchFolder } from "../support/io_files.ts";
import { localBuildPath, runtime } from "../../ffi/mod.ts";

const folder = scratchFolder("hostile");
const text = new TextEncoder();

/** A safetensors file: `json` as the header (padded to 8), then `data` bytes; `length` overrides the
 * header length field. */
function safetensors(json: string | Uint8Array, data = 0, length?: bigint): Uint8Array {
  const header = typeof json === "string" ? text.encode(json) : json;
  const out = new Uint8Array(8 + header.length + data);
  new DataView(out.buffer).setBigUint64(0, length ?? BigInt(header.length), true);
  out.set(header, 8);
  return out;
}

/** A .npy file of version `major`: magic, version, length, `header`, then `data` bytes. */
function npy(header: string, data = 0, major = 1, magic = "\x93NUMPY"): Uint8Array {
  const bytes = new Uint8Array(magic.length + 2 + (major > 1 ? 4 : 2) + header.length + data);
  for (let i = 0; i < magic.length; i++) bytes[i] = magic.charCodeAt(i);
  bytes[6] = major;
  bytes[7] = 0;
  const view = new DataView(bytes.buffer);
  if (major > 1) view.setUint32(8, header.length, true);
  else view.setUint16(8, header.length, true);
  bytes.set(text.encode(header), major > 1 ? 12 : 10);
  return bytes;
}

const entry = (dtype: string, shape: string, offsets: string) =>
  `{"dtype":"${dtype}","shape":${shape},"data_offsets":${offsets}}`;

/** A file of ten one-byte tensors t0..t9, then `name` (one of them) again over the eleventh byte. */
function tenAndAgain(name: string): Uint8Array {
  const ten = Array.from({ length: 10 }, (_, i) => `"t${i}": ${entry("U8", "[1]", `[${i}, ${i + 1}]`)}`);
  return safetensors(`{${ten.join(", ")}, "${name}": ${entry("U8", "[1]", "[10, 11]")}}`, 11);
}

const SAFETENSORS_CASES: Array<[string, Uint8Array, RegExp]> = [
  ["too short", new Uint8Array([1, 2, 3]), /3 bytes is too short for a safetensors file/],
  ["header length beyond the file", safetensors("{}", 0, 1000n), /header length 1000 is beyond the file \(10 bytes\)/],
  ["header length 2^63", safetensors("{}", 0, 1n << 63n), /header length 2\^53 or more is absurd/],
  ["header length above the limit", safetensors("{}", 0, 100_000_001n), /header length 100000001 is absurd/],
  ["not JSON", safetensors("hello!"), /expected the header \(a JSON object\), found 'h' at byte 8/],
  ["a JSON array", safetensors("[1, 2] "), /expected the header \(a JSON object\)/],
  ["an entry that is no object", safetensors('{"a": 5}'), /expected tensor "a" \(a JSON object\)/],
  ["no dtype", safetensors('{"a": {"shape": [], "data_offsets": [0, 0]}}'), /tensor "a" has no dtype/],
  [
    "an unknown dtype",
    safetensors(`{"a": ${entry("Q4", "[1]", "[0, 1]")}}`, 1),
    /unknown dtype "Q4" \(the format's: BOOL/,
  ],
  ["a negative extent", safetensors(`{"a": ${entry("U8", "[-1]", "[0, 1]")}}`, 1), /shape\[0\] must be a whole number/],
  ["a fractional extent", safetensors(`{"a": ${entry("U8", "[1.0]", "[0, 1]")}}`, 1), /must be a whole number/],
  ["an exponent", safetensors(`{"a": ${entry("U8", "[1e0]", "[0, 1]")}}`, 1), /must be a whole number/],
  ["a leading zero", safetensors(`{"a": ${entry("U8", "[01]", "[0, 1]")}}`, 1), /no leading zeros/],
  ["rank 65", safetensors(`{"a": ${entry("U8", `[${Array(65).fill(1).join(",")}]`, "[0, 1]")}}`, 1), /more than 64/],
  ["three offsets", safetensors(`{"a": ${entry("U8", "[1]", "[0, 1, 1]")}}`, 1), /data_offsets has more than 2/],
  ["one offset", safetensors(`{"a": ${entry("U8", "[1]", "[0]")}}`, 1), /must be \[begin, end\]/],
  [
    "offsets ending before they begin",
    safetensors(`{"a": ${entry("U8", "[0]", "[4, 2]")}}`, 4),
    /end before they begin/,
  ],
  [
    "a size that does not match its range",
    safetensors(`{"a": ${entry("F32", "[3]", "[0, 8]")}}`, 8),
    /needs 12 bytes, but data_offsets \[0, 8\] hold 8/,
  ],
  [
    "offsets beyond the data",
    safetensors(`{"a": ${entry("U8", "[16]", "[0, 16]")}}`, 8),
    /reach byte 16 of the data, beyond its end/,
  ],
  [
    "overlapping tensors",
    safetensors(`{"a": ${entry("U8", "[8]", "[0, 8]")}, "b": ${entry("U8", "[8]", "[4, 12]")}}`, 12),
    /tensor "b" at data_offsets \[4, 12\] overlaps the tensor before it/,
  ],
  [
    "a gap between tensors",
    safetensors(`{"a": ${entry("U8", "[4]", "[0, 4]")}, "b": ${entry("U8", "[4]", "[8, 12]")}}`, 12),
    /leaves a gap after the tensor before it/,
  ],
  ["bytes after the last tensor", safetensors(`{"a": ${entry("U8", "[4]", "[0, 4]")}}`, 6), /and 2 bytes follow them/],
  [
    "a duplicate name",
    safetensors(`{"a": ${entry("U8", "[1]", "[0, 1]")}, "a": ${entry("U8", "[1]", "[1, 2]")}}`, 2),
    /key "a" appears twice/,
  ],
  // The first 8 keys of an object are checked in a list, the later ones in a set: both halves.
  ["a duplicate name among many, the second beyond the eighth key", tenAndAgain("t2"), /key "t2" appears twice/],
  ["a duplicate name, both beyond the eighth key", tenAndAgain("t9"), /key "t9" appears twice/],
  [
    "a metadata value that is no string",
    safetensors('{"__metadata__": {"n": 1}}'),
    /__metadata__ "n" must be a string/,
  ],
  ["invalid UTF-8", safetensors(new Uint8Array([0x7b, 0x22, 0xc3, 0x28, 0x22, 0x3a, 0x31, 0x7d])), /invalid UTF-8/],
  ["a lone surrogate escape", safetensors('{"\\ud800": {}}'), /lone surrogate/],
  ["text after the object", safetensors("{} x"), /expected the end of the header, found 'x'/],
  ["a control character in a name", safetensors('{"a\nb": {}}'), /control character/],
  ["an unclosed string", safetensors('{"abc'), /a string is not closed/],
  [
    "deep nesting in an ignored field",
    safetensors(`{"a": {"x": ${"[".repeat(100)}${"]".repeat(100)}}}`),
    /nested more than 64 deep/,
  ],
  [
    "F4 with an odd element count",
    safetensors(`{"a": ${entry("F4", "[3]", "[0, 1]")}}`, 1),
    /3 elements of F4 do not fill whole bytes/,
  ],
  [
    "more than 2^53 elements",
    safetensors(`{"a": ${entry("U8", "[1099511627776, 1099511627776]", "[0, 1]")}}`, 1),
    /more than 2\^53 elements/,
  ],
  ["a header length below 2", safetensors("{", 0, 1n), /cannot hold a JSON object/],
];

for (const [what, bytes, message] of SAFETENSORS_CASES) {
  test(`safetensors refused before any view exists: ${what}`, () => {
    const path = folder.path(`hostile.safetensors`);
    writeFileSync(path, bytes);
    const where = new RegExp(`^"${path.replace(/[.*+?^${}()|[\]\\]/g, "\\$&")}": `);
    for (
      const load of [
        () => loadSafetensors(path),
        () => openSafetensors(path),
        () => loadSafetensors(path, { copy: true }),
      ]
    ) {
      const error = refused(load, "file", message);
      assert.match(error.message, where, "the message names the file");
    }
    nothingLeft();
  });
}

const NPY_CASES: Array<[string, Uint8Array, RegExp]> = [
  ["bad magic", npy("{}", 0, 1, "\x93NUMPX"), /not a \.npy file/],
  ["version 4.0", npy("{}", 0, 4), /version 4\.0 is not one of 1\.0, 2\.0 and 3\.0/],
  [
    "a header length beyond the file",
    (() => {
      const b = npy("{}");
      b[8] = 0xff;
      return b;
    })(),
    /header length 255 is beyond the file/,
  ],
  [
    "a header beyond the limit",
    (() => {
      const b = npy("{}", 0, 2);
      new DataView(b.buffer).setUint32(8, 70_000, true);
      return b;
    })(),
    /header length 70000 is absurd/,
  ],
  ["no dict", npy("[1, 2]\n"), /expected '\{' \(a dict\)/],
  [
    "a call in it",
    npy("{'descr': __import__('os').system('echo hi'), 'fortran_order': False, 'shape': (1,), }\n", 4),
    /expected a string/,
  ],
  [
    "a structured dtype",
    npy("{'descr': [('a', '<f4')], 'fortran_order': False, 'shape': (1,), }\n", 4),
    /a list \(a structured dtype/,
  ],
  ["big-endian", npy("{'descr': '>f4', 'fortran_order': False, 'shape': (1,), }\n", 4), /'>f4' is big-endian/],
  [
    "an unknown descr",
    npy("{'descr': '<V2', 'fortran_order': False, 'shape': (1,), }\n", 2),
    /'<V2' is no dtype this library has/,
  ],
  ["an object array", npy("{'descr': '|O', 'fortran_order': False, 'shape': (1,), }\n", 8), /'\|O' is no dtype/],
  ["a missing key", npy("{'descr': '<f4', 'shape': (1,), }\n", 4), /no 'fortran_order' key/],
  ["an extra key", npy("{'descr': '<f4', 'fortran_order': False, 'shape': (1,), 'x': 1, }\n", 4), /the key 'x'/],
  [
    "a key twice",
    npy("{'descr': '<f4', 'descr': '<f8', 'fortran_order': False, 'shape': (1,), }\n", 8),
    /the key 'descr'/,
  ],
  [
    "a shape that is no tuple",
    npy("{'descr': '<f4', 'fortran_order': False, 'shape': (3), }\n", 12),
    /a 1-tuple is written \(n,\)/,
  ],
  [
    "a negative extent",
    npy("{'descr': '<f4', 'fortran_order': False, 'shape': (-1,), }\n", 4),
    /expected a whole number/,
  ],
  ["fortran_order 1", npy("{'descr': '<f4', 'fortran_order': 1, 'shape': (1,), }\n", 4), /expected True or False/],
  [
    "an escape in a string",
    npy("{'descr': '<f\\x34', 'fortran_order': False, 'shape': (1,), }\n", 4),
    /not plain ASCII text/,
  ],
  [
    "text after the dict",
    npy("{'descr': '<f4', 'fortran_order': False, 'shape': (1,), } + 1\n", 4),
    /text after the dict/,
  ],
  [
    "data shorter than the shape",
    npy("{'descr': '<f8', 'fortran_order': False, 'shape': (2, 3), }\n", 40),
    /needs 48 bytes, the file holds 40/,
  ],
  [
    "more than 2^53 elements",
    npy("{'descr': '|u1', 'fortran_order': False, 'shape': (1099511627776, 1099511627776), }\n"),
    /more than 2\^53 elements/,
  ],
];

for (const [what, bytes, message] of NPY_CASES) {
  test(`.npy refused before any view exists: ${what}`, () => {
    const path = folder.path("hostile.npy");
    writeFileSync(path, bytes);
    refused(() => loadNpy(path), "file", message);
    refused(() => loadNpy(path, { copy: true }), "file", message);
    nothingLeft();
  });
}

test("paths: NUL bytes, folders, FIFOs (not opened blocking), devices, missing and empty files, maxBytes", () => {
  refused(() => loadNpy("a\0b.npy"), "argument", /holds a NUL byte/);
  refused(() => loadNpy(""), "argument", /empty/);
  refused(() => loadNpy(7 as unknown as string), "argument", /must be a string/);
  refused(() => loadNpy("\udc00.npy"), "argument", /lone surrogate/);
  refused(() => loadNpy(`/${"x".repeat(5000)}`), "argument", /paths have fewer than 4096/);
  refused(() => loadSafetensors(folder.dir), "file", /it is a folder, not a regular file/);
  const fifo = folder.path("pipe");
  execFileSync("mkfifo", [fifo]);
  refused(() => loadSafetensors(fifo), "file", /it is a FIFO \(named pipe\), not a regular file/);
  refused(() => loadNpy("/dev/null"), "file", /it is a character device/);
  refused(() => loadNpy(folder.path("none.npy")), "file", /no such file or folder while looking it up/);
  writeFileSync(folder.path("empty.npy"), "");
  refused(() => loadNpy(folder.path("empty.npy")), "file", /the file is empty/);
  writeFileSync(folder.path("big.npy"), new Uint8Array(100));
  refused(
    () => loadNpy(folder.path("big.npy"), { maxBytes: 99 }),
    "file",
    /it has 100 bytes, more than maxBytes \(99\)/,
  );
  refused(() => loadNpy(folder.path("big.npy"), { maxBytes: -1 }), "argument", /maxBytes/);
  refused(() => loadNpy(folder.path("big.npy"), { copy: "yes" as unknown as boolean }), "argument", /copy/);
  // A symbolic link is followed to what it names: a folder behind one is still refused.
  mkdirSync(folder.path("sub"));
  symlinkSync(folder.path("sub"), folder.path("link"));
  refused(() => loadNpy(folder.path("link")), "file", /it is a folder/);
  nothingLeft();
});

test("Deno: a path the program may not read is refused, naming the --allow-read flag to add", async () => {
  const secret = folder.path("secret.npy");
  writeFileSync(secret, npy("{'descr': '|u1', 'fortran_order': False, 'shape': (2,), }\n", 2));
  const lib = localBuildPath(runtime().os)!;
  const script = folder.path("denied.ts");
  writeFileSync(
    script,
    `import { loadNpy } from ${JSON.stringify(`${repoRoot}/io.ts`)};
try { loadNpy(${
      JSON.stringify(secret)
    }); console.log("LOADED"); } catch (e) { console.log("REFUSED " + e.code + " " + e.message); }`,
  );
  const out = await spawn(selfExecutable(), [
    "run",
    "--allow-ffi",
    "--allow-env=DLPACK_LIB",
    `--allow-read=${lib},${repoRoot}`,
    script,
  ]);
  assert.equal(out.code, 0, out.stderr);
  assert.match(
    out.stdout,
    /^REFUSED file ".*secret\.npy": Deno denies reading it\. Run with --allow-read=.*secret\.npy/m,
  );
}, { skip: runtimeName === "deno" ? false : "only Deno has permissions to refuse" });

const SIGBUS_CHILD = (copy: boolean) => `
import { truncateSync } from "node:fs";
import { zeros } from "${repoRoot}/mod.ts";
import { loadSafetensors, saveSafetensors } from "${repoRoot}/io.ts";
const path = ${JSON.stringify(folder.path(`truncated-${copy}.safetensors`))};
const w = zeros([1 << 20], "float32");
w.fill(3);
saveSafetensors(path, { w });
w.dispose();
const file = loadSafetensors(path, { copy: ${copy} });
truncateSync(path, 64);
console.log("READ " + file.tensors.w.get((1 << 20) - 1));
`;

test("a mapped file truncated under its views raises SIGBUS on access; copy: true reads it into memory", () => {
  const mappedRun = runIsolated(SIGBUS_CHILD(false), { allowAll: true });
  assert.ok(!mappedRun.stdout.includes("READ"), "the read of a truncated page did not return");
  assert.notEqual(mappedRun.code, 0, "the child died (SIGBUS)");
  const copiedRun = runIsolated(SIGBUS_CHILD(true), { allowAll: true });
  assert.equal(copiedRun.code, 0, copiedRun.stderr.slice(-1000));
  assert.match(copiedRun.stdout, /READ 3/);
});

test("a write through array() of a read-only mapping faults; writable: true maps privately", () => {
  const path = folder.path("readonly.npy");
  writeFileSync(path, npy("{'descr': '|u1', 'fortran_order': False, 'shape': (4,), }\n", 4));
  const child = (writable: boolean) =>
    runIsolated(`
import { loadNpy } from "${repoRoot}/io.ts";
const view = loadNpy(${JSON.stringify(path)}, { writable: ${writable} });
view.array()[0] = 1;
console.log("WROTE " + view.get(0));
`);
  const faulted = child(false);
  assert.ok(!faulted.stdout.includes("WROTE"));
  assert.notEqual(faulted.code, 0, "the child died (SIGSEGV)");
  const wrote = child(true);
  assert.equal(wrote.code, 0, wrote.stderr.slice(-1000));
  assert.match(wrote.stdout, /WROTE 1/);
});

test("built-ins replaced after load: loads and saves still read and write the true bytes", () => {
  const path = folder.path("polluted.safetensors");
  const out = folder.path("polluted-out.safetensors");
  const npyPath = folder.path("polluted.npy");
  const run = runIsolated(
    `
import { zeros } from "${repoRoot}/mod.ts";
import { loadNpy, loadSafetensors, openSafetensors, saveNpy, saveSafetensors } from "${repoRoot}/io.ts";
const w = zeros([2, 3], "float32");
for (let i = 0; i < 6; i++) w.set(i + 0.5, Math.floor(i / 3), i % 3);
saveSafetensors(${JSON.stringify(path)}, { w, "b.c": zeros([1], "int8") }, { k: "v" });
saveNpy(${JSON.stringify(npyPath)}, w);
const defineProperty = Object.defineProperty;
// (Bun's TextDecoder and TextEncoder methods cannot be replaced: those stay.)
const lie = (target, key, value) => {
  try { defineProperty(target, key, { configurable: true, writable: true, value }); } catch {}
};
for (const name of ["map", "slice", "sort", "join", "push", "fill", "filter", "indexOf", "includes"]) {
  lie(Array.prototype, name, function () { return [1 << 26]; });
}
for (const name of ["slice", "charCodeAt", "indexOf", "padStart", "padEnd", "split", "startsWith"]) {
  lie(String.prototype, name, function () { return 7; });
}
lie(String, "fromCharCode", () => "X");
lie(JSON, "stringify", () => "{}");
lie(JSON, "parse", () => ({}));
lie(Object, "keys", () => []);
lie(Object, "freeze", (x) => x);
lie(Math, "floor", () => 0);
lie(Math, "min", () => 0);
lie(Math, "ceil", () => 0);
lie(Set.prototype, "has", () => false);
lie(Map.prototype, "get", () => undefined);
lie(TextDecoder.prototype, "decode", () => "{}");
lie(TextEncoder.prototype, "encode", () => new Uint8Array(0));
lie(Reflect, "apply", () => { throw new Error("Reflect.apply was called"); });
lie(Function.prototype, "call", () => { throw new Error("Function.prototype.call was called"); });
lie(Function.prototype, "apply", () => { throw new Error("Function.prototype.apply was called"); });
for (let i = 0; i < 8; i++) defineProperty(Object.prototype, String(i), { configurable: true, set() {}, get() { return 1 << 26; } });
let seen = "";
const file = loadSafetensors(${JSON.stringify(path)});
seen += file.tensors.w.get(1, 2) + "|" + file.tensors["b.c"].get(0) + "|" + file.metadata.k;
saveSafetensors(${JSON.stringify(out)}, file.tensors, file.metadata);
file.dispose();
const again = openSafetensors(${JSON.stringify(out)});
const keys = again.keys();
seen += "|" + keys.length + "|" + keys[0] + "|" + keys[1];
const v = again.get("w");
seen += "|" + v.get(0, 1) + "|" + v.shape[1];
v.dispose();
again.dispose();
const n = loadNpy(${JSON.stringify(npyPath)});
seen += "|" + n.get(1, 0);
n.dispose();
let refused = "no";
try { loadNpy(${JSON.stringify(path)}); } catch (e) { refused = e.code; }
seen += "|" + refused;
for (let i = 0; i < 8; i++) delete Object.prototype[String(i)];
console.log("RESULT " + seen);
`,
    { allowAll: true },
  );
  const line = run.stdout.split("\n").find((l) => l.startsWith("RESULT "));
  assert.ok(run.code === 0 && line !== undefined, `exit ${run.code}: ${run.stderr.slice(-2000)}`);
  assert.equal(line, "RESULT 5.5|0|v|2|b.c|w|1.5|3|3.5|file");
  nothingLeft();
});

test("nothing is left behind: no mapping, no temporary file", () => {
  nothingLeft(folder.dir);
  folder.cleanup();
});
