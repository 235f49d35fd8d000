// Library lookup beyond the local build: useLibrary(), ready() on a checkout, the cache folder and
// base URL rules, and the release table lookup (the downloads themselves: tests/distribution/url_import.test.ts).
import assert from "node:assert/strict";
import { copyFileSync, mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import {
  baseUrl,
  cacheDirectory,
  corePath,
  DEFAULT_BASE_URL,
  localBuildPath,
  RELEASE_VERSION,
  type Runtime,
  runtime,
} from "../../ffi/mod.ts";
import { Permissions } from "../../ffi/permissions.ts";
import { fetchRelease } from "../../ffi/remote.ts";
import { DLPackError, ready, useLibrary } from "../../mod.ts";
import { runScript, runtimeName, selfExecutable, spawn, test } from "../support/harness.ts";

const probe = new URL("../support/use_probe.ts", import.meta.url).pathname;
const loadProbe = new URL("../support/load_probe.ts", import.meta.url).pathname;

/** The running binding with a made-up environment (and optionally another OS or CPU). */
function fakeRuntime(env: Record<string, string>, os = runtime().os, arch = runtime().arch): Runtime {
  return { ...runtime(), env: (name: string) => env[name], os, arch };
}

const isLibraryError = (pattern: RegExp) => (e: unknown) => {
  assert.ok(e instanceof DLPackError && e.code === "library", String(e));
  assert.match(e.message, pattern);
  return true;
};

test("ready() on a checkout loads the local build without touching the network", async () => {
  assert.equal(await ready(), localBuildPath(runtime().os));
  assert.equal(await ready(), corePath(), "a second call resolves to the same library");
});

test("useLibrary() refuses to switch once the library is loaded, and refuses non-file URLs", () => {
  corePath();
  useLibrary(corePath()); // the same path is fine
  assert.throws(() => useLibrary("/elsewhere/libdlpack.so"), isLibraryError(/already loaded from .*; call useLibrary/));
  assert.throws(() => useLibrary(new URL("https://example.com/libdlpack.so")), isLibraryError(/needs a file path/));
  // Neither a string nor a URL: an argument error, not a TypeError from reading its properties.
  for (const wrong of [null, undefined, 42, { protocol: "file:", pathname: "/x" }]) {
    assert.throws(() => useLibrary(wrong as unknown as string), (e: unknown) => {
      assert.ok(e instanceof DLPackError && e.code === "argument", String(e));
      assert.match(e.message, /^useLibrary\(\) needs a file path or a file: URL, got /);
      return true;
    });
  }
  assert.throws(() => useLibrary(new URL("file:///a%ZZ.so")), isLibraryError(/needs a file path/));
});

test("useLibrary(path) is used in a fresh process; DLPACK_LIB still wins over it", () => {
  const dir = mkdtempSync(`${tmpdir()}/dlpack-use-`);
  try {
    const copy = `${dir}/copy-of-libdlpack.so`;
    copyFileSync(corePath(), copy);
    const chosen = runScript(probe, { DLPACK_TEST_USE: copy });
    assert.equal(chosen.code, 0, chosen.stderr);
    assert.equal(chosen.stdout.trim(), `loaded ${copy}`);
    const env = runScript(probe, { DLPACK_TEST_USE: copy, DLPACK_LIB: corePath() });
    assert.equal(env.stdout.trim(), `loaded ${corePath()}`);
    const missing = runScript(probe, { DLPACK_TEST_USE: `${dir}/nothing.so` });
    assert.match(missing.stdout, /^library: could not load .*nothing\.so/);
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
}, { skip: runtime().os === "linux" ? false : "copies the Linux build" });

test("the cache folder: DLPACK_CACHE, then DENO_DIR, XDG_CACHE_HOME, LOCALAPPDATA (Windows), HOME", () => {
  const all = { DLPACK_CACHE: "/c/", DENO_DIR: "/d", XDG_CACHE_HOME: "/x", LOCALAPPDATA: "C:\\L", HOME: "/h" };
  assert.deepEqual(cacheDirectory(fakeRuntime(all)), { dir: "/c", from: "DLPACK_CACHE" });
  assert.deepEqual(cacheDirectory(fakeRuntime({ ...all, DLPACK_CACHE: "" })), {
    dir: "/d/dlpack-ts",
    from: "DENO_DIR",
  });
  const { DLPACK_CACHE: _c, DENO_DIR: _d, ...rest } = all;
  assert.deepEqual(cacheDirectory(fakeRuntime(rest)), { dir: "/x/dlpack-ts", from: "XDG_CACHE_HOME" });
  const { XDG_CACHE_HOME: _x, ...homeOnly } = rest;
  assert.deepEqual(cacheDirectory(fakeRuntime(homeOnly, "linux")), { dir: "/h/.cache/dlpack-ts", from: "HOME" });
  assert.deepEqual(cacheDirectory(fakeRuntime(homeOnly, "windows")), { dir: "C:\\L/dlpack-ts", from: "LOCALAPPDATA" });
  assert.deepEqual(cacheDirectory(fakeRuntime({})), {
    missing: "no cache folder: none of DLPACK_CACHE, DENO_DIR, XDG_CACHE_HOME, HOME is set",
  });
});

test("the cache folder and base URL under Deno's permissions: a refused override is missing, never passed over", () => {
  const refusing = (env: Record<string, string>, refused: string[]): Runtime => ({
    ...fakeRuntime(env),
    granted: (kind, target) => !(kind === "env" && refused.includes(target!)),
    request: () => false,
    mainModule: () => "/work/app.ts",
  });
  // A conventional folder that cannot be read is passed over, and the reason kept.
  const lenient = refusing({ DENO_DIR: "/d", HOME: "/h" }, ["DENO_DIR"]);
  const perm = new Permissions(lenient);
  assert.deepEqual(cacheDirectory(lenient, perm), { dir: "/h/.cache/dlpack-ts", from: "HOME" });
  assert.equal(perm.missing, false, "a conventional variable is only needed, not missing");
  assert.deepEqual(cacheDirectory(refusing({}, ["DENO_DIR", "HOME"])), {
    missing: "no cache folder: none of DLPACK_CACHE, DENO_DIR, XDG_CACHE_HOME, HOME is set; " +
      "Deno denies reading DENO_DIR, HOME: run with --allow-env=DENO_DIR,HOME",
  });
  // The explicit overrides never fall back silently: the folder is unknown, the variable missing,
  // and the run line computes the folder in the shell as the module would.
  const strict = refusing({ HOME: "/h" }, ["DLPACK_CACHE"]);
  const strictPerm = new Permissions(strict);
  assert.deepEqual(cacheDirectory(strict, strictPerm), { unknown: true });
  assert.deepEqual(strictPerm.missingFlags(), ["--allow-env=DLPACK_CACHE"]);
  const basePerm = new Permissions(refusing({}, ["DLPACK_BASE_URL"]));
  assert.equal(baseUrl(refusing({}, ["DLPACK_BASE_URL"]), basePerm), DEFAULT_BASE_URL);
  assert.deepEqual(basePerm.missingFlags(), ["--allow-env=DLPACK_BASE_URL"]);
  assert.equal(basePerm.runLine(), "deno run --allow-env=DLPACK_BASE_URL /work/app.ts");
});

test("the base URL: the versioned GitHub release by default, DLPACK_BASE_URL overrides it", () => {
  assert.equal(DEFAULT_BASE_URL, `https://github.com/dlpack-ts/dlpack-ts/releases/download/v${RELEASE_VERSION}/`);
  assert.equal(baseUrl(fakeRuntime({})), DEFAULT_BASE_URL);
  assert.equal(baseUrl(fakeRuntime({ DLPACK_BASE_URL: "http://mirror/x" })), "http://mirror/x/");
  assert.equal(baseUrl(fakeRuntime({ DLPACK_BASE_URL: "http://mirror/x/" })), "http://mirror/x/");
});

test("a DLPACK_BASE_URL that is no URL is a library error naming it, not a TypeError", async () => {
  const dir = mkdtempSync(`${tmpdir()}/dlpack-base-`);
  try {
    await assert.rejects(
      fetchRelease(fakeRuntime({ DLPACK_BASE_URL: "::not a url", DLPACK_CACHE: dir }), [], () => "Build it."),
      isLibraryError(/^DLPACK_BASE_URL=::not a url\/ is not a URL; tried: /),
    );
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
});

test("a platform without a release build is a clear error before any download", async () => {
  const tried = ["DLPACK_LIB (not set)"];
  await assert.rejects(
    fetchRelease(fakeRuntime({ DLPACK_BASE_URL: "http://127.0.0.1:9/" }, "linux", "riscv64"), tried, () => "Build it."),
    isLibraryError(
      new RegExp(
        `^no release build of libdlpack ${RELEASE_VERSION} for linux-riscv64; tried: DLPACK_LIB \\(not set\\); ` +
          `a release build for linux-riscv64 \\(there is none; built: libdlpack-.*\\)\\. Build it\\.$`,
      ),
    ),
  );
});

test(
  "DLPACK_LIB or useLibrary naming a FIFO, a folder or a device is refused at once, never a hang in dlopen",
  async () => {
    const dir = mkdtempSync(`${tmpdir()}/dlpack-fifo-`);
    try {
      const fifo = `${dir}/libdlpack.so`;
      const made = await spawn("mkfifo", [fifo]);
      assert.equal(made.code, 0, made.stderr);
      const run = (script: string, env: Record<string, string>) =>
        spawn(selfExecutable(), runtimeName === "deno" ? ["run", "-A", script] : ["run", script], {
          env: { HOME: runtime().env("HOME") ?? "/", ...env },
          timeoutMs: 30_000, // dlopen of a FIFO without a writer waits forever: a hang shows as code 124
        });
      const byEnv = await run(loadProbe, { DLPACK_LIB: fifo });
      assert.equal(byEnv.code, 0, byEnv.stderr);
      assert.equal(
        byEnv.stdout.trim(),
        `library: DLPACK_LIB=${fifo}: it is a FIFO, not a library file. Unset it to use the local build, or point it ` +
          "at a built libdlpack.so.",
      );
      const chosen = await run(probe, { DLPACK_TEST_USE: fifo });
      assert.equal(chosen.code, 0, chosen.stderr);
      assert.equal(
        chosen.stdout.trim(),
        `library: could not load ${fifo}: it is a FIFO, not a library file. useLibrary() needs a built libdlpack.`,
      );
      const folder = await run(probe, { DLPACK_TEST_USE: dir });
      assert.match(folder.stdout, /^library: could not load .*: it is a folder, not a library file\./);
      const device = await run(loadProbe, { DLPACK_LIB: "/dev/zero" });
      assert.match(device.stdout, /^library: DLPACK_LIB=\/dev\/zero: it is a device, not a library file\./);
    } finally {
      rmSync(dir, { recursive: true, force: true });
    }
  },
  { skip: runtime().os === "linux" ? false : "makes a FIFO with mkfifo (Linux)", timeout: 120_000 },
);

test("useLibrary refuses a path with a NUL character: dlopen would load the part before it", () => {
  for (const path of ["/tmp/x.so\0junk", new URL("file:///tmp/x.so%00junk")]) {
    assert.throws(() => useLibrary(path), (e: unknown) => {
      assert.ok(e instanceof DLPackError && e.code === "argument", String(e));
      assert.equal(e.message, 'useLibrary() got a path with a NUL character: "/tmp/x.so\\u0000junk"');
      return true;
    });
  }
});
