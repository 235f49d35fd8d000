/**
 * Lets every test file run unchanged under `deno test` and `bun test`: one `test()` that maps to
 * `Deno.test` or bun:test, skips that always carry their reason, and the few runtime services
 * tests need (GC, env, subprocesses).
 * @module
 */
import { mkdirSync, rmSync, writeFileSync } from "node:fs";
import { runtime } from "../../ffi/mod.ts";

type Body = () => void | Promise<void>;

interface BunTest {
  test: ((name: string, fn: Body, timeout?: number) => void) & { skip(name: string, fn: Body): void };
}

const isDeno = (globalThis as { Deno?: unknown }).Deno !== undefined;

/** Options of {@link test}. */
export interface TestOptions {
  /** Skip with this reason (shown in the test name); never reported as passed. */
  readonly skip?: string | false | undefined;
  /** Milliseconds (Bun's default of 5 s is short for the soak-style tests). */
  readonly timeout?: number | undefined;
}

/** Set in a child process started on a test file to run that file's CUDA cases of one group
 * (tests/support/cuda_groups.ts); such a process is no test run and registers no tests. */
export const CASE_GROUP_ENV = "DLPACK_CUDA_TEST_GROUP";
const caseChild = runtime().env(CASE_GROUP_ENV) !== undefined;

/** Registers a test with the running test runner (nothing in a CUDA case child process). */
export function test(name: string, fn: Body, options: TestOptions = {}): void {
  if (caseChild) return;
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
  /** `args` for the script; `allowAll`: Deno runs it with --allow-all (reading /proc/self needs it);
   * `gc`: Deno exposes gc(). */
  options: { args?: readonly string[]; allowAll?: boolean; gc?: boolean } = {},
): { code: number; stdout: string; stderr: string } {
  if (isDeno) {
    const permissions = options.allowAll
      ? ["--allow-all"]
      : ["--allow-ffi", "--allow-read", "--allow-env", "--allow-run"];
    const out = new Deno.Command(Deno.execPath(), {
      args: ["run", ...permissions, ...(options.gc ? ["--v8-flags=--expose-gc"] : []), script, ...(options.args ?? [])],
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
    cmd: [bun.process.execPath, "run", script, ...(options.args ?? [])],
    env: { ...bun.process.env, ...env },
  });
  const dec = new TextDecoder();
  return { code: out.exitCode, stdout: dec.decode(out.stdout), stderr: dec.decode(out.stderr) };
}

/** Runs `source` (a module importing the library by absolute path: use `${repoRoot}/mod.ts`) in a
 * fresh process of the same runtime, so a crash fails the test instead of killing the runner.
 * Returns exit code and output; a crash shows as a signal exit code (>= 128) or a non-zero code. */
export function runIsolated(
  source: string,
  options: { env?: Record<string, string>; args?: readonly string[]; allowAll?: boolean; gc?: boolean } = {},
): { code: number; stdout: string; stderr: string } {
  const dir = `${repoRoot}/.scratch/isolated`;
  mkdirSync(dir, { recursive: true });
  const file = `${dir}/${runtimeName}-${Date.now()}-${Math.random().toString(36).slice(2)}.ts`;
  writeFileSync(file, source);
  try {
    return runScript(file, options.env ?? {}, options);
  } finally {
    rmSync(file, { force: true });
  }
}

/** The checkout the tests run from. */
export const repoRoot: string = decodeURIComponent(new URL("../../", import.meta.url).pathname).replace(/\/$/, "");

/** A pinned tool installed by tools/bootstrap.sh, or the name alone (found on PATH) without one. */
export function tool(name: "deno" | "bun" | "zig"): string {
  const pinned = `${repoRoot}/.tools/bin/${name}`;
  return runtime().exists(pinned) ? pinned : name;
}

/** The executable of the runtime running the tests. */
export function selfExecutable(): string {
  if (isDeno) return Deno.execPath();
  return (globalThis as unknown as { process: { execPath: string } }).process.execPath;
}

/** What a finished subprocess gave. */
export interface Spawned {
  readonly code: number;
  readonly stdout: string;
  readonly stderr: string;
}

/** Options of {@link spawn}. */
export interface SpawnOptions {
  readonly cwd?: string;
  /** The child's whole environment (PATH is added when missing); nothing else is inherited. */
  readonly env?: Record<string, string>;
  /** Killed after this many milliseconds (default 120 s); the result then has code 124. */
  readonly timeoutMs?: number;
}

/** Runs a command without blocking the event loop, so a server in this process keeps answering. */
export async function spawn(cmd: string, args: readonly string[], options: SpawnOptions = {}): Promise<Spawned> {
  const env = { PATH: runtime().env("PATH") ?? "/usr/bin:/bin", NO_COLOR: "1", ...options.env };
  const limit = options.timeoutMs ?? 120_000;
  const dec = new TextDecoder();
  if (isDeno) {
    const controller = new AbortController();
    const timer = setTimeout(() => controller.abort(), limit);
    try {
      const out = await new Deno.Command(cmd, {
        args: [...args],
        ...(options.cwd === undefined ? {} : { cwd: options.cwd }),
        env,
        clearEnv: true,
        stdin: "null",
        stdout: "piped",
        stderr: "piped",
        signal: controller.signal,
      }).output();
      const code = controller.signal.aborted ? 124 : out.code;
      return { code, stdout: dec.decode(out.stdout), stderr: dec.decode(out.stderr) };
    } finally {
      clearTimeout(timer);
    }
  }
  const bun = (globalThis as unknown as { Bun: BunSpawn }).Bun;
  const child = bun.spawn({
    cmd: [cmd, ...args],
    cwd: options.cwd,
    env,
    stdin: "ignore",
    stdout: "pipe",
    stderr: "pipe",
  });
  let timedOut = false;
  const timer = setTimeout(() => {
    timedOut = true;
    child.kill();
  }, limit);
  try {
    const [stdout, stderr, code] = await Promise.all([
      new Response(child.stdout).text(),
      new Response(child.stderr).text(),
      child.exited,
    ]);
    return { code: timedOut ? 124 : code, stdout, stderr };
  } finally {
    clearTimeout(timer);
  }
}

interface BunSpawn {
  spawn(o: {
    cmd: string[];
    cwd?: string | undefined;
    env: Record<string, string>;
    stdin: "ignore";
    stdout: "pipe";
    stderr: "pipe";
  }): { stdout: ReadableStream<Uint8Array>; stderr: ReadableStream<Uint8Array>; exited: Promise<number>; kill(): void };
  serve(o: {
    hostname: string;
    port: number;
    fetch(request: Request): Response | Promise<Response>;
  }): { port: number; stop(closeActiveConnections?: boolean): Promise<void> | void };
}

/** A running loopback server. */
export interface LoopbackServer {
  readonly port: number;
  /** Every request path served so far, in order. */
  readonly requests: readonly string[];
  /** Stops it (also happens by itself after its lifetime). Idempotent. */
  close(): Promise<void>;
}

/** Serves `handler` on 127.0.0.1 (never another interface) on a free port. The server stops by
 * itself after `lifetimeMs` even if a test forgets it, so no run leaves a listener behind. */
export function serveLoopback(
  handler: (path: string) => Response | Promise<Response>,
  lifetimeMs = 180_000,
): LoopbackServer {
  const requests: string[] = [];
  const handle = (request: Request) => {
    const path = decodeURIComponent(new URL(request.url).pathname);
    requests.push(path);
    return handler(path);
  };
  let stop: () => Promise<void>;
  let port: number;
  if (isDeno) {
    const server = Deno.serve({ hostname: "127.0.0.1", port: 0, onListen() {} }, handle);
    port = (server.addr as Deno.NetAddr).port;
    stop = () => server.shutdown();
  } else {
    const server = (globalThis as unknown as { Bun: BunSpawn }).Bun.serve({
      hostname: "127.0.0.1",
      port: 0,
      fetch: handle,
    });
    port = server.port;
    stop = async () => {
      await server.stop(true);
    };
  }
  let closing: Promise<void> | undefined;
  const close = () => (closing ??= stop());
  const timer = setTimeout(close, lifetimeMs);
  runtime().unrefTimer(timer);
  return {
    port,
    requests,
    close: async () => {
      clearTimeout(timer);
      await close();
    },
  };
}
