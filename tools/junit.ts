// Counts the test cases of a JUnit XML report (as `deno test --junit-path` and `bun test
// --reporter=junit` write them): prints "passed failed skipped", or "0 0 0" without a report.
// tools/test.sh reads these instead of each runner's text output. With --failures it prints each
// failed case's name and the first lines of its message instead: the summary ends with them, so a
// log cut to its tail (as CI keeps it) still says which test failed and why.
import { existsSync, readFileSync } from "node:fs";

/** Counts passed, failed and skipped cases in one JUnit report. */
export function countCases(xml: string): { passed: number; failed: number; skipped: number } {
  let passed = 0;
  let failed = 0;
  let skipped = 0;
  const cases = xml.split("<testcase").slice(1);
  for (const chunk of cases) {
    // A case ends at its own "/>" or at "</testcase>", whichever comes first.
    const selfClosing = chunk.search(/^[^>]*\/>/) === 0;
    const body = selfClosing ? "" : chunk.slice(0, Math.max(0, chunk.indexOf("</testcase>")));
    if (/<(failure|error)[\s>/]/.test(body)) failed++;
    else if (/<skipped[\s>/]/.test(body)) skipped++;
    else passed++;
  }
  return { passed, failed, skipped };
}

/** The failed cases of one JUnit report: "name: first lines of the message" each. */
export function failedCases(xml: string, lines = 6): string[] {
  const out: string[] = [];
  for (const chunk of xml.split("<testcase").slice(1)) {
    const end = chunk.indexOf("</testcase>");
    const body = end < 0 ? chunk : chunk.slice(0, end);
    const failure = /<(failure|error)[\s>/]/.exec(body);
    if (failure === null) continue;
    const name = unescapeXml(/\sname="([^"]*)"/.exec(body)?.[1] ?? "(unnamed)");
    const file = unescapeXml(
      /\sclassname="([^"]+)"/.exec(body)?.[1] ?? /\sfile="([^"]*)"/.exec(body)?.[1] ?? "",
    );
    const rest = body.slice(failure.index);
    const message = unescapeXml(/message="([^"]*)"/.exec(rest)?.[1] ?? "") ||
      unescapeXml(rest.replace(/<[^>]*>/g, " "));
    const text = message.split("\n").map((l) => l.trim()).filter((l) => l !== "").slice(0, lines);
    out.push(`${file === "" ? "" : file + " > "}${name}\n    ${text.join("\n    ")}`);
  }
  return out;
}

function unescapeXml(text: string): string {
  return text.replace(/&lt;/g, "<").replace(/&gt;/g, ">").replace(/&quot;/g, '"')
    .replace(/&apos;/g, "'").replace(/&#(\d+);/g, (_, d) => String.fromCharCode(Number(d)))
    .replace(/&amp;/g, "&");
}

if (import.meta.main) {
  const failures = Deno.args[0] === "--failures";
  const path = Deno.args[failures ? 1 : 0];
  if (failures) {
    if (path !== undefined && existsSync(path)) {
      for (const line of failedCases(readFileSync(path, "utf8"))) console.log(line);
    }
  } else if (path === undefined || !existsSync(path)) {
    console.log("0 0 0");
  } else {
    const { passed, failed, skipped } = countCases(readFileSync(path, "utf8"));
    console.log(`${passed} ${failed} ${skipped}`);
  }
}
