// Loading the release build safely, in fresh processes of a copy of the sources that has no native
// build (so `ready()` must use the cache or the download): the bytes loaded are the bytes whose
// checksum was verified even when the cache entry is replaced right after the check; hostile cache
// entries (a FIFO, a folder, a cache folder under a file) and oversized downloads end in a download
// or a clear error, never a hang or a 1 GiB buffer; and Deno permissions that are refused are
// reported as such, naming the flag. The Deno-permission cases run the pinned Deno as the child
// from both test runners, so they are real under `bun test` too.
import assert from "node:assert/strict";
import { createHash } from "node:crypto";
import {
  cpSync,
  existsSync,
  lstatSync,
  mkdirSync,
  mkdtempSync,
  readdirSync,
  readFileSync,
  rmSync,
  symlinkSync,
  truncateSync,
  writeFileSync,
} from "node:fs";
import { tmpdir } from "node:os";
import {
  findLibrary,
  localBuildPath,
  MAX_RELEASE_BYTES,
  RELEASE_CHECKSUMS,
  RELEASE_VERSION,
  releaseFileName,
  runtime,
} from "../../ffi/mod.ts";
import {
  repoRoot,
  runtimeName,
  selfExecutable,
  serveLoopback,
  spawn,
  type Spawned,
  test,
  tool,
} from "../support/harness.ts";

const rt = runtime();
const artifact = releaseFileName(RELEASE_VERSION, rt.os, rt.arch);
const released = `${repoRoot}/dist/${artifact}`;
const linux = rt.os === "linux" ? false : "reads /proc/self/maps and makes FIFOs (Linux)";
const noDist = existsSync(released) ? false : `dist/${artifact} not built (run tools/release.sh; tools/test.sh does)`;
const skip = linux || noDist;
const show = (out: Spawned) => `exit ${out.code}\n--- stdout\n${out.stdout}\n--- stderr\n${out.stderr}`;
const sha256 = (path: string) => createHash("sha256").update(readFileSync(path)).digest("hex");

interface Box {
  readonly root: string;
  /** mod.ts of a copy of the sources without zig/zig-out. */
  readonly mod: string;
  readonly cache: string;
  readonly home: string;
}

/** A copy of the module's sources outside the repository, with an empty cache and home. */
function box(): Box {
  const root = mkdtempSync(`${tmpdir()}/dlpack-loading-`);
  for (const part of ["mod.ts", "src", "ffi"]) {
    cpSync(`${repoRoot}/${part}`, `${root}/vendor/${part}`, { recursive: true });
  }
  mkdirSync(`${root}/home`);
  return { root, mod: `${root}/vendor/mod.ts`, cache: `${root}/cache`, home: `${root}/home` };
}

/** Runs `source` as a program in `b.root` with the runtime running the tests (Deno: every
 * permission, reading /proc/self included). */
async function runProgram(b: Box, source: string, env: Record<string, string>, timeoutMs = 60_000) {
  writeFileSync(`${b.root}/app.ts`, source);
  const args = runtimeName === "deno" ? ["run", "--allow-all", "app.ts"] : ["run", "app.ts"];
  return await spawn(selfExecutable(), args, { cwd: b.root, env: { HOME: b.home, ...env }, timeoutMs });
}

/** The files libdlpack is mapped from in this process, as /proc/self/maps names them. */
const MAPPED = `(await import("node:fs")).readFileSync("/proc/self/maps", "utf8").split("\\n")
  .filter((l) => l.includes("libdlpack")).map((l) => l.slice(l.indexOf("/")))`;

/** A program that calls ready(), says what it returned and where the library is mapped from (Deno
 * reads /proc/self only with --allow-all: `maps` false leaves that out), and checks that an export
 * imported back is the same memory. */
const readyProgram = (mod: string, before = "", maps = true) =>
  `${before}
// Every path the runtime is asked to dlopen (the library binds the runtime's dlopen at call time).
const dlopened = [];
const ffi = globalThis.Deno ?? import.meta.require("bun:ffi");
const dlopen = ffi.dlopen;
ffi.dlopen = (path, symbols) => (dlopened.push(String(path)), dlopen.call(ffi, path, symbols));
const { exportDLPack, importDLPack, ready } = await import(${JSON.stringify(mod)});
let loaded = false;
try {
  console.log("ready " + await ready());
  console.log("dlopened " + dlopened.join(" | "));
  loaded = true;
} catch (error) {
  console.log("error " + error.name + " " + error.code + ": " + error.message);
}
if (loaded) {
  const data = new Float64Array([1, 2, 3]);
  {
    using view = importDLPack(exportDLPack(data));
    view.set(42, 0);
  }
  console.log("same memory " + (data[0] === 42));
  ${maps ? `console.log("mapped " + [...new Set(${MAPPED})].join(" | "));` : ""}
}
`;

const releaseServer = () =>
  serveLoopback((path) =>
    path === `/dist/${artifact}` ? new Response(readFileSync(released)) : new Response("not found", { status: 404 })
  );

/** The mapping line of a private copy: a fresh .dlpack-load-* folder, removed once loaded. */
const privateMapping = new RegExp(
  `^mapped [^|]*/\\.dlpack-load-[^/|]+/${artifact.replaceAll(".", "\\.")} \\(deleted\\)$`,
  "m",
);

/** Both dlopen calls (the ABI probe, then the whole table) open the descriptor that created the
 * private copy, never a path someone else could swap. */
const throughDescriptor = /^dlopened \/proc\/self\/fd\/(\d+) \| \/proc\/self\/fd\/\1$/m;

for (const how of ["renamed over it", "rewritten in place"] as const) {
  test(`ready(): a cache entry ${how} right after its checksum matched is not what gets loaded`, async () => {
    // The child wraps crypto.subtle.digest, the checksum's only source, so that the moment the
    // cached build has been hashed its file is replaced by another library (the test producer,
    // which speaks ABI 65535). Loading that file by path after the check would load it; loading the
    // verified bytes loads libdlpack. /proc/self/maps and the recorded dlopen calls then show where
    // the code came from: the private copy, through the descriptor that wrote it.
    const b = box();
    try {
      mkdirSync(b.cache);
      const cached = `${b.cache}/${artifact}`;
      cpSync(released, cached);
      const foreign = findLibrary("DLPACK_TESTPROD_LIB", "dlpack_testprod");
      const swap = how === "renamed over it"
        ? `fs.copyFileSync(${JSON.stringify(foreign)}, CACHED + ".new"); fs.renameSync(CACHED + ".new", CACHED);`
        : `fs.writeFileSync(CACHED, fs.readFileSync(${JSON.stringify(foreign)}));`;
      const before = `import * as fs from "node:fs";
const CACHED = ${JSON.stringify(cached)};
const subtle = crypto.subtle;
const digest = subtle.digest.bind(subtle);
let hashed = 0;
subtle.digest = async (...args) => {
  const result = await digest(...args);
  if (hashed++ === 0) { ${swap} }
  return result;
};
`;
      const program = readyProgram(b.mod, before) +
        `console.log("again " + await ready() + " hashed " + hashed);\n`;
      const out = await runProgram(b, program, { DLPACK_CACHE: b.cache, DLPACK_BASE_URL: "http://127.0.0.1:9/" });
      assert.equal(out.code, 0, show(out));
      assert.match(out.stdout, new RegExp(`^ready ${cached}$`, "m"), show(out));
      assert.match(out.stdout, /^same memory true$/m, show(out));
      assert.match(out.stdout, privateMapping, show(out));
      assert.doesNotMatch(out.stdout, new RegExp(`^mapped .*${b.cache}/${artifact}( |$)`, "m"));
      assert.match(out.stdout, throughDescriptor, show(out));
      // The swap did happen, once: a second ready() neither hashes nor loads again.
      assert.match(out.stdout, new RegExp(`^again ${cached} hashed 1$`, "m"), show(out));
      assert.equal(sha256(cached), sha256(foreign));
      assert.deepEqual(readdirSync(b.cache), [artifact], "the private copy is gone");
    } finally {
      rmSync(b.root, { recursive: true, force: true });
    }
  }, { skip, timeout: 60_000 });
}

test(
  "ready(): a downloaded build is loaded from a private copy, not from the cache entry it was written to",
  async () => {
    const b = box();
    const server = releaseServer();
    try {
      const out = await runProgram(b, readyProgram(b.mod), {
        DLPACK_CACHE: b.cache,
        DLPACK_BASE_URL: `http://127.0.0.1:${server.port}/dist/`,
      });
      assert.equal(out.code, 0, show(out));
      assert.match(out.stdout, new RegExp(`^ready ${b.cache}/${artifact}$`, "m"), show(out));
      assert.match(out.stdout, privateMapping, show(out));
      assert.match(out.stdout, throughDescriptor, show(out));
      assert.equal(sha256(`${b.cache}/${artifact}`), RELEASE_CHECKSUMS[artifact]);
      assert.deepEqual(readdirSync(b.cache), [artifact]);
      assert.equal(out.stderr, "");
    } finally {
      await server.close();
      rmSync(b.root, { recursive: true, force: true });
    }
  },
  { skip, timeout: 60_000 },
);

test("ready(): a download larger than any release build is cut off early, announced or not", async () => {
  const b = box();
  let sent = 0;
  const huge = 256 * 1024 * 1024;
  const server = serveLoopback((path) => {
    if (path === `/announced/${artifact}`) return new Response(new Uint8Array(MAX_RELEASE_BYTES + 1));
    if (path !== `/endless/${artifact}`) return new Response("not found", { status: 404 });
    // Chunked, so no Content-Length warns the client: only counting the bytes can stop it.
    return new Response(
      new ReadableStream<Uint8Array>({
        pull(controller) {
          if (sent >= huge) return controller.close();
          sent += 65536;
          controller.enqueue(new Uint8Array(65536));
        },
      }, { highWaterMark: 1 }),
    );
  });
  try {
    const endless = await runProgram(b, readyProgram(b.mod), {
      DLPACK_CACHE: b.cache,
      DLPACK_BASE_URL: `http://127.0.0.1:${server.port}/endless/`,
    });
    assert.equal(endless.code, 0, show(endless));
    assert.ok(
      endless.stdout.includes(
        `/endless/${artifact} (sent more than the ${MAX_RELEASE_BYTES} bytes a release build may have: cut off)`,
      ),
      show(endless),
    );
    assert.match(endless.stdout, /^error DLPackError library: libdlpack-.* could not be downloaded; tried: /m);
    assert.ok(sent < 8 * MAX_RELEASE_BYTES, `the server sent ${sent} bytes before the client stopped`);

    const announced = await runProgram(b, readyProgram(b.mod), {
      DLPACK_CACHE: b.cache,
      DLPACK_BASE_URL: `http://127.0.0.1:${server.port}/announced/`,
    });
    assert.ok(
      announced.stdout.includes(
        `(announces ${MAX_RELEASE_BYTES + 1} bytes, more than the ${MAX_RELEASE_BYTES} a release build may have: ` +
          `refused unread)`,
      ),
      show(announced),
    );
    assert.ok(!existsSync(`${b.cache}/${artifact}`), "nothing is cached");
  } finally {
    await server.close();
    rmSync(b.root, { recursive: true, force: true });
  }
}, { skip, timeout: 60_000 });

/** Makes a FIFO with mkfifo(1). */
async function mkfifo(path: string): Promise<void> {
  const out = await spawn("mkfifo", [path]);
  assert.equal(out.code, 0, show(out));
}

test(
  "ready(): a FIFO, a symlink or an oversized file in the cache is passed over and replaced by a download, never read",
  async () => {
    const b = box();
    const server = releaseServer();
    try {
      mkdirSync(b.cache);
      const cached = `${b.cache}/${artifact}`;
      const env = { DLPACK_CACHE: b.cache, DLPACK_BASE_URL: `http://127.0.0.1:${server.port}/dist/` };
      await mkfifo(cached);
      // Reading a FIFO with no writer blocks forever: a hang here times out as code 124.
      const fifo = await runProgram(b, readyProgram(b.mod), env, 30_000);
      assert.equal(fifo.code, 0, show(fifo));
      assert.match(fifo.stdout, new RegExp(`^ready ${cached}$`, "m"), show(fifo));
      assert.ok(lstatSync(cached).isFile() && sha256(cached) === RELEASE_CHECKSUMS[artifact], "the FIFO was replaced");

      // A symlink there is not followed (this one leads to a FIFO elsewhere): passed over, replaced.
      rmSync(cached);
      await mkfifo(`${b.root}/elsewhere`);
      symlinkSync(`${b.root}/elsewhere`, cached);
      const linked = await runProgram(b, readyProgram(b.mod), env, 30_000);
      assert.equal(linked.code, 0, show(linked));
      assert.match(linked.stdout, new RegExp(`^ready ${cached}$`, "m"), show(linked));
      assert.ok(lstatSync(cached).isFile(), "the symlink was replaced by the verified download");

      // Offline, the FIFO is named in the error with what it is.
      rmSync(cached);
      await mkfifo(cached);
      const offline = await runProgram(
        b,
        readyProgram(b.mod),
        { ...env, DLPACK_BASE_URL: "http://127.0.0.1:9/" },
        30_000,
      );
      assert.equal(offline.code, 0, show(offline));
      assert.ok(offline.stdout.includes(`${cached} (from DLPACK_CACHE; it is a FIFO, not a regular file: ignored)`));

      // A sparse file far beyond any release build is refused by its size, not read whole.
      rmSync(cached);
      writeFileSync(cached, "");
      truncateSync(cached, 1024 * 1024 * 1024);
      const sized = await runProgram(b, readyProgram(b.mod), { ...env, DLPACK_BASE_URL: "http://127.0.0.1:9/" });
      assert.ok(
        sized.stdout.includes(
          `${cached} (from DLPACK_CACHE; it has ${1024 * 1024 * 1024} bytes, more than the ${MAX_RELEASE_BYTES} ` +
            `a release build may have: ignored)`,
        ),
        show(sized),
      );
    } finally {
      await server.close();
      rmSync(b.root, { recursive: true, force: true });
    }
  },
  { skip, timeout: 90_000 },
);

test(
  "ready(): a cache entry that is a folder is passed over; the download is loaded and the warning says why it was not cached",
  async () => {
    const b = box();
    const server = releaseServer();
    try {
      const cached = `${b.cache}/${artifact}`;
      mkdirSync(cached, { recursive: true });
      writeFileSync(`${cached}/keep`, "a folder that is not empty");
      const url = `http://127.0.0.1:${server.port}/dist/${artifact}`;
      const out = await runProgram(b, readyProgram(b.mod), {
        DLPACK_CACHE: b.cache,
        DLPACK_BASE_URL: `http://127.0.0.1:${server.port}/dist/`,
      });
      assert.equal(out.code, 0, show(out));
      // Not cached, so ready() names the URL the verified bytes came from.
      assert.match(out.stdout, new RegExp(`^ready ${url}$`, "m"), show(out));
      assert.match(out.stdout, /^same memory true$/m);
      assert.match(out.stdout, privateMapping, show(out));
      assert.ok(
        out.stderr.includes(
          `dlpack-ts: loaded the verified release build from ${url}, but ${cached} is unusable (it is a folder, ` +
            `not a regular file) and could not be written: `,
        ),
        show(out),
      );
      assert.match(out.stderr, /; the next run downloads it again\n$/);
      assert.deepEqual(readdirSync(b.cache).sort(), [artifact], "no private copy or temporary file is left");
    } finally {
      await server.close();
      rmSync(b.root, { recursive: true, force: true });
    }
  },
  { skip, timeout: 60_000 },
);

test("ready(): a cache folder under a plain file falls back to a private copy in the temporary folder", async () => {
  const b = box();
  const server = releaseServer();
  try {
    writeFileSync(`${b.root}/not-a-folder`, "a file where the cache's parent folder should be");
    const cache = `${b.root}/not-a-folder/cache`;
    const url = `http://127.0.0.1:${server.port}/dist/${artifact}`;
    const out = await runProgram(b, readyProgram(b.mod), {
      DLPACK_CACHE: cache,
      DLPACK_BASE_URL: `http://127.0.0.1:${server.port}/dist/`,
    });
    assert.equal(out.code, 0, show(out));
    assert.match(out.stdout, new RegExp(`^ready ${url}$`, "m"), show(out));
    assert.match(out.stdout, /^same memory true$/m);
    assert.match(out.stdout, privateMapping, show(out));
    assert.ok(
      out.stderr.includes(
        `but ${cache}/${artifact} is unusable (a folder on its path is a file (ENOTDIR)) and could not be written: ` +
          `its folder could not be made: a folder on its path is a file (ENOTDIR)`,
      ),
      show(out),
    );
  } finally {
    await server.close();
    rmSync(b.root, { recursive: true, force: true });
  }
}, { skip, timeout: 60_000 });

/** Runs a program with the pinned Deno and exactly `flags` (never a prompt), from either runner. */
function denoWith(flags: readonly string[], script: string, env: Record<string, string> = {}, cwd = repoRoot) {
  const home = rt.env("HOME") ?? "/";
  return spawn(tool("deno"), ["run", "--no-prompt", ...flags, script], {
    cwd,
    // The parent's module cache, so the child does not transpile everything again.
    env: { HOME: home, DENO_DIR: rt.env("DENO_DIR") ?? `${home}/.cache/deno`, ...env },
  });
}

const probe = `${repoRoot}/tests/support/load_probe.ts`;
const local = localBuildPath(rt.os)!;

test(
  "Deno permissions: DLPACK_LIB that may not be read is an error naming --allow-env, never a silent fallback",
  async () => {
    const out = await denoWith(["--allow-ffi", "--allow-read"], probe, { DLPACK_LIB: "/nonexistent/libdlpack.so" });
    assert.equal(out.code, 0, show(out));
    assert.equal(
      out.stdout.trim(),
      "library: cannot tell whether DLPACK_LIB is set: Deno denies reading it, and a set DLPACK_LIB must never be " +
        "passed over silently. Run with --allow-env=DLPACK_LIB (or --allow-env).",
    );
    const granted = await denoWith(["--allow-ffi", "--allow-read", "--allow-env=DLPACK_LIB"], probe);
    assert.equal(granted.stdout.trim(), `loaded ${local}`, show(granted));
  },
  { timeout: 60_000 },
);

test("Deno permissions: without --allow-read a library is neither 'no such file' nor 'not built'", async () => {
  const set = await denoWith(["--allow-ffi", "--allow-env=DLPACK_LIB"], probe, { DLPACK_LIB: local });
  assert.equal(set.code, 0, show(set));
  assert.equal(
    set.stdout.trim(),
    `library: DLPACK_LIB=${local}: Deno denies reading it, so it cannot be checked. Run with --allow-read=${local} ` +
      "(or --allow-read).",
  );
  const unset = await denoWith(["--allow-ffi", "--allow-env=DLPACK_LIB"], probe);
  assert.equal(
    unset.stdout.trim(),
    `library: libdlpack.so could not be looked for: run with --allow-read=${local} (or --allow-read); tried: ` +
      `DLPACK_LIB (not set); ${local} (not checked: Deno denies reading it).`,
    show(unset),
  );
  const scoped = await denoWith(["--allow-ffi", "--allow-env=DLPACK_LIB", `--allow-read=${local}`], probe);
  assert.equal(scoped.stdout.trim(), `loaded ${local}`, show(scoped));
}, { skip: rt.os === "linux" ? false : "names the Linux build", timeout: 60_000 });

test(
  "Deno permissions: a path-scoped or missing --allow-ffi fails ready() up front, not the first export",
  async () => {
    const dir = mkdtempSync(`${tmpdir()}/dlpack-ffi-`);
    try {
      writeFileSync(
        `${dir}/app.ts`,
        `import { exportDLPack, ready } from ${JSON.stringify(`${repoRoot}/mod.ts`)};
const said = (e) => e.name + " " + e.code + ": " + e.message;
try { console.log("ready " + await ready()); } catch (e) { console.log("ready failed " + said(e)); }
try { exportDLPack(new Float32Array(2)); console.log("exported"); } catch (e) { console.log("export failed " + said(e)); }
`,
      );
      const libDir = local.slice(0, local.lastIndexOf("/"));
      const scoped = await denoWith([`--allow-ffi=${libDir}`, "--allow-read", "--allow-env"], "app.ts", {}, dir);
      assert.equal(scoped.code, 0, show(scoped));
      const refusal = "DLPackError library: libdlpack needs Deno's FFI permission without a path: run with " +
        "--allow-ffi. A path-scoped --allow-ffi=<dir> lets Deno load the library but not run the pointer functions " +
        "(Deno.UnsafePointer, Deno.UnsafePointerView) that every import and export uses.";
      assert.equal(scoped.stdout, `ready failed ${refusal}\nexport failed ${refusal}\n`, show(scoped));
      const none = await denoWith(["--allow-read", "--allow-env"], "app.ts", {}, dir);
      assert.equal(none.stdout, `ready failed ${refusal}\nexport failed ${refusal}\n`, show(none));
      const full = await denoWith(["--allow-ffi", "--allow-read", "--allow-env"], "app.ts", {}, dir);
      assert.equal(full.stdout, `ready ${local}\nexported\n`, show(full));
    } finally {
      rmSync(dir, { recursive: true, force: true });
    }
  },
  { timeout: 60_000 },
);

test("Deno permissions: FFI revoked after loading is a DLPackError at the next first use, not NotCapable", async () => {
  const dir = mkdtempSync(`${tmpdir()}/dlpack-ffi-`);
  try {
    writeFileSync(
      `${dir}/app.ts`,
      `import { exportDLPack, importDLPack, ready, zeros } from ${JSON.stringify(`${repoRoot}/mod.ts`)};
await ready();
await Deno.permissions.revoke({ name: "ffi" });
// Calls into the library opened before still run (Deno checks the permission at dlopen), and a
// round trip needs nothing else: the scratch was viewed as the library loaded.
importDLPack(exportDLPack(new Float32Array(2))).dispose();
console.log("round trip");
// A view of native memory as an ArrayBuffer needs Deno's pointer functions, which check it.
const view = zeros([2], "float32");
try {
  view.array();
  console.log("array");
} catch (e) {
  console.log("failed " + e.name + " " + e.code + ": " + e.message);
}
`,
    );
    const out = await denoWith(["--allow-ffi", "--allow-read", "--allow-env"], "app.ts", {}, dir);
    assert.equal(out.code, 0, show(out));
    assert.ok(
      out.stdout.startsWith(
        "round trip\nfailed DLPackError library: Deno's FFI permission was revoked after libdlpack was loaded: ",
      ),
      show(out),
    );
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
}, { timeout: 60_000 });

test("Deno permissions: a cache that may not be read or written is an error naming the folder's flag", async () => {
  const b = box();
  const server = releaseServer();
  try {
    writeFileSync(`${b.root}/app.ts`, readyProgram(b.mod, "", false));
    const env = { DLPACK_CACHE: b.cache, DLPACK_BASE_URL: `http://127.0.0.1:${server.port}/dist/` };
    const flags = ["--allow-ffi", "--allow-env", `--allow-net=127.0.0.1:${server.port}`];
    const unreadable = await denoWith([...flags, `--allow-read=${b.root}/vendor`], "app.ts", env, b.root);
    assert.ok(
      unreadable.stdout.includes(
        `error DLPackError library: ${artifact} could not be read from the cache: run with --allow-read=${b.cache}; ` +
          "tried: ",
      ),
      show(unreadable),
    );
    assert.ok(unreadable.stdout.includes(`${b.cache}/${artifact} (from DLPACK_CACHE; Deno denies reading it)`));

    // Readable but not writable: the download is verified, but neither the cache nor a private
    // copy to load can be written.
    const unwritable = await denoWith([...flags, `--allow-read=${b.root}`], "app.ts", env, b.root);
    assert.ok(
      unwritable.stdout.includes(
        `error DLPackError library: the verified ${artifact} (from http://127.0.0.1:${server.port}/dist/${artifact}) ` +
          `could not be written to a private file to load it from; tried: ${b.cache} (`,
      ),
      show(unwritable),
    );
    assert.match(unwritable.stdout, new RegExp(`Run with --allow-write=${b.cache}\\.$`, "m"));
    const written = await denoWith(
      [...flags, `--allow-read=${b.root}`, `--allow-write=${b.cache}`],
      "app.ts",
      env,
      b.root,
    );
    assert.match(written.stdout, new RegExp(`^ready ${b.cache}/${artifact}$`, "m"), show(written));
    assert.equal(written.stderr, "", show(written));
  } finally {
    await server.close();
    rmSync(b.root, { recursive: true, force: true });
  }
}, { skip, timeout: 90_000 });
