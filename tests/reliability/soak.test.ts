// A short soak in CI (tools/soak.sh runs the long one): mixed traffic for a few seconds in a
// fresh process of this runtime, RSS flat after the warm-up, every counter back to zero, every
// producer tensor deleted once. And the soak's own check: a leaking workload must fail it.
import assert from "node:assert/strict";
import { runScript, test } from "../support/harness.ts";
import { noPython } from "../support/python.ts";

const SOAK = new URL("../soak/soak.ts", import.meta.url).pathname;

interface Report {
  seconds: number;
  units: number;
  producerTensors: number;
  producerDeleted: number;
  driftMb: { offHeap: number; heapUsed: number; rss: number };
  failures: string[];
}

function soak(env: Record<string, string>): { code: number; report: Report; output: string } {
  const out = runScript(SOAK, env, { gc: true });
  const line = out.stdout.split("\n").find((l) => l.startsWith('{"soak"'));
  assert.ok(line !== undefined, `the soak printed no report:\n${out.stdout}\n${out.stderr}`);
  return { code: out.code, report: JSON.parse(line).soak as Report, output: line };
}

test("soak: 12 s of mixed traffic, memory flat, counters and producers back to zero", () => {
  const { code, report, output } = soak({ SOAK_SECONDS: "12", SOAK_MAX_DRIFT_MB: "16" });
  console.log(output);
  assert.deepEqual(report.failures, []);
  assert.equal(code, 0);
  assert.ok(report.units > 1000, `only ${report.units} units of traffic`);
  assert.equal(report.producerDeleted, report.producerTensors);
  assert.ok(report.driftMb.offHeap <= 16 && report.driftMb.heapUsed <= 8 && report.driftMb.rss <= 32);
}, { timeout: 120_000 });

test("soak: a leaking workload fails it", () => {
  const fixture = new URL("../soak/leak_fixture.ts", import.meta.url).pathname;
  // Five seconds: a loaded machine takes a second or more per burst, and drift needs three samples or more.
  const { code, report } = soak({ SOAK_SECONDS: "5", SOAK_MAX_DRIFT_MB: "16", SOAK_EXTRA: fixture });
  assert.equal(code, 1);
  assert.ok(report.failures.some((f) => f.startsWith("RSS outside the JS heap grew")), report.failures.join("; "));
  assert.ok(report.failures.some((f) => f.startsWith("stats().allocations")), report.failures.join("; "));
}, { timeout: 60_000 });

test("soak: 8 s with numpy <-> JS traffic through the embedded Python, memory flat, counters back", () => {
  const extra = new URL("../soak/python_workloads.ts", import.meta.url).pathname;
  const { code, report, output } = soak({ SOAK_SECONDS: "8", SOAK_MAX_DRIFT_MB: "16", SOAK_EXTRA: extra });
  console.log(output);
  assert.deepEqual(report.failures, []);
  assert.equal(code, 0);
  assert.equal(report.producerDeleted, report.producerTensors);
}, { skip: noPython, timeout: 120_000 });
