/**
 * Lets every test file run unchanged under `deno test` and `bun test`: one `test()` that maps to
 * `Deno.test` or bun:test, skips that always carry their reason, and the few runtime services
 * tests need (GC, env, subprocesses).
 * @module
 */
import { runtime } from "../../ffi/mod.ts";

type Body = () => void | Promise<void>;

interface BunTest {
  test: ((name: string, fn: Body, timeout?: number) => void) & { skip(name: string, fn: Body): void };
}

const isDeno = (globalThis as { Deno?: unknown }).Deno !== undefined;

/** Options of {@link test}. */
export interface TestOptions {
  /** Skip with this reason (shown in the test name); never reported as passed. */
  readonly skip?: string | false;
  /** Milliseconds (Bun's default of 5 s is short for the soak-style tests). */
  readonly timeout?: number;
}

/** Registers a test with the running test runner. */
export function test(name: string, fn: Body, options: TestOptions = {}): void {
  const skip = options.skip;
  const fullName = skip ? `${name} [skipped: ${skip}]` : name;
  if (isDeno) {
    Deno.test({ name: fullName, fn, ignore: Boolean(skip), sanitizeResources: false, sanitizeOps: false });
    return;
  }
  const bun = (import.meta as unknown as { require(id: string): BunTest }).require("bun:test");
  if (skip) bun.test.skip(fullName, fn);
  else bun.test(fullName, fn, options.timeout ?? 60_000);
}

/** The runtime's name. */
export const runtimeName: "deno" | "bun" = isDeno ? "deno" : "bun";

/** Collects garbage and lets finalization callbacks run. Returns false if GC cannot be forced. */
export async function collectGarbage(rounds = 4): Promise<boolean> {
  let forced = true;
  for (let i = 0; i < rounds; i++) {
    forced = runtime().gc() && forced;
    await new Promise((resolve) => setTimeout(resolve, 10));
  }
  return forced;
}

/** Why GC-dependent tests cannot run here, or false when they can. */
export function gcUnavailable(): string | false {
  if (isDeno && (globalThis as { gc?: unknown }).gc === undefined) {
    return "GC not exposed (run deno test with --v8-flags=--expose-gc)";
  }
  return false;
}

/** Memory of this process in bytes: resident set size, and the JS heap's committed (`heapTotal`)
 * and live (`heapUsed`) parts, for the soak's leak check. */
export function memoryBytes(): { rss: number; heapTotal: number; heapUsed: number } {
  type Usage = { rss: number; heapTotal: number; heapUsed: number };
  const usage: Usage = isDeno
    ? Deno.memoryUsage()
    : (globalThis as unknown as { process: { memoryUsage(): Usage } }).process.memoryUsage();
  return { rss: usage.rss, heapTotal: usage.heapTotal, heapUsed: usage.heapUsed };
}

/** Runs a script in a fresh process of the same runtime; returns exit code and output. With
 * `gc`, the script may force collections (Deno needs a V8 flag for that; Bun always can). */
export function runScript(
  script: string,
  env: Record<string, string> = {},
  options: { gc?: boolean } = {},
): { code: number; stdout: string; stderr: string } {
  if (isDeno) {
    const out = new Deno.Command(Deno.execPath(), {
      args: [
        "run",
        "--allow-ffi",
        "--allow-read",
        "--allow-env",
        ...(options.gc ? ["--v8-flags=--expose-gc"] : []),
        script,
      ],
      env,
      stdout: "piped",
      stderr: "piped",
    }).outputSync();
    const dec = new TextDecoder();
    return { code: out.code, stdout: dec.decode(out.stdout), stderr: dec.decode(out.stderr) };
  }
  const bun = globalThis as unknown as {
    Bun: {
      spawnSync(o: { cmd: string[]; env: Record<string, string | undefined> }): {
        exitCode: number;
        stdout: Uint8Array;
        stderr: Uint8Array;
      };
      argv: string[];
    };
    process: { env: Record<string, string | undefined>; execPath: string };
  };
  const out = bun.Bun.spawnSync({
    cmd: [bun.process.execPath, "run", script],
    env: { ...bun.process.env, ...env },
  });
  const dec = new TextDecoder();
  return { code: out.exitCode, stdout: dec.decode(out.stdout), stderr: dec.decode(out.stderr) };
}
