/**
 * Assertions the test files share: a refusal is a DLPackError with the expected code (and what
 * slipped through is released, so a missing refusal cannot leak), and the live counters.
 * @module
 */
import assert from "node:assert/strict";
import { DLPackError, stats } from "../../mod.ts";
import { collectGarbage } from "./harness.ts";

/**
 * Asserts that `f` throws a `DLPackError` with `code`. The third argument is either a pattern the
 * message must match or a label for the assertion messages (then the fourth may be the pattern).
 * Anything `f` returns instead of throwing is disposed first. Returns the error.
 */
export function refused(
  f: () => unknown,
  code: string,
  patternOrWhat?: RegExp | string,
  pattern?: RegExp,
): DLPackError {
  const what = typeof patternOrWhat === "string" ? patternOrWhat : "";
  const expected = patternOrWhat instanceof RegExp ? patternOrWhat : pattern;
  let thrown: unknown;
  try {
    const value = f();
    if (value !== null && typeof value === "object" && typeof (value as { dispose?: unknown }).dispose === "function") {
      (value as { dispose(): void }).dispose();
    }
  } catch (error) {
    thrown = error;
  }
  const label = what === "" ? "" : `${what}: `;
  assert.ok(
    thrown instanceof DLPackError,
    `${label}${thrown === undefined ? "no error" : thrown} is not a DLPackError`,
  );
  assert.equal(thrown.code, code, `${label}${thrown.message}`);
  assert.ok(thrown.message.length > 10, `${label}the message says nothing`);
  if (expected !== undefined) assert.match(thrown.message, expected, what);
  return thrown;
}

/** The live counters of `stats()` that must return to where they were after a test. */
export function live(): { imports: number; exports: number; allocations: number; pinned: number } {
  const s = stats();
  return { imports: s.imports, exports: s.exports, allocations: s.allocations, pinned: s.pinned };
}

/**
 * {@link live} once the counters have stopped moving: bun test runs every file in one process and
 * deno test every file in one process too, so releases left over from an earlier file (a
 * finalizer, a terminated realm's pins, queued pin releases the 250 ms sweep drains) can land
 * while a later test runs. Collects garbage and polls every 25 ms until the readings have agreed
 * for 300 ms, longer than a sweep period (at most three seconds).
 */
export async function settledLive(): Promise<ReturnType<typeof live>> {
  let previous = live();
  let since = Date.now();
  for (const end = Date.now() + 3_000; Date.now() < end;) {
    await collectGarbage(2);
    await new Promise((resolve) => setTimeout(resolve, 25));
    const now = live();
    if (JSON.stringify(now) !== JSON.stringify(previous)) {
      previous = now;
      since = Date.now();
    } else if (Date.now() - since >= 300) return now;
  }
  return previous;
}

/**
 * Asserts that a test left nothing of its own behind: once the counters settle, none is above its
 * reading `before` the test. Not equality: releases an earlier file still owed (a collected
 * handle's finalizer, an ended Worker's pins) may land while the test runs and take a count below.
 */
export async function noneLeft(before: ReturnType<typeof live>, what = "the test"): Promise<void> {
  const after = await settledLive();
  const above = (Object.keys(before) as (keyof typeof before)[]).filter((k) => after[k] > before[k]);
  assert.deepEqual(above, [], `${what} left counts above where they were: ${JSON.stringify({ before, after })}`);
}
