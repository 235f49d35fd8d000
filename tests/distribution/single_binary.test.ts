// Single binaries: the round-trip example compiled into one executable by `bun build --compile`
// (library embedded through a `type: "file"` import) and by `deno compile --include`, each copied
// alone into an empty folder outside the repository and run there with a bare environment.
import assert from "node:assert/strict";
import { chmodSync, copyFileSync, mkdirSync, mkdtempSync, readdirSync, rmSync, statSync } from "node:fs";
import { tmpdir } from "node:os";
import { libraryFileName, runtime } from "../../ffi/mod.ts";
import { repoRoot, spawn, type Spawned, test, tool } from "../support/harness.ts";

const rt = runtime();
const show = (out: Spawned) => `exit ${out.code}\n--- stdout\n${out.stdout}\n--- stderr\n${out.stderr}`;

/** Builds with `build(output)`, moves the executable alone into an empty folder, runs it there. */
async function buildAndRunAlone(build: (output: string) => Promise<Spawned>): Promise<Spawned> {
  const root = mkdtempSync(`${tmpdir()}/dlpack-bin-`);
  try {
    const output = `${root}/build/roundtrip`;
    mkdirSync(`${root}/build`);
    const built = await build(output);
    assert.equal(built.code, 0, show(built));
    const alone = `${root}/alone`;
    mkdirSync(alone);
    copyFileSync(output, `${alone}/roundtrip`);
    chmodSync(`${alone}/roundtrip`, 0o755);
    rmSync(`${root}/build`, { recursive: true, force: true });
    assert.deepEqual(readdirSync(alone), ["roundtrip"]);
    console.log(`  single binary: ${(statSync(`${alone}/roundtrip`).size / 2 ** 20).toFixed(1)} MiB`);
    // No PATH to the toolchains, no DLPACK_* variables, a HOME with nothing in it.
    mkdirSync(`${root}/home`);
    return await spawn(`${alone}/roundtrip`, [], { cwd: alone, env: { PATH: "/usr/bin:/bin", HOME: `${root}/home` } });
  } finally {
    rmSync(root, { recursive: true, force: true });
  }
}

function assertRoundtrip(out: Spawned, library: RegExp): void {
  assert.equal(out.code, 0, show(out));
  assert.match(out.stdout, library, show(out));
  assert.ok(!out.stdout.includes(repoRoot), "the binary loaded something from the checkout");
  assert.match(out.stdout, /view\.set\(42, 1, 2\) -> data\[5\] = 42 \(same memory\)/);
  assert.match(out.stdout, /^after dispose: 0 exports, 0 imports, 0 pinned$/m);
  assert.match(out.stdout, /^roundtrip ok$/m);
}

test("bun build --compile: one executable with the library embedded runs alone in an empty folder", async () => {
  const out = await buildAndRunAlone((output) =>
    spawn(tool("bun"), ["build", "--compile", "examples/bun/compiled.ts", "--outfile", output], { cwd: repoRoot })
  );
  assertRoundtrip(out, /^dlpack-ts roundtrip on bun /m);
  // Bun extracts the embedded file for dlopen under its virtual /$bunfs root.
  assert.match(out.stdout, /^library: \/\$bunfs\/root\/libdlpack-[a-z0-9]+\.so$/m);
}, {
  skip: rt.os === "linux" ? false : "examples/bun/compiled.ts embeds the Linux build (libdlpack.so)",
  timeout: 120_000,
});

// deno compile copies a `denort` runtime into every executable. Deno 2.9.6 downloads it from
// dl.deno.land; the npm and PyPI packages of Deno ship only the full `deno` binary, and pointing
// DENORT_BIN at that one yields an executable that behaves as the deno CLI instead of the program.
const denort = rt.env("DENORT_BIN");
test("deno compile --include: one executable with the library embedded runs alone in an empty folder", async () => {
  const local = `zig/zig-out/lib/${libraryFileName(rt.os)}`;
  const out = await buildAndRunAlone((output) =>
    spawn(tool("deno"), [
      "compile",
      "--allow-ffi",
      "--allow-read",
      "--allow-env",
      "--include",
      local,
      "--output",
      output,
      "examples/roundtrip.ts",
    ], { cwd: repoRoot, env: { DENORT_BIN: denort ?? "", HOME: rt.env("HOME") ?? "" }, timeoutMs: 300_000 })
  );
  assertRoundtrip(out, /^dlpack-ts roundtrip on deno /m);
  // Deno finds the included file next to the module in its embedded file system and extracts it.
  assert.match(out.stdout, /^library: .*\/zig\/zig-out\/lib\/libdlpack\.so$/m);
}, {
  skip: denort === undefined || denort === ""
    ? "deno compile needs the denort 2.9.6 runtime, which it downloads from dl.deno.land (not reachable here; no " +
      "npm/PyPI/Debian package ships it): set DENORT_BIN to a denort-x86_64-unknown-linux-gnu binary to run this"
    : false,
  timeout: 300_000,
});
