// Using the module from someone else's program, the ways the README documents: imported by path
// from a script outside the repository (plain `deno run` / `bun run`, no package.json of its own),
// a copy of the sources without a native build (the library then comes from the release download),
// and a Bun project that adds the repository as a git dependency and imports the bare name (the
// packed npm package: tests/distribution/package.test.ts).
import assert from "node:assert/strict";
import { cpSync, existsSync, mkdirSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { execFileSync } from "node:child_process";
import { RELEASE_VERSION, releaseFileName, runtime } from "../../ffi/mod.ts";
import {
  repoRoot,
  runScript,
  runtimeName,
  selfExecutable,
  serveLoopback,
  spawn,
  type Spawned,
  test,
  tool,
} from "../support/harness.ts";

const rt = runtime();
const artifact = releaseFileName(RELEASE_VERSION, rt.os, rt.arch);
const show = (out: Spawned) => `exit ${out.code}\n--- stdout\n${out.stdout}\n--- stderr\n${out.stderr}`;
const noDist = existsSync(`${repoRoot}/dist/${artifact}`) ? false : `dist/${artifact} not built (run tools/release.sh)`;

/** A user's program: exports a TypedArray and imports it back through the module at `from`. */
const program = (from: string) =>
  `import { exportDLPack, importDLPack, ready, stats } from ${JSON.stringify(from)};
const library = await ready();
const data = new Int32Array([7, 8, 9]);
{
  using view = importDLPack(exportDLPack(data));
  view.set(70, 0);
  console.log("library " + library);
  console.log("dtype " + view.dtype + " first " + data[0] + " imports " + stats().imports);
}
console.log("imports after " + stats().imports);
`;

/** Runs a script with the runtime running the tests, as its README command does. */
function runWithSelf(script: string, cwd: string, env: Record<string, string>, net?: number): Promise<Spawned> {
  const args = runtimeName === "deno"
    ? [
      "run",
      "--allow-ffi",
      "--allow-read",
      "--allow-write",
      "--allow-env",
      ...(net === undefined ? [] : [`--allow-net=127.0.0.1:${net}`]),
      script,
    ]
    : ["run", script];
  return spawn(selfExecutable(), args, { cwd, env });
}

function workspace(): { root: string; home: string } {
  const root = mkdtempSync(`${tmpdir()}/dlpack-use-`);
  mkdirSync(`${root}/home`);
  return { root, home: `${root}/home` };
}

const releaseServer = () =>
  serveLoopback((path) =>
    path === `/dist/${artifact}`
      ? new Response(readFileSync(`${repoRoot}/dist/${artifact}`))
      : new Response("not found", { status: 404 })
  );

test("examples/roundtrip.ts runs in the checkout with plain `deno run` / `bun run`", () => {
  const out = runScript(`${repoRoot}/examples/roundtrip.ts`);
  assert.equal(out.code, 0, show(out));
  assert.match(out.stdout, new RegExp(`^dlpack-ts roundtrip on ${runtimeName} `, "m"));
  assert.match(out.stdout, new RegExp(`^library: ${repoRoot}/zig/zig-out/lib/libdlpack\\.so$`, "m"));
  assert.match(out.stdout, /^roundtrip ok$/m);
}, { timeout: 60_000 });

test("a script outside the repository imports mod.ts by path and runs with no package.json of its own", async () => {
  const { root, home } = workspace();
  try {
    assert.ok(!existsSync(`${root}/package.json`));
    writeFileSync(`${root}/app.ts`, program(`${repoRoot}/mod.ts`));
    const out = await runWithSelf("app.ts", root, { HOME: home });
    assert.equal(out.code, 0, show(out));
    assert.match(out.stdout, new RegExp(`^library ${repoRoot}/zig/zig-out/lib/libdlpack\\.so$`, "m"));
    assert.match(out.stdout, /^dtype int32 first 70 imports 1$/m);
    assert.match(out.stdout, /^imports after 0$/m);
  } finally {
    rmSync(root, { recursive: true, force: true });
  }
}, { timeout: 60_000 });

test("a copy of the sources without a native build gets the verified release build from DLPACK_BASE_URL", async () => {
  const { root, home } = workspace();
  const server = releaseServer();
  try {
    for (const part of ["mod.ts", "src", "ffi"]) {
      cpSync(`${repoRoot}/${part}`, `${root}/vendor/dlpack-ts/${part}`, { recursive: true });
    }
    writeFileSync(`${root}/app.ts`, program("./vendor/dlpack-ts/mod.ts"));
    const cache = `${root}/cache`;
    const env = { HOME: home, DLPACK_CACHE: cache, DLPACK_BASE_URL: `http://127.0.0.1:${server.port}/dist/` };
    const out = await runWithSelf("app.ts", root, env, server.port);
    assert.equal(out.code, 0, show(out));
    assert.match(out.stdout, new RegExp(`^library ${cache}/${artifact}$`, "m"));
    assert.match(out.stdout, /^dtype int32 first 70 imports 1$/m);
    assert.deepEqual(server.requests, [`/dist/${artifact}`]);
  } finally {
    await server.close();
    rmSync(root, { recursive: true, force: true });
  }
}, { skip: noDist, timeout: 60_000 });

// A git dependency installs the committed HEAD: with uncommitted changes to tracked files (during
// development) HEAD's checksum table may not match the library built from the working tree.
function dirtyTree(): string | false {
  try {
    const text = execFileSync("git", ["status", "--porcelain", "--untracked-files=no"], { cwd: repoRoot }).toString()
      .trim();
    return text === "" ? false : "the working tree has uncommitted changes; a git dependency installs HEAD";
  } catch {
    return "git is not available";
  }
}

test("a Bun project with the repository as a git dependency (bun add git+file://...) runs with bun run", async () => {
  const { root, home } = workspace();
  const server = releaseServer();
  try {
    const head = await spawn("git", ["rev-parse", "HEAD"], { cwd: repoRoot });
    assert.equal(head.code, 0, show(head));
    writeFileSync(`${root}/package.json`, JSON.stringify({ name: "app", private: true, type: "module" }));
    const env = {
      HOME: home,
      BUN_INSTALL_CACHE_DIR: `${root}/bun-cache`,
      DLPACK_CACHE: `${root}/cache`,
      DLPACK_BASE_URL: `http://127.0.0.1:${server.port}/dist/`,
    };
    const added = await spawn(tool("bun"), ["add", `dlpack-ts@git+file://${repoRoot}#${head.stdout.trim()}`], {
      cwd: root,
      env,
    });
    assert.equal(added.code, 0, show(added));
    assert.ok(existsSync(`${root}/node_modules/dlpack-ts/mod.ts`), show(added));
    writeFileSync(`${root}/app.ts`, program("dlpack-ts"));
    // A git dependency has no native build and no prebuilt/ (only a packed package has one), so
    // ready() fetches the release build.
    const out = await spawn(tool("bun"), ["run", "app.ts"], { cwd: root, env });
    assert.equal(out.code, 0, show(out));
    assert.match(out.stdout, new RegExp(`^library ${root}/cache/${artifact}$`, "m"));
    assert.match(out.stdout, /^dtype int32 first 70 imports 1$/m);
  } finally {
    await server.close();
    rmSync(root, { recursive: true, force: true });
  }
}, { skip: noDist || dirtyTree(), timeout: 120_000 });
