// Import by URL, end to end: a loopback server (127.0.0.1 only, started here, stopped by itself)
// serves this checkout's module files and the release artifacts of dist/; `deno run http://...`
// runs examples/roundtrip.ts from a folder outside the repository with a fresh DENO_DIR and cache,
// so the library can only come from the release download. Runs under both test runners (the server
// is then Deno's or Bun's); the program under test is always a Deno process, since only Deno
// imports modules by URL.
import assert from "node:assert/strict";
import { createHash } from "node:crypto";
import { existsSync, mkdirSync, mkdtempSync, readdirSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { RELEASE_CHECKSUMS, RELEASE_VERSION, releaseFileName, runtime } from "../../ffi/mod.ts";
import { repoRoot, serveLoopback, spawn, type Spawned, test, tool } from "../support/harness.ts";

const rt = runtime();
const artifact = releaseFileName(RELEASE_VERSION, rt.os, rt.arch);
const built = `${repoRoot}/dist/${artifact}`;
const skip = !existsSync(built)
  ? `dist/${artifact} not built (run tools/release.sh; tools/test.sh does)`
  : RELEASE_CHECKSUMS[artifact] === undefined
  ? `no release build for ${rt.os}-${rt.arch}`
  : false;

const SERVED = /^\/(mod\.ts|(src|ffi|examples)\/[A-Za-z0-9_./-]+\.ts)$/;

/** The repository's module files, dist/ as published, a tampered copy and a missing folder. */
function handler(path: string): Response {
  if (path.split("/").includes("..")) return new Response("no", { status: 403 });
  const release = /^\/(dist|tampered|missing)\/([A-Za-z0-9_.-]+)$/.exec(path);
  if (release !== null) {
    const [, folder, name] = release;
    const file = `${repoRoot}/dist/${name}`;
    if (folder === "missing" || !existsSync(file)) return new Response("not found", { status: 404 });
    const bytes = readFileSync(file);
    if (folder === "tampered") bytes[bytes.length >> 1]! ^= 0xff; // one flipped byte in the middle
    return new Response(bytes, { headers: { "content-type": "application/octet-stream" } });
  }
  if (SERVED.test(path) && existsSync(`${repoRoot}${path}`)) {
    return new Response(readFileSync(`${repoRoot}${path}`), {
      headers: { "content-type": "application/typescript; charset=utf-8" },
    });
  }
  return new Response("not found", { status: 404 });
}

interface Sandbox {
  readonly root: string;
  readonly work: string;
  readonly denoDir: string;
  readonly home: string;
}

/** Fresh folders outside the repository: the program's cwd, DENO_DIR and HOME. */
function sandbox(): Sandbox {
  const root = mkdtempSync(`${tmpdir()}/dlpack-url-`);
  assert.ok(!root.startsWith(repoRoot));
  const box = { root, work: `${root}/work`, denoDir: `${root}/deno`, home: `${root}/home` };
  for (const dir of [box.work, box.denoDir, box.home]) mkdirSync(dir);
  return box;
}

/** `deno run` of the URL demo with exactly the permissions the README documents (`net`: the hosts
 * --allow-net names, by default the server's). */
function runByUrl(
  box: Sandbox,
  port: number,
  base: string,
  cache: string,
  env: Record<string, string> = {},
  net = `127.0.0.1:${port}`,
) {
  return spawn(tool("deno"), [
    "run",
    "--allow-ffi", // a path-scoped --allow-ffi lets dlopen through but not the pointer functions
    `--allow-net=${net}`,
    `--allow-read=${cache}`,
    `--allow-write=${cache}`,
    "--allow-env=DLPACK_LIB,DLPACK_BASE_URL,DLPACK_CACHE,DENO_DIR,XDG_CACHE_HOME,HOME",
    `http://127.0.0.1:${port}/examples/roundtrip.ts`,
  ], {
    cwd: box.work,
    env: { DENO_DIR: box.denoDir, HOME: box.home, DLPACK_BASE_URL: `http://127.0.0.1:${port}/${base}/`, ...env },
  });
}

const sha256 = (path: string) => createHash("sha256").update(readFileSync(path)).digest("hex");
const show = (out: Spawned) => `exit ${out.code}\n--- stdout\n${out.stdout}\n--- stderr\n${out.stderr}`;

/** A port nothing listens on: one a server just gave back. */
async function closedPort(): Promise<number> {
  const server = serveLoopback(() => new Response(""));
  await server.close();
  return server.port;
}

test("by URL: a fresh cache downloads, verifies and caches the release build; a second run works offline", async () => {
  const box = sandbox();
  const server = serveLoopback(handler);
  try {
    const cache = `${box.denoDir}/dlpack-ts`; // DENO_DIR is set, DLPACK_CACHE is not
    const first = await runByUrl(box, server.port, "dist", cache);
    assert.equal(first.code, 0, show(first));
    assert.match(first.stdout, new RegExp(`^library: ${cache}/${artifact}$`, "m"), show(first));
    assert.match(first.stdout, /view\.set\(42, 1, 2\) -> data\[5\] = 42 \(same memory\)/);
    assert.match(first.stdout, /^roundtrip ok$/m);
    assert.equal(sha256(`${cache}/${artifact}`), RELEASE_CHECKSUMS[artifact]);
    assert.deepEqual(readdirSync(cache), [artifact], "only the library is left in the cache (no temporary files)");
    assert.ok(server.requests.includes("/examples/roundtrip.ts") && server.requests.includes("/mod.ts"));
    assert.deepEqual(server.requests.filter((p) => p.startsWith("/dist/")), [`/dist/${artifact}`]);

    await server.close();
    const offline = await runByUrl(box, server.port, "dist", cache);
    assert.equal(offline.code, 0, show(offline));
    assert.match(offline.stdout, new RegExp(`^library: ${cache}/${artifact}$`, "m"));
    assert.match(offline.stdout, /^roundtrip ok$/m);
  } finally {
    await server.close();
    rmSync(box.root, { recursive: true, force: true });
  }
}, { skip, timeout: 120_000 });

test("by URL: a tampered artifact is refused, nothing is cached, and the error lists what was tried", async () => {
  const box = sandbox();
  const server = serveLoopback(handler);
  try {
    const cache = `${box.root}/explicit-cache`; // DLPACK_CACHE wins over DENO_DIR
    const out = await runByUrl(box, server.port, "tampered", cache, { DLPACK_CACHE: cache });
    assert.notEqual(out.code, 0, show(out));
    assert.doesNotMatch(out.stdout, /roundtrip ok/);
    const url = `http://127.0.0.1:${server.port}/tampered/${artifact}`;
    assert.match(out.stderr, /DLPackError/);
    assert.ok(out.stderr.includes(`${artifact} from ${url} does not match this module's checksum table`), show(out));
    assert.ok(out.stderr.includes(`${cache}/${artifact} (from DLPACK_CACHE; not cached yet)`), show(out));
    assert.match(out.stderr, new RegExp(`SHA-256 [0-9a-f]{64}, expected ${RELEASE_CHECKSUMS[artifact]}: refused`));
    assert.match(out.stderr, /DLPACK_LIB \(not set\)/);
    assert.ok(!existsSync(`${cache}/${artifact}`), "a refused download is never cached");
  } finally {
    await server.close();
    rmSync(box.root, { recursive: true, force: true });
  }
}, { skip, timeout: 120_000 });

test("by URL: a 404, an unreachable server and a refused --allow-net are clear errors naming the URL", async () => {
  const box = sandbox();
  const server = serveLoopback(handler);
  try {
    const cache = `${box.denoDir}/dlpack-ts`;
    const missing = await runByUrl(box, server.port, "missing", cache);
    assert.notEqual(missing.code, 0, show(missing));
    assert.ok(
      missing.stderr.includes(`http://127.0.0.1:${server.port}/missing/${artifact} (HTTP 404 Not Found)`),
      show(missing),
    );
    assert.match(missing.stderr, new RegExp(`${artifact} could not be downloaded; tried: `));

    // The module files are in DENO_DIR now, so only the library download meets the dead port.
    const dead = await closedPort();
    const unreachable = await runByUrl(box, server.port, "dist", cache, {
      DLPACK_BASE_URL: `http://127.0.0.1:${dead}/dist/`,
    }, "127.0.0.1");
    assert.notEqual(unreachable.code, 0, show(unreachable));
    assert.ok(
      unreachable.stderr.includes(`http://127.0.0.1:${dead}/dist/${artifact} (no connection: `),
      show(unreachable),
    );
    // DLPACK_BASE_URL is set: the hint is to check it, not to set one.
    assert.match(unreachable.stderr, /Check that DLPACK_BASE_URL serves /);
    assert.doesNotMatch(unreachable.stderr, /Set DLPACK_BASE_URL/);

    // The same host outside --allow-net is Deno's refusal, not a dead network: found before any
    // download is tried, and named in the one error with the run line that allows it.
    const refused = await runByUrl(box, server.port, "dist", cache, {
      DLPACK_BASE_URL: `http://127.0.0.1:${dead}/dist/`,
    });
    assert.notEqual(refused.code, 0, show(refused));
    assert.ok(
      refused.stderr.includes(`libdlpack could not be looked for: Deno denies --allow-net=127.0.0.1:${dead}. `),
      show(refused),
    );
    assert.ok(refused.stderr.includes(`--allow-net=127.0.0.1:${dead} http://127.0.0.1:${server.port}/`));
  } finally {
    await server.close();
    rmSync(box.root, { recursive: true, force: true });
  }
}, { skip, timeout: 120_000 });

test("by URL: a corrupted cached copy is never loaded; it is replaced by a verified download", async () => {
  const box = sandbox();
  const server = serveLoopback(handler);
  try {
    const cache = `${box.home}/.cache/dlpack-ts`; // neither DLPACK_CACHE nor DENO_DIR's folder: XDG, then HOME
    const xdg = `${box.root}/xdg`;
    const viaXdg = await runByUrl(box, server.port, "dist", `${xdg}/dlpack-ts`, { XDG_CACHE_HOME: xdg, DENO_DIR: "" });
    // DENO_DIR is empty here, so Deno falls back to $HOME/.cache/deno for modules; the library goes to XDG.
    assert.equal(viaXdg.code, 0, show(viaXdg));
    assert.match(viaXdg.stdout, new RegExp(`^library: ${xdg}/dlpack-ts/${artifact}$`, "m"));

    mkdirSync(cache, { recursive: true });
    writeFileSync(`${cache}/${artifact}`, "not a library");
    const before = server.requests.length;
    const healed = await runByUrl(box, server.port, "dist", cache, { DENO_DIR: "" });
    assert.equal(healed.code, 0, show(healed));
    assert.match(healed.stdout, new RegExp(`^library: ${cache}/${artifact}$`, "m"));
    assert.equal(sha256(`${cache}/${artifact}`), RELEASE_CHECKSUMS[artifact]);
    assert.deepEqual(server.requests.slice(before).filter((p) => p.startsWith("/dist/")), [`/dist/${artifact}`]);

    writeFileSync(`${cache}/${artifact}`, "corrupted again");
    await server.close();
    const refused = await runByUrl(box, server.port, "dist", cache, { DENO_DIR: "" });
    assert.notEqual(refused.code, 0, show(refused));
    assert.match(refused.stderr, new RegExp(`${cache}/${artifact} \\(from HOME; SHA-256 [0-9a-f]{64}, expected `));
    assert.match(refused.stderr, /: ignored\)/);
    assert.match(refused.stderr, /\(no connection: /);
  } finally {
    await server.close();
    rmSync(box.root, { recursive: true, force: true });
  }
}, { skip, timeout: 120_000 });

test("by URL: using the module before `await ready()` is a clear error saying so", async () => {
  const box = sandbox();
  const server = serveLoopback(handler);
  try {
    // The program lives outside the repository and imports the module by URL, as a user's would.
    writeFileSync(
      `${box.work}/forgot.ts`,
      `import { DLPackError, stats } from "http://127.0.0.1:${server.port}/mod.ts";\n` +
        `try { stats(); } catch (e) { console.log(e instanceof DLPackError ? e.code + ": " + e.message : "other " + e); }\n`,
    );
    const out = await spawn(tool("deno"), [
      "run",
      `--allow-import=127.0.0.1:${server.port}`,
      "--allow-ffi",
      "--allow-env",
      "forgot.ts",
    ], {
      cwd: box.work,
      env: { DENO_DIR: box.denoDir, HOME: box.home },
    });
    assert.equal(out.code, 0, show(out));
    assert.match(out.stdout, /^library: libdlpack\.so not found; tried: DLPACK_LIB \(not set\); the local build \(/m);
    assert.ok(
      out.stdout.includes(
        `This module was loaded from http://127.0.0.1:${server.port}/ffi/mod.ts: call \`await ready()\` once before first use`,
      ),
      show(out),
    );
    assert.ok(!existsSync(`${box.denoDir}/dlpack-ts`), "nothing is downloaded behind the program's back");
  } finally {
    await server.close();
    rmSync(box.root, { recursive: true, force: true });
  }
}, { skip, timeout: 120_000 });

test("by URL: a failed download's error says what a URL user can do, not how to build in a checkout", async () => {
  const box = sandbox();
  const server = serveLoopback(handler);
  try {
    const cache = `${box.root}/cache`;
    const out = await runByUrl(box, server.port, "missing", cache, { DLPACK_CACHE: cache });
    assert.notEqual(out.code, 0, show(out));
    assert.ok(out.stderr.includes(`Check that DLPACK_BASE_URL serves ${artifact}`), show(out));
    assert.ok(out.stderr.includes("built from a clone of the repository"), show(out));
    assert.ok(!out.stderr.includes("tools/build.sh"), show(out));
  } finally {
    await server.close();
    rmSync(box.root, { recursive: true, force: true });
  }
}, { skip, timeout: 120_000 });
