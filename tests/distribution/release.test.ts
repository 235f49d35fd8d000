// The release artifacts tools/release.sh cross-builds into dist/: one per target, named after
// deno.json's version, matching the committed checksum table, each a shared library of the right
// format and CPU that exports the whole symbol table of ffi/symbols.ts, with the platform floors
// the build promises (glibc 2.17, macOS 11).
import assert from "node:assert/strict";
import { createHash } from "node:crypto";
import { existsSync, readdirSync, readFileSync, statSync } from "node:fs";
import {
  localBuildPath,
  MAX_RELEASE_BYTES,
  RELEASE_CHECKSUMS,
  RELEASE_VERSION,
  releaseFileName,
  runtime,
} from "../../ffi/mod.ts";
import { symbols } from "../../ffi/symbols.ts";
import { BinaryFormatError, compareVersions, readLibrary } from "../support/binfmt.ts";
import { repoRoot, test } from "../support/harness.ts";

const dist = `${repoRoot}/dist`;
const skip = existsSync(`${dist}/SHA256SUMS`) ? false : "dist/ not built (run tools/release.sh; tools/test.sh does)";

const TARGETS = [
  { os: "linux", arch: "x86_64", format: "ELF" },
  { os: "linux", arch: "aarch64", format: "ELF" },
  { os: "darwin", arch: "x86_64", format: "Mach-O" },
  { os: "darwin", arch: "aarch64", format: "Mach-O" },
  { os: "windows", arch: "x86_64", format: "PE" },
] as const;

/** The native name a table entry binds (a second binding of one names it in `symbol`). */
const nativeName = ([name, spec]: [string, object]) => (spec as { readonly symbol?: string }).symbol ?? name;
const required = Object.entries(symbols).filter(([, spec]) => !("optional" in spec && spec.optional)).map(nativeName);
const declared = new Set(Object.entries(symbols).map(nativeName));
const sha256 = (bytes: Uint8Array) => createHash("sha256").update(bytes).digest("hex");

test("release: one artifact per target, named after deno.json's version", () => {
  const version = JSON.parse(readFileSync(`${repoRoot}/deno.json`, "utf8")).version;
  assert.equal(RELEASE_VERSION, version, "ffi/checksums.ts was generated for another version: run tools/release.sh");
  const expected = TARGETS.map((t) => releaseFileName(version, t.os, t.arch)).sort();
  assert.deepEqual(Object.keys(RELEASE_CHECKSUMS).sort(), expected);
  assert.deepEqual(readdirSync(dist).filter((n) => n.startsWith("libdlpack-")).sort(), expected);
  assert.equal(releaseFileName("1.2.3", "windows", "x86_64"), "libdlpack-1.2.3-windows-x86_64.dll");
  assert.equal(releaseFileName("1.2.3", "darwin", "aarch64"), "libdlpack-1.2.3-darwin-aarch64.dylib");
}, { skip });

test("release: every artifact is far below the download cap, so the cap refuses only what no build can be", () => {
  for (const name of Object.keys(RELEASE_CHECKSUMS)) {
    const size = statSync(`${dist}/${name}`).size;
    assert.ok(size <= MAX_RELEASE_BYTES / 8, `${name} has ${size} bytes: raise MAX_RELEASE_BYTES in ffi/remote.ts`);
  }
}, { skip });

test("release: the artifacts match the committed checksum table and dist/SHA256SUMS", () => {
  const listed = readFileSync(`${dist}/SHA256SUMS`, "utf8").trim().split("\n").map((line) => {
    const [hash, name] = line.split(/ {2}/);
    return [name, hash] as const;
  });
  assert.deepEqual(Object.fromEntries(listed), { ...RELEASE_CHECKSUMS });
  for (const [name, hash] of Object.entries(RELEASE_CHECKSUMS)) {
    assert.equal(sha256(readFileSync(`${dist}/${name}`)), hash, `${name}: the table is stale; run tools/release.sh`);
  }
}, { skip });

for (const target of TARGETS) {
  const name = releaseFileName(RELEASE_VERSION, target.os, target.arch);
  test(`release: ${name} is a ${target.format} ${target.arch} shared library exporting the whole symbol table`, () => {
    const facts = readLibrary(readFileSync(`${dist}/${name}`), name);
    assert.equal(facts.format, target.format);
    assert.equal(facts.machine, target.arch);
    assert.ok(facts.sharedLibrary, `${name} is not a shared library`);
    const missing = required.filter((s) => !facts.exports.includes(s));
    assert.deepEqual(missing, [], `${name} lacks symbols of ffi/symbols.ts`);
    // The reverse too: an exported dlpk_ function the table does not list means the two drifted.
    assert.deepEqual(facts.exports.filter((s) => s.startsWith("dlpk_") && !declared.has(s)), []);
    if (target.format === "ELF") {
      const newest = facts.glibcVersions!.at(-1);
      assert.ok(newest !== undefined, "links no glibc symbols at all?");
      assert.ok(compareVersions(newest, "GLIBC_2.17") <= 0, `needs ${newest}, above the 2.17 floor`);
    }
    if (target.format === "Mach-O") assert.equal(facts.minOS, "11.0.0");
  }, { skip });
}

test("the format readers agree with the local native build and refuse what they cannot read", () => {
  const rt = runtime();
  const local = readLibrary(readFileSync(localBuildPath(rt.os)!), "local build");
  assert.equal(local.machine, rt.arch);
  assert.deepEqual(required.filter((s) => !local.exports.includes(s)), []);

  assert.throws(() => readLibrary(new TextEncoder().encode("#!/bin/sh\n")), BinaryFormatError);
  assert.throws(() => readLibrary(new Uint8Array(0)), /not an ELF, 64-bit Mach-O or PE file/);
  // A header cut short must be an error, not a read past the end.
  const elf = readFileSync(localBuildPath(rt.os)!);
  assert.throws(() => readLibrary(elf.subarray(0, 48), "cut"), /cut: truncated or corrupt/);
  assert.deepEqual(["GLIBC_2.17", "GLIBC_2.2.5", "GLIBC_2.9"].sort(compareVersions), [
    "GLIBC_2.2.5",
    "GLIBC_2.9",
    "GLIBC_2.17",
  ]);
}, { skip: runtime().os === "linux" ? false : "the local build is ELF only on Linux" });
