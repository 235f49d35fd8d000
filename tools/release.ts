// The release build behind tools/release.sh: cross-builds libdlpack for every release target into
// dist/ (named after the version), writes dist/SHA256SUMS, and regenerates ffi/checksums.ts, the
// table every loader checks a release build against.
//
// The rule: a version's native bytes never change once recorded. tools/release-checksums.json
// keeps the checksums of every version ever built; a build whose bytes differ from what is
// recorded for the current version fails (so a change to the native code, or to the Zig version,
// comes with a new version: `--bump`). The builds are byte-reproducible, so a difference means the
// bytes really changed, not that the machine differs.
//
//   tools/release.sh                 build; record the version if it is new; rewrite the table
//   tools/release.sh --check         build; fail if the bytes or the committed table differ (CI)
//   tools/release.sh --bump X.Y.Z    build as X.Y.Z, record it, and move every version mention
//                                    (deno.json, package.json, CHANGELOG.md, README.md, docs/) to it
const root = new URL("../", import.meta.url).pathname.replace(/\/$/, "");
const usage = "usage: tools/release.sh [--check | --bump X.Y.Z]";
const args = [...Deno.args];
const check = args[0] === "--check" && args.length === 1;
const bumpTo = args[0] === "--bump" && args.length === 2 ? args[1] : undefined;
if (args.length > 0 && !check && bumpTo === undefined) fail(usage, 2);

const SEMVER = /^(\d+)\.(\d+)\.(\d+)(?:-([0-9A-Za-z.-]+))?$/;
const zig = Deno.env.get("ZIG") ?? `${root}/.tools/bin/zig`;
const dist = `${root}/dist`;
const tablePath = `${root}/ffi/checksums.ts`;
const recordPath = `${root}/tools/release-checksums.json`;

type Sums = Record<string, string>;

function fail(message: string, code = 1): never {
  console.error(`release: ${message}`);
  Deno.exit(code);
}

const readJson = (path: string) => JSON.parse(Deno.readTextFileSync(path));

/** Orders two semver versions (numeric parts, then a pre-release below its release). */
function compareVersions(a: string, b: string): number {
  const [, ...pa] = SEMVER.exec(a)!;
  const [, ...pb] = SEMVER.exec(b)!;
  for (let i = 0; i < 3; i++) if (Number(pa[i]) !== Number(pb[i])) return Number(pa[i]) - Number(pb[i]);
  if (pa[3] === pb[3]) return 0;
  if (pa[3] === undefined) return 1;
  if (pb[3] === undefined) return -1;
  return pa[3] < pb[3] ? -1 : 1;
}

const current: string = readJson(`${root}/deno.json`).version;
if (!SEMVER.test(current)) fail(`deno.json version ${current} is not semver`);
const packaged: string = readJson(`${root}/package.json`).version;
if (packaged !== current) {
  fail(`package.json has version ${packaged}, deno.json ${current}: one version for both (tools/release.sh --bump)`);
}
const record: { versions: Record<string, Sums> } = readJson(recordPath);
if (bumpTo !== undefined) {
  if (!SEMVER.test(bumpTo)) fail(`--bump ${bumpTo}: not a semver version`);
  if (compareVersions(bumpTo, current) <= 0) fail(`--bump ${bumpTo}: not above the current version ${current}`);
  if (record.versions[bumpTo] !== undefined) fail(`--bump ${bumpTo}: that version was already built and recorded`);
}
const version = bumpTo ?? current;

// Artifacts of other versions or targets would otherwise linger and be hashed into the table.
Deno.mkdirSync(dist, { recursive: true });
for (const entry of Deno.readDirSync(dist)) {
  if (entry.name.startsWith("libdlpack-") || entry.name === "SHA256SUMS") Deno.removeSync(`${dist}/${entry.name}`);
}

const started = performance.now();
const build = new Deno.Command(zig, {
  args: ["build", "release", `-Dversion=${version}`, "--prefix", dist, "--summary", "none"],
  cwd: `${root}/zig`,
  stdout: "inherit",
  stderr: "inherit",
}).outputSync();
if (!build.success) Deno.exit(build.code || 1);
const seconds = ((performance.now() - started) / 1000).toFixed(1);

const names = [...Deno.readDirSync(dist)].map((e) => e.name).filter((n) => n.startsWith(`libdlpack-${version}-`))
  .sort();
const sums: Sums = {};
for (const name of names) {
  const bytes = Deno.readFileSync(`${dist}/${name}`);
  const digest = new Uint8Array(await crypto.subtle.digest("SHA-256", bytes));
  sums[name] = Array.from(digest, (b) => b.toString(16).padStart(2, "0")).join("");
  console.log(`${name}  ${bytes.length} bytes`);
}
// sha256sum's format, so `cd dist && sha256sum -c SHA256SUMS` verifies a download by hand.
Deno.writeTextFileSync(`${dist}/SHA256SUMS`, names.map((n) => `${sums[n]}  ${n}\n`).join(""));
console.log(`release: ${names.length} artifacts in dist/ (${seconds} s)`);

const recorded = record.versions[version];
if (recorded !== undefined && JSON.stringify(recorded) !== JSON.stringify(sums)) {
  const changed = names.filter((n) => recorded[n] !== sums[n]);
  fail(
    `the native bytes of ${version} differ from the ones recorded in tools/release-checksums.json ` +
      `(${changed.join(", ")}). A version's bytes never change once built: the native code or the Zig version ` +
      `changed, so this is a new version. Run tools/release.sh --bump <next version> (0.x: the next minor while ` +
      `the ABI moves) and commit what it changes.\nbuilt:\n${names.map((n) => `  ${sums[n]}  ${n}`).join("\n")}`,
  );
}
if (recorded === undefined && check) {
  fail(`version ${version} has no recorded checksums: run tools/release.sh (or --bump) and commit what it writes`);
}

const table = `// Generated by tools/release.sh from the artifacts it builds into dist/: do not edit by hand.
// tools/test.sh rebuilds them (the builds are byte-reproducible) and fails when this table is stale.

/** The version the release artifacts are named after (deno.json "version"). */
export const RELEASE_VERSION = ${JSON.stringify(version)};

/** SHA-256 of every release artifact, by file name. */
export const RELEASE_CHECKSUMS: Readonly<Record<string, string>> = Object.freeze({
${names.map((n) => `  ${JSON.stringify(n)}: ${JSON.stringify(sums[n])},`).join("\n")}
});
`;
let committed = "";
try {
  committed = Deno.readTextFileSync(tablePath);
} catch {
  // no table yet
}
if (check) {
  if (committed !== table) {
    fail("ffi/checksums.ts does not match the artifacts just built: run tools/release.sh and commit it");
  }
  console.log(`release: ${version} matches its recorded checksums and ffi/checksums.ts`);
  Deno.exit(0);
}

if (recorded === undefined) {
  record.versions[version] = sums;
  const ordered = Object.fromEntries(Object.entries(record.versions).sort(([a], [b]) => compareVersions(a, b)));
  Deno.writeTextFileSync(recordPath, `${JSON.stringify({ versions: ordered }, null, 2)}\n`);
  console.log(`release: recorded the checksums of ${version} in tools/release-checksums.json`);
}
if (committed !== table) {
  Deno.writeTextFileSync(tablePath, table);
  console.log("release: wrote ffi/checksums.ts");
}
if (bumpTo !== undefined) bumpMentions(current, bumpTo);

/** Moves every mention of the version to `to`: the manifests, a new CHANGELOG section, and the
 * docs' versioned names (tags, JSR and npm specifiers, release and package file names). */
function bumpMentions(from: string, to: string): void {
  for (const manifest of ["deno.json", "package.json"]) {
    const path = `${root}/${manifest}`;
    const text = Deno.readTextFileSync(path);
    const moved = text.replace(`"version": ${JSON.stringify(from)}`, `"version": ${JSON.stringify(to)}`);
    if (moved === text) fail(`${manifest}: no "version": "${from}" to move`);
    Deno.writeTextFileSync(path, moved);
  }
  const changelog = `${root}/CHANGELOG.md`;
  const log = Deno.readTextFileSync(changelog);
  const first = log.indexOf("\n## ");
  if (first < 0) fail("CHANGELOG.md has no version section");
  Deno.writeTextFileSync(changelog, `${log.slice(0, first + 1)}## ${to} (unreleased)\n\n${log.slice(first + 1)}`);
  const pattern = new RegExp(`(?<=[v@-])${from.replaceAll(".", "\\.")}(?=[-./#\`"')\\s]|$)`, "gm");
  const docs = ["README.md", ...[...Deno.readDirSync(`${root}/docs`)].map((e) => `docs/${e.name}`)];
  for (const doc of docs.filter((d) => d.endsWith(".md"))) {
    const text = Deno.readTextFileSync(`${root}/${doc}`);
    const moved = text.replace(pattern, to);
    if (moved !== text) Deno.writeTextFileSync(`${root}/${doc}`, moved);
  }
  console.log(`release: bumped ${from} to ${to}; CHANGELOG.md has a new section to fill in`);
}
