// Library lookup and the ABI check, in fresh processes (the loaded library is cached per process).
import assert from "node:assert/strict";
import { copyFileSync, mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { ABI_VERSION, core, corePath, findLibrary, libraryFileName, localBuildPath, runtime } from "../../ffi/mod.ts";
import { DLPackError } from "../../mod.ts";
import { symbols } from "../../ffi/symbols.ts";
import { repoRoot, runIsolated, runScript, test } from "../support/harness.ts";

const probe = new URL("../support/load_probe.ts", import.meta.url).pathname;

test("the library loads from the local build and reports its ABI", () => {
  assert.equal(corePath(), localBuildPath(runtime().os));
  assert.equal(core().dlpk_abi_version(), ABI_VERSION);
  assert.equal(libraryFileName("linux"), "libdlpack.so");
  assert.equal(libraryFileName("darwin"), "libdlpack.dylib");
  assert.equal(libraryFileName("windows"), "dlpack.dll");
});

test("a missing library is a clear error listing what was tried and how to build", () => {
  assert.throws(() => findLibrary("DLPACK_TEST_UNSET_VARIABLE", "no_such_library"), (e: unknown) => {
    assert.ok(e instanceof DLPackError && e.code === "library");
    assert.match(
      e.message,
      /libno_such_library\.so not found; tried: DLPACK_TEST_UNSET_VARIABLE \(not set\); .*zig-out\/lib\/libno_such_library\.so \(not built\)/,
    );
    assert.match(e.message, /Build it with tools\/build\.sh/);
    return true;
  });
});

test("DLPACK_LIB pointing nowhere is an error, not a silent fallback", () => {
  const out = runScript(probe, { DLPACK_LIB: "/nonexistent/libdlpack.so" });
  assert.equal(out.code, 0, out.stderr);
  assert.match(out.stdout, /library: DLPACK_LIB=\/nonexistent\/libdlpack\.so: no such file/);
});

test("DLPACK_LIB pointing at a build is used", () => {
  const out = runScript(probe, { DLPACK_LIB: corePath() });
  assert.equal(out.code, 0, out.stderr);
  assert.equal(out.stdout.trim(), `loaded ${corePath()}`);
});

test("a library of another ABI version is refused with a clear error", () => {
  const other = findLibrary("DLPACK_TESTPROD_LIB", "dlpack_testprod");
  const out = runScript(probe, { DLPACK_LIB: other });
  assert.equal(out.code, 0, out.stderr);
  assert.match(
    out.stdout,
    new RegExp(`library: .*speaks native ABI 65535, this module needs ${ABI_VERSION}: rebuild it`),
  );
});

test("libdlpack stays mapped once retained, even after its handle is closed", () => {
  // Deleters and capsule destructors given to foreign code point into the library; a runtime that
  // closes its handle (Deno does when an isolate ends) must not unmap it under them.
  const probe = new URL("../support/retain_probe.ts", import.meta.url).pathname;
  const bare = runScript(probe, {}, { allowAll: true });
  assert.equal(bare.code, 0, bare.stderr);
  assert.match(bare.stdout, /mapped false/, "control: closing an unretained handle unmaps it");
  const retained = runScript(probe, {}, { args: ["--retain"], allowAll: true });
  assert.equal(retained.code, 0, retained.stderr);
  assert.match(retained.stdout, /retain 0\nmapped true/);
}, { skip: runtime().os === "linux" ? false : "reads /proc/self/maps (Linux)" });

test("the library is opened once: a file swapped in after the ABI probe's dlopen is never loaded", () => {
  // The ABI probe stays open while the whole table is bound, so every later dlopen finds the library
  // already loaded under that name and does not open the file again. The child swaps the test
  // producer (another ABI, none of the table's symbols) in right after the first dlopen returns.
  const dir = mkdtempSync(`${tmpdir()}/dlpack-once-`);
  try {
    const lib = `${dir}/libdlpack.so`;
    copyFileSync(corePath(), lib);
    const foreign = findLibrary("DLPACK_TESTPROD_LIB", "dlpack_testprod");
    const out = runIsolated(
      `import * as fs from "node:fs";
const ffi = globalThis.Deno ?? import.meta.require("bun:ffi");
const dlopen = ffi.dlopen;
const opened = [];
ffi.dlopen = (path, symbols) => {
  const library = dlopen.call(ffi, path, symbols);
  if (opened.push(path) === 1) {
    fs.copyFileSync(${JSON.stringify(foreign)}, ${JSON.stringify(`${lib}.new`)});
    fs.renameSync(${JSON.stringify(`${lib}.new`)}, ${JSON.stringify(lib)});
  }
  return library;
};
const { exportDLPack, importDLPack, ready } = await import(${JSON.stringify(`${repoRoot}/mod.ts`)});
try {
  console.log("ready " + await ready());
  using view = importDLPack(exportDLPack(new Float32Array([1, 2])));
  console.log("works " + view.dtype + " after " + opened.length + " dlopen calls");
} catch (error) {
  console.log("error " + error.message);
}
`,
      { env: { DLPACK_LIB: lib }, allowAll: true },
    );
    assert.equal(out.code, 0, out.stderr);
    // bun:ffi binds a symbol by its own name only: each second binding of one (`symbol` in the table)
    // is one more dlopen of the same, already loaded, library.
    const aliases = Object.values(symbols).filter((spec) => "symbol" in spec).length;
    const calls = runtime().name === "bun" ? 2 + aliases : 2;
    assert.equal(out.stdout, `ready ${lib}\nworks float32 after ${calls} dlopen calls\n`);
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
}, { skip: runtime().os === "linux" ? false : "copies the Linux build" });

test("a first call that writes its inputs before it loads the library gets them to native code", () => {
  // The scratch is the library's own memory, viewed once the library loads; a call that writes
  // its inputs first (an export with a shape, an array interface) and loads the library with its
  // native call must not lose them.
  for (const first of ["export", "array interface"]) {
    const run = runIsolated(`
import assert from "node:assert/strict";
import { exportDLPack, fromArrayInterface, importDLPack } from "${repoRoot}/mod.ts";
import { runtime } from "${repoRoot}/ffi/mod.ts";
const values = new Int16Array([1, 2, 3, 4, 5, 6]);
const view = "${first}" === "export"
  ? importDLPack(exportDLPack(values, { shape: [2, 3] }))
  : fromArrayInterface({ data: [runtime().addressOf(values), false], shape: [3, 2], strides: [2, 6], typestr: "<i2" }, values);
assert.equal(view.dtype, "int16");
assert.deepEqual(Array.from(view.toArray() as Int16Array), "${first}" === "export" ? [1, 2, 3, 4, 5, 6] : [1, 4, 2, 5, 3, 6]);
view.dispose();
console.log("DONE");
`);
    assert.equal(run.code, 0, `${first}: ${run.stderr}\n${run.stdout}`);
    assert.match(run.stdout, /DONE/);
  }
});
