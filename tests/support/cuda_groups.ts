/**
 * Registers the CUDA cases of a group (tests/support/cuda_cases.ts) as tests of the calling test
 * file. The cases run once per group in a child process of the same runtime (a process opens its
 * CUDA driver once, so each driver setup needs its own); each test reports its case's outcome.
 * @module
 */
import assert from "node:assert/strict";
import { CASES, type Group } from "./cuda_cases.ts";
import { runScript, test } from "./harness.ts";

const child = new URL("./cuda_child.ts", import.meta.url).pathname;

interface Outcome {
  ok: boolean;
  message?: string;
}

interface GroupRun {
  code: number;
  stderr: string;
  outcomes: Map<string, Outcome>;
}

const runs = new Map<string, GroupRun>();

function run(group: Group, env: Record<string, string>): GroupRun {
  const key = `${group} ${JSON.stringify(env)}`;
  let found = runs.get(key);
  if (found === undefined) {
    const out = runScript(child, { ...env, DLPACK_CUDA_TEST_GROUP: group });
    const outcomes = new Map<string, Outcome>();
    for (const line of out.stdout.split("\n")) {
      if (!line.startsWith("CUDA-CASE ")) continue;
      const parsed = JSON.parse(line.slice("CUDA-CASE ".length)) as { name: string } & Outcome;
      outcomes.set(parsed.name, parsed);
    }
    found = { code: out.code, stderr: out.stderr, outcomes };
    runs.set(key, found);
  }
  return found;
}

/** Registers one test per case of `group`, named `<label>: <case>`. */
export function registerGroup(
  label: string,
  group: Group,
  env: () => Record<string, string>,
  skip: string | false = false,
): void {
  for (const c of CASES) {
    if (!c.groups.includes(group)) continue;
    test(`${label}: ${c.name}`, () => {
      const result = run(group, env());
      const outcome = result.outcomes.get(c.name);
      if (outcome === undefined) {
        assert.fail(
          `the ${group} child process did not report this case (exit code ${result.code}):\n${
            result.stderr.slice(-3000)
          }`,
        );
      }
      if (!outcome.ok) assert.fail(outcome.message);
    }, { skip });
  }
}
