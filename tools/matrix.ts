// Turns the latest interop-matrix run (.scratch/matrix/deno.json and bun.json, written by
// tests/python/matrix.test.ts) into the tables of docs/python.md. A cell says supported only if a case of
// that run exercised it. `deno task matrix` rewrites docs/python.md between the matrix markers;
// `--print` writes the tables to stdout instead.
import { existsSync, readFileSync } from "node:fs";
import { replaceBetweenMarkers } from "./markers.ts";

interface Result {
  pair: string;
  dtype: string;
  generation: string;
  layout: string;
  outcome: "zero-copy" | "copy" | "refused" | "deviates" | "failed";
  detail: string;
  /** A protocol case: `layout` is its row (a request or a tensor state). */
  protocol?: boolean;
}

interface Run {
  runtime: string;
  date: string;
  skipped?: Array<{ peer: string; reason: string }>;
  results: Result[];
}

const root = new URL("../", import.meta.url).pathname;
const runs: Run[] = [];
for (const runtime of ["deno", "bun"]) {
  const path = `${root}.scratch/matrix/${runtime}.json`;
  if (existsSync(path)) runs.push(JSON.parse(readFileSync(path, "utf8")));
}
if (runs.length === 0) {
  console.error("no matrix results: run tools/test.sh (or the matrix test) first");
  Deno.exit(1);
}

const every = runs.flatMap((run) => run.results);
/** The dtype, layout and generation cases; the protocol cases have tables of their own. */
const all = every.filter((r) => !r.protocol);
const pairs = [...new Set(every.map((r) => r.pair))];
/** Peer → JS columns, then JS → peer columns (JS → JS last, as "JS"). */
const fromPeers = pairs.filter((p) => p.endsWith(" → JS") && p !== "JS → JS");
const toPeers = [...pairs.filter((p) => p.startsWith("JS → ") && p !== "JS → JS"), "JS → JS"].filter((p) =>
  pairs.includes(p)
);

/** Summarises the results selected by `pick` across runtimes into one cell. */
function cell(pick: (r: Result) => boolean, flagDeviations = false): string {
  const perRuntime = runs.map((run) => ({ runtime: run.runtime, rs: run.results.filter(pick) }));
  const rs = perRuntime.flatMap((p) => p.rs);
  if (rs.length === 0) return "—";
  if (rs.some((r) => r.outcome === "failed")) return "✗";
  const worked = rs.filter((r) => r.outcome === "zero-copy" || r.outcome === "copy");
  const deviates = rs.some((r) => r.outcome === "deviates");
  if (worked.length === 0) return deviates ? "⚠ deviates" : "refused";
  const where = perRuntime.filter((p) => p.rs.some((r) => r.outcome === "zero-copy" || r.outcome === "copy"))
    .map((p) => p.runtime.charAt(0).toUpperCase());
  const copies = worked.some((r) => r.outcome === "copy");
  const zero = worked.some((r) => r.outcome === "zero-copy");
  const mark = copies && !zero ? "✓ copy" : copies ? "✓ (copies unaligned)" : "✓";
  return `${mark} ${where.join("+")}${deviates && flagDeviations ? " ⚠" : ""}`;
}

function column(pair: string): string {
  if (pair === "JS → JS") return "JS";
  return pair.replace(" → JS", "").replace("JS → ", "");
}

function table(
  head: string,
  rows: string[],
  columns: string[],
  pick: (row: string) => (r: Result) => boolean,
  protocol = false,
) {
  const select = (row: string) => (r: Result) => (r.protocol === true) === protocol && pick(row)(r);
  const used = columns.filter((pair) => every.some((r) => r.pair === pair && (r.protocol === true) === protocol));
  const lines = [`| ${head} | ${used.map(column).join(" | ")} |`, `|---|${used.map(() => "---").join("|")}|`];
  for (const row of rows) {
    if (!every.some((r) => used.includes(r.pair) && select(row)(r))) continue;
    lines.push(`| ${row} | ${used.map((pair) => cell((r) => r.pair === pair && select(row)(r))).join(" | ")} |`);
  }
  return lines.join("\n");
}

/** One row per pair, one column per struct generation. */
function generations(): string {
  const lines = ["| pair | versioned | legacy |", "|---|---|---|"];
  for (const pair of [...fromPeers, ...toPeers]) {
    const [v, l] = ["versioned", "legacy"].map((g) =>
      cell((r) => !r.protocol && r.pair === pair && r.generation === g, true)
    );
    lines.push(`| ${pair} | ${v} | ${l} |`);
  }
  return lines.join("\n");
}

const dtypes = [...new Set(all.map((r) => r.dtype))];
const layouts = [...new Set(all.map((r) => r.layout))];
const requests = (from: boolean) => [
  ...new Set(every.filter((r) => r.protocol && r.pair.endsWith(" → JS") === from).map((r) => r.layout)),
];

/** Each documented refusal or deviation once, with the pairs it was seen in and one error it produced. */
function notes(outcome: "refused" | "deviates"): string[] {
  const seen = new Map<string, { pairs: Set<string>; example: string }>();
  for (const r of every) {
    if (r.outcome !== outcome) continue;
    const split = outcome === "refused" ? r.detail.indexOf(": ") : r.detail.indexOf(" (");
    const why = split < 0 ? r.detail : r.detail.slice(0, split);
    let example = split < 0 ? "" : r.detail.slice(split + 2).replace(/^(exec|eval|__dlpack__): /, "").replace(/\)$/, "")
      .replace(/\s+/g, " ").replaceAll("`", "'");
    if (example.length > 100) example = `${example.slice(0, example.lastIndexOf(" ", 100))} …`;
    const entry = seen.get(why) ?? { pairs: new Set(), example };
    entry.pairs.add(r.pair);
    seen.set(why, entry);
  }
  return [...seen.entries()].map(([why, { pairs, example }]) =>
    `- ${[...pairs].join(", ")}: ${why}${example ? ` (\`${example}\`)` : ""}`
  ).sort();
}

const counts = runs.map((run) => `${run.runtime}: ${run.results.length} cases`).join(", ");
const date = runs.map((run) => run.date.slice(0, 10)).sort().pop();
const skipped = [
  ...new Set(runs.flatMap((run) => (run.skipped ?? []).map((s) => `- ${s.peer} (${run.runtime}): ${s.reason}`))),
];

const text = [
  `Generated by \`deno task matrix\` from the test run of ${date} (${counts}). Every cell is a case that ran: ` +
  "✓ = addresses equal (zero-copy) and every value checked, with the runtimes it ran in (D = Deno, B = Bun); " +
  "“copy” = the consumer copied (values checked); “refused” = a documented refusal, checked as that error; " +
  "⚠ = a documented deviation from the protocol, checked (listed below; the generation table flags cells where " +
  "some cases deviate); — = not exercised (the peer has no " +
  "such dtype or layout, or no way to ask for it). CuPy needs a GPU (tests/gpu/).",
  ...(skipped.length > 0 ? ["", "**Not run in that run:**", "", ...skipped] : []),
  "",
  "**Peer → JS, by dtype** (all layouts and generations of that dtype):",
  "",
  table("dtype", dtypes, fromPeers, (dtype) => (r) => r.dtype === dtype),
  "",
  "**JS → peer, by dtype** (all layouts and generations of that dtype):",
  "",
  table("dtype", dtypes, toPeers, (dtype) => (r) => r.dtype === dtype),
  "",
  "**Peer → JS, by layout** (all dtypes):",
  "",
  table("layout", layouts, fromPeers, (layout) => (r) => r.layout === layout),
  "",
  "**JS → peer, by layout** (all dtypes; `C, empty()` and `C, zeros()` are 64-byte-aligned library allocations, " +
  "the other rows TypedArrays):",
  "",
  table("layout", layouts, toPeers, (layout) => (r) => r.layout === layout),
  "",
  "**By DLPack generation** (the struct the producer answered with; all dtypes and layouts):",
  "",
  generations(),
  "",
  "**Peer → JS, by protocol request** (each `fromPython` option passed on to the `__dlpack__` of the peer's " +
  "C-order float64 tensor, and tensor states no DLPack struct carries, each with the values it stands for; " +
  "“copy” = the producer copied, as asked or to resolve the state):",
  "",
  table("request", requests(true), fromPeers, (row) => (r) => r.layout === row, true),
  "",
  "**JS → peer, by protocol request** (the peer's import of a DLPackTensor over a 64-byte-aligned " +
  "allocation: as it calls `__dlpack__` by itself, where the stream it passes for CPU data and the " +
  "max_version it asks for are checked, then with each argument of its import; — = its import has no such " +
  "argument):",
  "",
  table("request", requests(false), toPeers, (row) => (r) => r.layout === row, true),
  "",
  "Refusals seen (expected, each checked as the clear error named):",
  "",
  ...notes("refused"),
  "",
  "Deviations seen (expected, each checked):",
  "",
  ...notes("deviates"),
].join("\n");

if (Deno.args.includes("--print")) {
  console.log(text);
} else {
  replaceBetweenMarkers(`${root}docs/python.md`, "matrix", text);
  console.log(`docs/python.md matrix updated (${counts})`);
}
