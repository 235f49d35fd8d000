/**
 * Shared setup of the CUDA test files (tests/cuda/*.test.ts, tests/python/cuda.test.ts): each file
 * lists its cases and registers them per group with {@link registerGroup}. A process opens its
 * CUDA driver once, so a group's cases run in a child process of the same runtime started on the
 * test file itself, with the group's driver chosen by environment; each test reports its case's
 * outcome. The groups:
 * - "fake": the FAKE driver (tests/native/fakecuda.zig) over host memory, 2 devices. These check
 *   the driver-facing logic for real without a GPU; they do not replace a GPU run. "fakepython":
 *   the same driver, cases through the embedded Python.
 * - "real": the machine's own driver (only where one exists).
 * - "missing": DLPACK_CUDA_LIB pointing at no file: the no-driver behaviour, forced.
 * - "noinit", "notdriver": a driver whose cuInit fails, and a library that is not a driver.
 * @module
 */
import assert from "node:assert/strict";
import * as cuda from "../../cuda.ts";
import { type BufferView, type DType, empty, stats } from "../../mod.ts";
import { runtime } from "../../ffi/mod.ts";
import { make } from "./producer.ts";
import { bindFakeDriver, type FakeDriver, fakeDriverPath } from "./fakecuda.ts";
import { CASE_GROUP_ENV, runScript, test } from "./harness.ts";

/** The child process groups (see the module doc). */
export type Group = "fake" | "fakepython" | "real" | "missing" | "noinit" | "notdriver";

/** What a case gets: the fake driver's hooks in the "fake" groups. */
export interface CaseContext {
  readonly fake: FakeDriver | null;
}

/** One case and the groups it runs in. */
export interface CudaCase {
  readonly name: string;
  readonly groups: readonly Group[];
  readonly run: (ctx: CaseContext) => void;
}

/** The group this process runs the cases of, when it is such a child. */
const childGroup = runtime().env(CASE_GROUP_ENV) as Group | undefined;

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

function run(file: string, group: Group, env: Record<string, string>): GroupRun {
  const key = `${file} ${group} ${JSON.stringify(env)}`;
  let found = runs.get(key);
  if (found === undefined) {
    const out = runScript(file, { ...env, [CASE_GROUP_ENV]: group });
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

/** In the child: runs the cases of its group, printing one "CUDA-CASE <json>" line per case. */
function runCases(group: Group, cases: readonly CudaCase[]): void {
  const fake = group === "fake" || group === "fakepython";
  const ctx: CaseContext = { fake: fake ? bindFakeDriver(runtime().env("DLPACK_CUDA_LIB")!) : null };
  for (const c of cases) {
    if (!c.groups.includes(group)) continue;
    let result: { name: string; ok: boolean; message?: string };
    try {
      c.run(ctx);
      result = { name: c.name, ok: true };
    } catch (error) {
      const e = error as Error;
      result = { name: c.name, ok: false, message: `${e?.stack ?? e}` };
    }
    console.log(`CUDA-CASE ${JSON.stringify(result)}`);
  }
}

/**
 * Registers one test per case of `group` among `cases`, named `<label>: <case>`; the cases run
 * in a child process started on `file` (the calling test file, `import.meta.url`) with `env()`.
 * In that child this runs the cases instead. `skip` is asked only when registering.
 */
export function registerGroup(
  file: string,
  label: string,
  group: Group,
  cases: readonly CudaCase[],
  env: () => Record<string, string>,
  skip: () => string | false = () => false,
): void {
  if (childGroup !== undefined) {
    if (childGroup === group) runCases(group, cases);
    return;
  }
  const path = new URL(file).pathname;
  const reason = skip();
  for (const c of cases) {
    if (!c.groups.includes(group)) continue;
    test(`${label}: ${c.name}`, () => {
      const result = run(path, group, env());
      const outcome = result.outcomes.get(c.name);
      if (outcome === undefined) {
        assert.fail(
          `the ${group} child process did not report this case (exit code ${result.code}):\n${
            result.stderr.slice(-3000)
          }`,
        );
      }
      if (!outcome.ok) assert.fail(outcome.message);
    }, { skip: reason });
  }
}

// ---------------------------------------------------------------------------------------------
// Helpers of the cases

export const CUDA0 = { type: "cuda", id: 0 } as const;

export function fakeOf(ctx: CaseContext): FakeDriver {
  assert.ok(ctx.fake !== null, "this case needs the fake driver");
  return ctx.fake;
}

/** A host view in library memory holding `values`. */
export function hostView(
  values: readonly number[],
  shape: readonly number[] = [values.length],
  dtype: DType = "float32",
): BufferView {
  const v = empty(shape, dtype);
  (v.array() as Float32Array).set(values);
  return v;
}

/** Copies `values` into `dst` (any device) through a temporary host view. */
export function fill(dst: BufferView, values: readonly number[]): void {
  using h = empty(dst.shape, dst.dtype);
  (h.array() as Float32Array).set(values);
  dst.copyFrom(h);
}

export function valuesOf(view: BufferView): number[] {
  using host = view.toHost();
  return Array.from(host.toArray() as Float32Array);
}

export const range = (n: number, from = 0): number[] => Array.from({ length: n }, (_, i) => from + i);

/** Checks that `f` releases everything it allocates (library counts, CUDA counts, fake regions). */
export function noLeaks(ctx: CaseContext, f: () => void): void {
  const before = { s: stats(), c: cuda.cudaStats(), f: ctx.fake?.stats() };
  f();
  const after = { s: stats(), c: cuda.cudaStats(), f: ctx.fake?.stats() };
  assert.equal(after.s.allocations, before.s.allocations, "library allocations");
  assert.equal(after.s.imports, before.s.imports, "imports");
  assert.equal(after.s.exports, before.s.exports, "exports");
  assert.equal(after.c.deviceAllocations, before.c.deviceAllocations, "device allocations");
  assert.equal(after.c.hostAllocations, before.c.hostAllocations, "pinned allocations");
  assert.equal(after.c.managedAllocations, before.c.managedAllocations, "managed allocations");
  assert.equal(after.c.events, before.c.events, "events");
  assert.equal(after.c.freeFailures, 0, "failed frees");
  if (before.f !== undefined && after.f !== undefined) {
    assert.equal(after.f.deviceAllocations, before.f.deviceAllocations, "fake driver: device regions");
    assert.equal(after.f.hostAllocations, before.f.hostAllocations, "fake driver: pinned regions");
    assert.equal(after.f.managedAllocations, before.f.managedAllocations, "fake driver: managed regions");
    assert.equal(after.f.events, before.f.events, "fake driver: live events");
    assert.equal(after.f.wrongContext, 0, "fake driver: calls with the wrong context current");
    assert.equal(after.f.contextDepth, 0, "fake driver: context stack balanced");
  }
}

/** Imports a producer tensor that claims `device` over `data` (an address) or its own host memory. */
export function claim(device: [number, number], shape: number[], data?: number): ReturnType<typeof make> {
  return make({ device, shape, dtype: "float32", ...(data === undefined ? {} : { data }) });
}

/** Registers `cases` in the two groups most files run: the fake driver with two devices, and the
 * machine's own driver (skipped, with the driver's reason, where there is no GPU). */
export function registerDeviceGroups(file: string, cases: readonly CudaCase[]): void {
  registerGroup(
    file,
    "fake driver",
    "fake",
    cases,
    () => ({ DLPACK_CUDA_LIB: fakeDriverPath(), FAKECUDA_DEVICES: "2" }),
  );
  registerGroup(file, "real GPU", "real", cases, () => ({}), () => {
    const status = cuda.available();
    return status.available ? false : `needs a CUDA driver and GPU; here: ${status.reason}`;
  });
}
