// The npm package as a Bun user meets it, in temporary folders outside the checkout: tools/pack.sh
// packs it (once for this file), a fresh `bun init` project `bun add`s the tarball and runs a bare
// `import ... from "dlpack-ts"` round trip with an empty environment (no DLPACK_LIB, no build, no
// download: the library is the package's prebuilt one), `bun check` of the project is clean, and
// `bun build --compile` of it makes one executable that runs alone in an empty folder under env -i.
// Bun does all of it, so the cases are the same under both test runners.
import assert from "node:assert/strict";
import { createHash } from "node:crypto";
import {
  chmodSync,
  copyFileSync,
  existsSync,
  mkdirSync,
  mkdtempSync,
  readdirSync,
  readFileSync,
  rmSync,
  statSync,
  writeFileSync,
} from "node:fs";
import { tmpdir } from "node:os";
import { RELEASE_CHECKSUMS, RELEASE_VERSION, releaseFileName, runtime } from "../../ffi/mod.ts";
import { show } from "../support/distribution.ts";
import { repoRoot, spawn, type Spawned, test, tool } from "../support/harness.ts";

const rt = runtime();
const artifact = releaseFileName(RELEASE_VERSION, rt.os, rt.arch);
const manifest = JSON.parse(readFileSync(`${repoRoot}/package.json`, "utf8"));
const npm = rt.runCommand("npm", ["--version"])?.code === 0
  ? false
  : "npm is not on PATH (tools/pack.sh packs with it)";
const skip = npm || (rt.os === "linux" ? false : "runs the Linux build under env -i");

/** The user's program: a bare import of the package, one round trip, where the library came from. */
const PROGRAM = `import { exportDLPack, importDLPack, ready, stats } from "dlpack-ts";

const data = new Float32Array([1, 2, 3, 4, 5, 6]);
{
  using view = importDLPack(exportDLPack(data, { shape: [2, 3] }));
  view.set(42, 1, 2);
  console.log(\`\${view.dtype} [\${view.shape}] data[5] = \${data[5]}\`);
}
console.log(\`imports \${stats().imports}\`);
console.log(\`library \${await ready()}\`);
`;

interface Packed {
  readonly root: string;
  readonly tarball: string;
  /** The bun init project with the tarball added (undefined until made). */
  project?: string;
}
let packed: Promise<Packed> | undefined;

/** Packs once for the whole file, into a fresh temporary folder. */
function pack(): Promise<Packed> {
  packed ??= (async () => {
    const root = mkdtempSync(`${tmpdir()}/dlpack-package-`);
    const started = performance.now();
    const out = await spawn(`${repoRoot}/tools/pack.sh`, ["--out", `${root}/out`], {
      env: { HOME: rt.env("HOME") ?? "/" },
      timeoutMs: 600_000,
    });
    assert.equal(out.code, 0, show(out));
    const tarball = out.stdout.trim();
    console.log(
      `  tools/pack.sh: ${((performance.now() - started) / 1000).toFixed(1)} s; ${
        out.stderr.trim().split("\n").at(-1)
      }`,
    );
    return { root, tarball };
  })();
  return packed;
}

/** Bun with the user's HOME (its package cache) and PATH; nothing else of this environment. */
const bun = (args: readonly string[], cwd: string, timeoutMs = 120_000): Promise<Spawned> =>
  spawn(tool("bun"), args, { cwd, env: { HOME: rt.env("HOME") ?? "/" }, timeoutMs });

/** The bun init project with the package added, made once. */
async function project(): Promise<string> {
  const p = await pack();
  if (p.project !== undefined) return p.project;
  const dir = `${p.root}/app`;
  mkdirSync(dir);
  // bun init also installs @types/bun from the registry (or Bun's cache); without it only the type
  // check has to skip.
  const init = await bun(["init", "-y"], dir);
  assert.ok(existsSync(`${dir}/package.json`) && existsSync(`${dir}/tsconfig.json`), show(init));
  const added = await bun(["add", p.tarball], dir);
  assert.equal(added.code, 0, show(added));
  writeFileSync(`${dir}/index.ts`, PROGRAM);
  return p.project = dir;
}

const sha256 = (bytes: Uint8Array) => createHash("sha256").update(bytes).digest("hex");

test(
  "tools/pack.sh: npm pack makes a tarball with every target's verified library and a Bun entry per export",
  async () => {
    const p = await pack();
    assert.equal(p.tarball, `${p.root}/out/${manifest.name}-${RELEASE_VERSION}.tgz`);
    const listed = await spawn("tar", ["tzf", p.tarball]);
    assert.equal(listed.code, 0, show(listed));
    const files = listed.stdout.trim().split("\n").map((f) => f.replace(/^package\//, ""));
    for (const name of Object.keys(RELEASE_CHECKSUMS)) assert.ok(files.includes(`prebuilt/${name}`), name);
    for (
      const entry of ["mod.ts", "python.ts", "cuda.ts", "io.ts", "ffi/mod.ts", "README.md", "LICENSE", "CHANGELOG.md"]
    ) {
      assert.ok(files.includes(entry), entry);
    }
    assert.deepEqual(files.filter((f) => /^(tests|tools|bench|zig|examples)\//.test(f)), [], "no development files");
    const unpacked = `${p.root}/unpacked`;
    mkdirSync(unpacked);
    assert.equal((await spawn("tar", ["xzf", p.tarball, "-C", unpacked])).code, 0);
    for (const [name, hash] of Object.entries(RELEASE_CHECKSUMS)) {
      assert.equal(sha256(readFileSync(`${unpacked}/package/prebuilt/${name}`)), hash, name);
    }
    const staged = JSON.parse(readFileSync(`${unpacked}/package/package.json`, "utf8"));
    assert.equal(staged.version, RELEASE_VERSION);
    for (
      const [subpath, file] of [[".", "mod.ts"], ["./python", "python.ts"], ["./cuda", "cuda.ts"], [
        "./io",
        "io.ts",
      ]] as const
    ) {
      // Bun takes the first condition it knows; type checkers and Deno skip "bun".
      assert.deepEqual(Object.entries(staged.exports[subpath]), [
        ["bun", `./prebuilt/${file}`],
        ["types", `./${file}`],
        ["default", `./${file}`],
      ]);
      assert.ok(existsSync(`${unpacked}/package/prebuilt/${file}`));
    }
    assert.deepEqual(staged.dependencies ?? {}, {});
  },
  { skip, timeout: 600_000 },
);

test(
  "bun add <tarball>, then bun run with an empty environment: the package's own library, no build, no download",
  async () => {
    const dir = await project();
    const out = await spawn("/usr/bin/env", ["-i", tool("bun"), "run", "index.ts"], { cwd: dir, timeoutMs: 60_000 });
    assert.equal(out.code, 0, show(out));
    assert.equal(
      out.stdout,
      `float32 [2,3] data[5] = 42\nimports 0\nlibrary ${dir}/node_modules/dlpack-ts/prebuilt/${artifact}\n`,
      show(out),
    );
    assert.equal(out.stderr, "");
    assert.ok(!existsSync(`${dir}/node_modules/dlpack-ts/zig`), "the package carries no build folder");
  },
  { skip, timeout: 600_000 },
);

test("bun check of the project importing the package is clean", async (): Promise<void> => {
  const dir = await project();
  if (!existsSync(`${dir}/node_modules/@types/bun`)) {
    // Reported, not passed: the check cannot run without the types bun init installs.
    throw new Error("bun init could not install @types/bun (no registry and nothing in Bun's cache)");
  }
  const checked = await bun(["check"], dir);
  assert.equal(checked.code, 0, show(checked));
}, {
  skip: skip ||
    (rt.runCommand(tool("bun"), ["check", "--help"])?.code === 0 ? false : "this Bun has no `bun check`"),
  timeout: 600_000,
});

test("bun build --compile of the project: one executable that runs alone in an empty folder under env -i", async () => {
  const p = await pack();
  const dir = await project();
  try {
    const built = await bun(["build", "--compile", "index.ts", "--outfile", `${p.root}/build/app`], dir);
    assert.equal(built.code, 0, show(built));
    const alone = `${p.root}/alone`;
    mkdirSync(alone);
    copyFileSync(`${p.root}/build/app`, `${alone}/app`);
    rmSync(`${p.root}/build`, { recursive: true, force: true });
    chmodSync(`${alone}/app`, 0o755);
    console.log(`  single binary: ${(statSync(`${alone}/app`).size / 2 ** 20).toFixed(1)} MiB`);
    const out = await spawn("/usr/bin/env", ["-i", `${alone}/app`], { cwd: alone, timeoutMs: 60_000 });
    assert.equal(out.code, 0, show(out));
    // Bun serves the embedded file under its virtual root; the module verified and loaded it.
    assert.match(
      out.stdout,
      /^float32 \[2,3\] data\[5\] = 42\nimports 0\nlibrary \/\$bunfs\/root\/libdlpack-/,
      show(out),
    );
    assert.deepEqual(readdirSync(alone), ["app"]);
  } finally {
    rmSync(p.root, { recursive: true, force: true });
  }
}, { skip, timeout: 600_000 });
