/**
 * What the distribution tests share: a copy of the module's sources outside the repository (no
 * native build next to it, so the library must come from the cache, a download or a package), a
 * loopback server of the release build, and the pinned Deno run with exactly the flags a case names.
 * @module
 */
import { cpSync, mkdirSync, mkdtempSync, readFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { RELEASE_VERSION, releaseFileName, runtime } from "../../ffi/mod.ts";
import { type LoopbackServer, repoRoot, serveLoopback, spawn, type Spawned, tool } from "./harness.ts";

const rt = runtime();

/** The release build of this OS and CPU, and where tools/release.sh puts it. */
export const artifact: string = releaseFileName(RELEASE_VERSION, rt.os, rt.arch);
export const released: string = `${repoRoot}/dist/${artifact}`;

/** A finished process in words, for assertion messages. */
export const show = (out: Spawned): string => `exit ${out.code}\n--- stdout\n${out.stdout}\n--- stderr\n${out.stderr}`;

/** A copy of the module's sources outside the repository, with an empty home (`cache` not made). */
export interface SourceCopy {
  readonly root: string;
  /** mod.ts of the copy (which has no zig/zig-out). */
  readonly mod: string;
  readonly cache: string;
  readonly home: string;
}

/** Copies mod.ts, src/ and ffi/ into a fresh temporary folder. */
export function sourceCopy(prefix = "dlpack-copy-"): SourceCopy {
  const root = mkdtempSync(`${tmpdir()}/${prefix}`);
  for (const part of ["mod.ts", "src", "ffi"]) {
    cpSync(`${repoRoot}/${part}`, `${root}/vendor/${part}`, { recursive: true });
  }
  mkdirSync(`${root}/home`);
  return { root, mod: `${root}/vendor/mod.ts`, cache: `${root}/cache`, home: `${root}/home` };
}

/** Serves dist/'s release build of this platform at /dist/<name>, nothing else. */
export const releaseServer = (): LoopbackServer =>
  serveLoopback((path) =>
    path === `/dist/${artifact}` ? new Response(readFileSync(released)) : new Response("not found", { status: 404 })
  );

/** Runs a program with the pinned Deno and exactly `flags` (never a prompt), from either runner. */
export function denoWith(
  flags: readonly string[],
  script: string,
  env: Record<string, string> = {},
  cwd = repoRoot,
): Promise<Spawned> {
  const home = rt.env("HOME") ?? "/";
  return spawn(tool("deno"), ["run", "--no-prompt", ...flags, script], {
    cwd,
    // The parent's module cache, so the child does not transpile everything again.
    env: { HOME: home, DENO_DIR: rt.env("DENO_DIR") ?? `${home}/.cache/deno`, ...env },
  });
}
