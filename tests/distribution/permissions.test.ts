// Deno's permissions, asked once: every flag and variable the library lookup needs is named in one
// error, as a `deno run` line that works when copied; in a terminal Deno's own prompt asks instead
// (driven through a pseudo-terminal); a cached run needs neither --allow-write nor --allow-net; hints
// only where they apply. The programs under test are Deno processes, run from both test runners.
import assert from "node:assert/strict";
import { cpSync, mkdirSync, mkdtempSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { cacheDirectory, localBuildPath, packagedPath, runtime } from "../../ffi/mod.ts";
import { artifact, denoWith, released, releaseServer, show, sourceCopy } from "../support/distribution.ts";
import { repoRoot, spawn, test, tool } from "../support/harness.ts";

const rt = runtime();
const local = localBuildPath(rt.os)!;
const prebuilt = packagedPath(artifact)!;
const probe = `${repoRoot}/tests/support/load_probe.ts`;
const linux = rt.os === "linux" ? false : "names the Linux build";
const noDist = rt.exists(released) ? false : `dist/${artifact} not built (run tools/release.sh; tools/test.sh does)`;
const python = rt.runCommand("python3", ["-c", "import pty"])?.code === 0 ? false : "python3 with its pty module";

/** A program that loads the library with `ready()` and makes one round trip, or prints the error. */
const app = (mod: string) =>
  `import { exportDLPack, importDLPack, ready } from ${JSON.stringify(mod)};
try {
  console.log("ready " + await ready());
  using view = importDLPack(exportDLPack(new Float64Array([1, 2, 3])));
  console.log("round trip " + view.dtype);
} catch (error) {
  console.log("error " + error.name + " " + error.code + ": " + error.message);
}
`;

/** The error's lines: what Deno denies, the run line, the notes and what was tried. */
function errorParts(stdout: string): { denied: string; runLine: string; rest: string } {
  const match =
    /^error DLPackError library: libdlpack could not be looked for: Deno denies (.*)\. Run with every permission it needs \(or answer Deno's prompts in a terminal\):\n {2}(.*)\n([^]*)$/m
      .exec(stdout);
  assert.ok(match !== null, stdout);
  const [, denied = "", runLine = "", rest = ""] = match;
  return { denied, runLine, rest };
}

/** The pinned Deno's folder first on PATH, so a copied `deno run ...` line runs it. */
const denoPath = `${tool("deno").replace(/\/[^/]*$/, "")}:/usr/bin:/bin`;

test("Deno permissions: one error names every missing flag and variable, as a run line that works copied", async () => {
  const b = sourceCopy("dlpack-perm-");
  const server = releaseServer();
  try {
    writeFileSync(`${b.root}/app.ts`, app(b.mod));
    // Nothing but reading the sources: the variables cannot be read, so the cache folder is computed
    // in the shell, and the default download hosts are named.
    const vendor = `--allow-read=${b.root}/vendor`;
    const bare = await denoWith([vendor], "app.ts", { HOME: b.home }, b.root);
    const none = errorParts(bare.stdout);
    assert.equal(
      none.denied,
      '--allow-ffi --allow-env=DLPACK_LIB,DLPACK_CACHE,DLPACK_BASE_URL "--allow-read=$CACHE" --allow-net=github.com',
      show(bare),
    );
    const env = "DLPACK_LIB,DLPACK_CACHE,DENO_DIR,XDG_CACHE_HOME,HOME,DLPACK_BASE_URL";
    assert.equal(
      none.runLine,
      "CACHE=${DLPACK_CACHE:-${DENO_DIR:+$DENO_DIR/dlpack-ts}}; CACHE=${CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/dlpack-ts}; " +
        `deno run --allow-ffi --allow-env=${env} "--allow-read=${b.root}/vendor/zig/zig-out/lib/libdlpack.so,` +
        `${b.root}/vendor/prebuilt/${artifact},$CACHE" "--allow-write=$CACHE" ` +
        `--allow-net=github.com,release-assets.githubusercontent.com,objects.githubusercontent.com ${b.root}/app.ts`,
    );
    assert.match(none.rest, /^\(--allow-net and --allow-write are for the first run, .*; the CACHE= part picks /m);

    // The shell's CACHE is the folder the module picks, whichever variables are set.
    const cases: Record<string, string>[] = [
      { HOME: "/h" },
      { HOME: "/h", XDG_CACHE_HOME: "/x" },
      { HOME: "/h", XDG_CACHE_HOME: "/x", DENO_DIR: "/d" },
      { HOME: "/h", DENO_DIR: "/d", DLPACK_CACHE: "/c" },
    ];
    const line = none.runLine.slice(0, none.runLine.indexOf("deno run"));
    for (const vars of cases) {
      const shell = await spawn("sh", ["-c", `${line}echo "$CACHE"`], { env: vars });
      const module = cacheDirectory({ ...rt, env: (name: string) => vars[name] });
      assert.equal(shell.stdout.trim(), "dir" in module ? module.dir : "", JSON.stringify(vars));
    }

    // With the variables readable the line names the folder and the mirror itself; copied into a
    // shell as it is, it runs.
    const vars = { HOME: b.home, DLPACK_CACHE: b.cache, DLPACK_BASE_URL: `http://127.0.0.1:${server.port}/dist/` };
    const some = await denoWith([vendor, "--allow-env"], "app.ts", vars, b.root);
    const named = errorParts(some.stdout);
    assert.equal(named.denied, `--allow-ffi --allow-read=${b.cache} --allow-net=127.0.0.1:${server.port}`);
    const copied = await spawn("sh", ["-c", named.runLine], { cwd: b.root, env: { ...vars, PATH: denoPath } });
    assert.equal(copied.stdout, `ready ${b.cache}/${artifact}\nround trip float64\n`, show(copied));
    assert.equal(copied.stderr, "", show(copied));
  } finally {
    await server.close();
    rmSync(b.root, { recursive: true, force: true });
  }
}, { skip: linux || noDist, timeout: 120_000 });

test(
  "Deno permissions: a cached run needs no --allow-write and no --allow-net; an uncached one loads unwritten",
  async () => {
    const b = sourceCopy("dlpack-perm-");
    const server = releaseServer();
    try {
      writeFileSync(`${b.root}/app.ts`, app(b.mod));
      const env = { HOME: b.home, DLPACK_CACHE: b.cache, DLPACK_BASE_URL: `http://127.0.0.1:${server.port}/dist/` };
      const read = `--allow-read=${b.root}`;
      // Downloaded but not writable: loaded from the verified bytes all the same, with a warning.
      const net = `--allow-net=127.0.0.1:${server.port}`;
      const unwritten = await denoWith(["--allow-ffi", "--allow-env", read, net], "app.ts", env, b.root);
      const url = `http://127.0.0.1:${server.port}/dist/${artifact}`;
      assert.equal(unwritten.stdout, `ready ${url}\nround trip float64\n`, show(unwritten));
      assert.ok(
        unwritten.stderr.includes(
          `but ${b.cache}/${artifact} could not be written: Deno denies writing there: run with --allow-write=${b.cache}`,
        ),
        show(unwritten),
      );
      mkdirSync(b.cache);
      cpSync(released, `${b.cache}/${artifact}`);
      const cached = await denoWith(["--allow-ffi", "--allow-env", read], "app.ts", env, b.root);
      assert.equal(cached.stdout, `ready ${b.cache}/${artifact}\nround trip float64\n`, show(cached));
      assert.equal(cached.stderr, "");
      assert.deepEqual(server.requests, [`/dist/${artifact}`], "the cached run downloads nothing");
    } finally {
      await server.close();
      rmSync(b.root, { recursive: true, force: true });
    }
  },
  { skip: linux || noDist, timeout: 90_000 },
);

test(
  "Deno permissions: in a terminal Deno's own prompt asks; yes to each runs, the first no ends in the one error",
  async () => {
    const dir = mkdtempSync(`${tmpdir()}/dlpack-prompt-`);
    try {
      writeFileSync(`${dir}/app.ts`, app(`${repoRoot}/mod.ts`));
      const env = { HOME: rt.env("HOME") ?? "/", NO_COLOR: "1", TERM: "dumb" };
      const driver = `${repoRoot}/tests/support/prompts.py`;
      const yes = await spawn("python3", [driver, "yyy", tool("deno"), "run", "app.ts"], { cwd: dir, env });
      assert.match(yes.stdout, /Deno requests ffi access\./, show(yes));
      assert.match(yes.stdout, /Deno requests env access to "DLPACK_LIB"\./);
      assert.ok(yes.stdout.includes(`Deno requests read access to "${local}".`), show(yes));
      assert.match(
        yes.stdout,
        new RegExp(`^ready ${local}\nround trip float64\n\nprompts: 3\nexit: 0$`, "m"),
        show(yes),
      );

      // Refusing the first prompt asks nothing more: the error names everything, as without a terminal.
      const no = await spawn("python3", [driver, "n", tool("deno"), "run", "app.ts"], { cwd: dir, env });
      assert.match(no.stdout, /\nprompts: 1\nexit: 0\n$/, show(no));
      const parts = errorParts(no.stdout.replace(/\n+prompts: 1\nexit: 0\n?$/, ""));
      assert.equal(parts.denied, `--allow-ffi --allow-env=DLPACK_LIB --allow-read=${local},${prebuilt}`, show(no));
    } finally {
      rmSync(dir, { recursive: true, force: true });
    }
  },
  { skip: linux || python, timeout: 120_000 },
);

test("Deno permissions: DLPACK_LIB that may not be read is never passed over: the one error names it", async () => {
  const out = await denoWith(["--allow-ffi", "--allow-read"], probe, { DLPACK_LIB: "/nonexistent/libdlpack.so" });
  assert.equal(out.code, 0, show(out));
  assert.equal(
    out.stdout.trim(),
    "library: libdlpack could not be looked for: Deno denies --allow-env=DLPACK_LIB. Run with every permission it " +
      `needs (or answer Deno's prompts in a terminal):\n  deno run --allow-ffi --allow-env=DLPACK_LIB ` +
      `--allow-read=${local} ${probe}\nTried: DLPACK_LIB (not checked: Deno denies reading it, and a set ` +
      "DLPACK_LIB is never passed over).",
  );
  const granted = await denoWith(["--allow-ffi", "--allow-read", "--allow-env=DLPACK_LIB"], probe);
  assert.equal(granted.stdout.trim(), `loaded ${local}`, show(granted));
}, { skip: linux, timeout: 60_000 });

test("Deno permissions: without --allow-read a library is neither 'no such file' nor 'not built'", async () => {
  const set = await denoWith(["--allow-ffi", "--allow-env=DLPACK_LIB"], probe, { DLPACK_LIB: local });
  assert.equal(set.code, 0, show(set));
  assert.match(
    set.stdout,
    new RegExp(`^library: libdlpack could not be looked for: Deno denies --allow-read=${local}\\. `),
  );
  assert.ok(set.stdout.includes(`Tried: DLPACK_LIB=${local} (not checked: Deno denies reading it).`), show(set));
  const unset = await denoWith(["--allow-ffi", "--allow-env=DLPACK_LIB"], probe);
  assert.ok(
    unset.stdout.includes(
      `Tried: DLPACK_LIB (not set); ${local} (not checked: Deno denies reading it); ${prebuilt} (not checked either).`,
    ),
    show(unset),
  );
  const scoped = await denoWith(["--allow-ffi", "--allow-env=DLPACK_LIB", `--allow-read=${local}`], probe);
  assert.equal(scoped.stdout.trim(), `loaded ${local}`, show(scoped));
}, { skip: linux, timeout: 60_000 });

test(
  "Deno permissions: a path-scoped or missing --allow-ffi fails ready() up front, not the first export",
  async () => {
    const dir = mkdtempSync(`${tmpdir()}/dlpack-ffi-`);
    try {
      writeFileSync(
        `${dir}/app.ts`,
        `import { exportDLPack, ready } from ${JSON.stringify(`${repoRoot}/mod.ts`)};
const said = (e) => e.name + " " + e.code + ": " + e.message.split("\\n")[0];
try { console.log("ready " + await ready()); } catch (e) { console.log("ready failed " + said(e)); }
try { exportDLPack(new Float32Array(2)); console.log("exported"); } catch (e) { console.log("export failed " + said(e)); }
`,
      );
      const libDir = local.slice(0, local.lastIndexOf("/"));
      const scoped = await denoWith([`--allow-ffi=${libDir}`, "--allow-read", "--allow-env"], "app.ts", {}, dir);
      assert.equal(scoped.code, 0, show(scoped));
      const refusal = "DLPackError library: libdlpack could not be looked for: Deno denies --allow-ffi. Run with " +
        "every permission it needs (or answer Deno's prompts in a terminal):";
      assert.equal(scoped.stdout, `ready failed ${refusal}\nexport failed ${refusal}\n`, show(scoped));
      const none = await denoWith(["--allow-read", "--allow-env"], "app.ts", {}, dir);
      assert.equal(none.stdout, `ready failed ${refusal}\nexport failed ${refusal}\n`, show(none));
      const full = await denoWith(["--allow-ffi", "--allow-read", "--allow-env"], "app.ts", {}, dir);
      assert.equal(full.stdout, `ready ${local}\nexported\n`, show(full));
    } finally {
      rmSync(dir, { recursive: true, force: true });
    }
  },
  { timeout: 60_000 },
);

test("Deno permissions: FFI revoked after loading is a DLPackError at the next first use, not NotCapable", async () => {
  const dir = mkdtempSync(`${tmpdir()}/dlpack-ffi-`);
  try {
    writeFileSync(
      `${dir}/app.ts`,
      `import { exportDLPack, importDLPack, ready, zeros } from ${JSON.stringify(`${repoRoot}/mod.ts`)};
await ready();
await Deno.permissions.revoke({ name: "ffi" });
// Calls into the library opened before still run (Deno checks the permission at dlopen), and a
// round trip needs nothing else: the scratch was viewed as the library loaded.
importDLPack(exportDLPack(new Float32Array(2))).dispose();
console.log("round trip");
// A view of native memory as an ArrayBuffer needs Deno's pointer functions, which check it.
const view = zeros([2], "float32");
try {
  view.array();
  console.log("array");
} catch (e) {
  console.log("failed " + e.name + " " + e.code + ": " + e.message);
}
`,
    );
    const out = await denoWith(["--allow-ffi", "--allow-read", "--allow-env"], "app.ts", {}, dir);
    assert.equal(out.code, 0, show(out));
    assert.ok(
      out.stdout.startsWith(
        "round trip\nfailed DLPackError library: Deno's FFI permission was revoked after libdlpack was loaded: ",
      ),
      show(out),
    );
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
}, { timeout: 60_000 });

test(
  "Deno permissions: a failed download's hint says to check DLPACK_BASE_URL when it is set, not to set one",
  async () => {
    const b = sourceCopy("dlpack-perm-");
    try {
      writeFileSync(`${b.root}/app.ts`, app(b.mod));
      const flags = ["--allow-ffi", "--allow-env", `--allow-read=${b.root}`, `--allow-write=${b.cache}`, "--allow-net"];
      const env = { HOME: b.home, DLPACK_CACHE: b.cache, DLPACK_BASE_URL: "http://127.0.0.1:9/dist/" };
      const set = await denoWith(flags, "app.ts", env, b.root);
      assert.match(set.stdout, /could not be downloaded; tried: .*\. Set DLPACK_LIB to a built libdlpack, build one /);
      assert.match(
        set.stdout,
        new RegExp(`, or check that DLPACK_BASE_URL serves ${artifact.replaceAll(".", "\\.")}\\.$`, "m"),
      );
      assert.doesNotMatch(set.stdout, /to a mirror/);
    } finally {
      rmSync(b.root, { recursive: true, force: true });
    }
  },
  { skip: linux, timeout: 60_000 },
);
