// One version everywhere, and a version's native bytes never change: deno.json, package.json, the
// release file names (ffi/checksums.ts), the record of every version's checksums, CHANGELOG.md and
// the versioned names in the docs agree; the licence is the manifests' MIT. In a temporary copy
// of the build inputs, tools/release.sh --check fails on purpose once the native code changes while
// the version does not, and passes after `tools/release.sh --bump`.
import assert from "node:assert/strict";
import {
  cpSync,
  existsSync,
  mkdirSync,
  mkdtempSync,
  readdirSync,
  readFileSync,
  rmSync,
  symlinkSync,
  writeFileSync,
} from "node:fs";
import { tmpdir } from "node:os";
import { RELEASE_CHECKSUMS, RELEASE_VERSION, runtime } from "../../ffi/mod.ts";
import { show } from "../support/distribution.ts";
import { repoRoot, spawn, test } from "../support/harness.ts";

const json = (path: string) => JSON.parse(readFileSync(path, "utf8"));
const deno = json(`${repoRoot}/deno.json`);
const npm = json(`${repoRoot}/package.json`);
const record: { versions: Record<string, Record<string, string>> } = json(`${repoRoot}/tools/release-checksums.json`);

test("versions: deno.json, package.json, the release files, the checksum record and CHANGELOG.md agree", () => {
  assert.equal(npm.version, deno.version);
  assert.equal(RELEASE_VERSION, deno.version, "ffi/checksums.ts is of another version: run tools/release.sh");
  for (const name of Object.keys(RELEASE_CHECKSUMS)) assert.ok(name.startsWith(`libdlpack-${deno.version}-`), name);
  assert.deepEqual(record.versions[deno.version], { ...RELEASE_CHECKSUMS }, "the record of this version's bytes");
  // The record only grows: every version in it in order, the current one last.
  const versions = Object.keys(record.versions);
  assert.equal(versions.at(-1), deno.version);
  const changelog = readFileSync(`${repoRoot}/CHANGELOG.md`, "utf8");
  const sections = [...changelog.matchAll(/^## (\S+)/gm)].map((m) => m[1]);
  assert.equal(sections[0], deno.version, "CHANGELOG.md's newest section is the current version");
  // The same name on both registries: JSR's @dlpack-ts/dlpack and npm's dlpack-ts.
  assert.equal(deno.name, `@${npm.name}/dlpack`);
  assert.equal(deno.license, "MIT");
  assert.equal(npm.license, "MIT");
  assert.match(readFileSync(`${repoRoot}/LICENSE`, "utf8"), /^MIT License\n/);
});

/** Every versioned name in README.md and docs/ of the tree at `root` (install lines, release tags,
 * release and package file names): the file, the mention, its version. */
function versionMentions(root: string): [string, string, string][] {
  const docs = ["README.md", ...readdirSync(`${root}/docs`).filter((n) => n.endsWith(".md")).map((n) => `docs/${n}`)];
  const pattern = /(?:releases\/download\/v|dlpack-ts\/v|dlpack-ts@|dlpack@|libdlpack-|dlpack-ts-)(\d+\.\d+\.\d+)/g;
  return docs.flatMap((doc) =>
    [...readFileSync(`${root}/${doc}`, "utf8").matchAll(pattern)].map(([mention, version]) =>
      [doc, mention, version] as [string, string, string]
    )
  );
}

test("versions: every versioned name in README.md and docs/ is the current version", () => {
  const mentions = versionMentions(repoRoot);
  assert.ok(mentions.length > 0, "the docs name the version somewhere (install lines, release file names)");
  assert.deepEqual(mentions.filter(([, , version]) => version !== deno.version), []);
});

/** The build inputs of the release, copied (the toolchains linked, not copied). */
function releaseCopy(): string {
  const root = mkdtempSync(`${tmpdir()}/dlpack-release-rule-`);
  for (const part of ["deno.json", "package.json", "CHANGELOG.md", "README.md", "docs", "ffi/checksums.ts"]) {
    cpSync(`${repoRoot}/${part}`, `${root}/${part}`, { recursive: true });
  }
  mkdirSync(`${root}/tools`);
  for (const tool of ["bootstrap.sh", "release.sh", "release.ts", "release-checksums.json"]) {
    cpSync(`${repoRoot}/tools/${tool}`, `${root}/tools/${tool}`);
  }
  cpSync(`${repoRoot}/zig`, `${root}/zig`, {
    recursive: true,
    filter: (path) => !/\/zig\/(zig-out|\.zig-cache)(\/|$)/.test(path),
  });
  symlinkSync(`${repoRoot}/.tools`, `${root}/.tools`);
  return root;
}

/** The next minor version (0.x: a native change takes the next minor). */
const nextMinor = (version: string) => {
  const [major = 0, minor = 0] = version.split(".").map(Number);
  return `${major}.${minor + 1}.0`;
};

test(
  "versions: changed native bytes under the same version fail tools/release.sh; --bump makes them pass",
  async () => {
    const root = releaseCopy();
    // Zig's compile cache, shared by runs and runners: the changed source builds once, not every run.
    const cache = `${repoRoot}/.scratch/release-rule-zig-cache`;
    mkdirSync(cache, { recursive: true });
    const release = (...args: string[]) =>
      spawn(`${root}/tools/release.sh`, args, {
        cwd: root,
        env: { HOME: runtime().env("HOME") ?? "/", ZIG_LOCAL_CACHE_DIR: cache },
        timeoutMs: 900_000,
      });
    try {
      // A new exported function: every target's bytes change, the version does not.
      const rootZig = `${root}/zig/src/root.zig`;
      const source = readFileSync(rootZig, "utf8") + "\nexport fn dlpk_release_rule_probe() u32 {\n    return 7;\n}\n";
      writeFileSync(rootZig, source);

      const checked = await release("--check");
      assert.equal(checked.code, 1, show(checked));
      assert.match(
        checked.stderr,
        new RegExp(
          `release: the native bytes of ${RELEASE_VERSION.replaceAll(".", "\\.")} differ from the ones recorded`,
        ),
      );
      assert.match(checked.stderr, /tools\/release\.sh --bump <next version>/);
      // Without --check the same build is refused too: it must not rewrite a recorded version.
      const plain = await release();
      assert.equal(plain.code, 1, show(plain));
      assert.equal(
        readFileSync(`${root}/ffi/checksums.ts`, "utf8"),
        readFileSync(`${repoRoot}/ffi/checksums.ts`, "utf8"),
      );

      const next = nextMinor(RELEASE_VERSION);
      const bumped = await release("--bump", next);
      assert.equal(bumped.code, 0, show(bumped));
      const passed = await release("--check");
      assert.equal(passed.code, 0, show(passed));
      assert.match(passed.stdout, new RegExp(`release: ${next.replaceAll(".", "\\.")} matches its recorded checksums`));

      // One version everywhere in the copy, the old record untouched.
      assert.equal(json(`${root}/deno.json`).version, next);
      assert.equal(json(`${root}/package.json`).version, next);
      const table = readFileSync(`${root}/ffi/checksums.ts`, "utf8");
      assert.match(table, new RegExp(`RELEASE_VERSION = "${next.replaceAll(".", "\\.")}"`));
      const copied = json(`${root}/tools/release-checksums.json`).versions;
      assert.deepEqual(Object.keys(copied), [...Object.keys(record.versions), next]);
      assert.deepEqual(copied[RELEASE_VERSION], record.versions[RELEASE_VERSION]);
      assert.notDeepEqual(Object.values(copied[next] ?? {}), Object.values(record.versions[RELEASE_VERSION] ?? {}));
      assert.match(
        readFileSync(`${root}/CHANGELOG.md`, "utf8"),
        new RegExp(`\\n## ${next.replaceAll(".", "\\.")} \\(unreleased\\)\\n`),
      );
      assert.deepEqual(versionMentions(root).filter(([, , version]) => version !== next), [], "the docs moved on");
      // A version cannot be bumped to twice, nor backwards.
      assert.equal((await release("--bump", next)).code, 1);
      assert.equal((await release("--bump", "0.0.1")).code, 1);
    } finally {
      rmSync(root, { recursive: true, force: true });
    }
  },
  {
    skip: existsSync(`${repoRoot}/.tools/bin/zig`) ? false : "no pinned Zig in .tools/ (tools/bootstrap.sh)",
    timeout: 900_000,
  },
);
