// Counts the test cases of a JUnit XML report (as `deno test --junit-path` and `bun test
// --reporter=junit` write them): prints "passed failed skipped", or "0 0 0" without a report.
// tools/test.sh reads these instead of each runner's text output.
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

if (import.meta.main) {
  const path = Deno.args[0];
  if (path === undefined || !existsSync(path)) {
    console.log("0 0 0");
  } else {
    const { passed, failed, skipped } = countCases(readFileSync(path, "utf8"));
    console.log(`${passed} ${failed} ${skipped}`);
  }
}
