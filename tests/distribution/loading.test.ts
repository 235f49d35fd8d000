// Loading the release build safely, in fresh processes of a copy of the sources that has no native
// build (so `ready()` must use the cache or the download): the bytes loaded are the bytes whose
// checksum was verified even when the cache entry is replaced right after the check (they are
// loaded from a sealed memory file, or without one from a private copy); hostile cache entries (a
// FIFO, a folder, a cache folder under a file) and oversized downloads end in a download or a clear
// error, never a hang or a 1 GiB buffer. (Deno's permissions: tests/distribution/permissions.test.ts.)
import assert from "node:assert/strict";
import { createHash } from "node:crypto";
import {
  cpSync,
  existsSync,
  lstatSync,
  mkdirSync,
  readdirSync,
  readFileSync,
  rmSync,
  symlinkSync,
  truncateSync,
  writeFileSync,
} from "node:fs";
import { findLibrary, MAX_RELEASE_BYTES, RELEASE_CHECKSUMS, runtime } from "../../ffi/mod.ts";
import {
  artifact,
  released,
  releaseServer,
  show,
  type SourceCopy as Box,
  sourceCopy,
} from "../support/distribution.ts";
import { runtimeName, selfExecutable, serveLoopback, spawn, test } from "../support/harness.ts";
import { symbols } from "../../ffi/symbols.ts";

const rt = runtime();
const linux = rt.os === "linux" ? false : "reads /proc/self/maps and makes FIFOs (Linux)";
const noDist = existsSync(released) ? false : `dist/${artifact} not built (run tools/release.sh; tools/test.sh does)`;
const skip = linux || noDist;
const sha256 = (path: string) => createHash("sha256").update(readFileSync(path)).digest("hex");
const box = () => sourceCopy("dlpack-loading-");

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
const readyProgram = (mod: string, before = "", maps = true, memoryFiles = true) =>
  `${before}
// Every path the runtime is asked to dlopen (the library binds the runtime's dlopen at call time);
// without \`memoryFiles\` the C library cannot be opened, so no sealed memory file can be made.
const dlopened = [];
const ffi = globalThis.Deno ?? import.meta.require("bun:ffi");
const dlopen = ffi.dlopen;
ffi.dlopen = (path, symbols) => {
  dlopened.push(String(path));
  if (${!memoryFiles} && String(path) === "libc.so.6") throw new Error("no C library in this test");
  return dlopen.call(ffi, path, symbols);
};
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

/** The mapping line of a sealed memory file holding the verified bytes (nothing written to disk). */
const memoryMapping = new RegExp(`^mapped /memfd:${artifact.replaceAll(".", "\\.")} \\(deleted\\)$`, "m");

/** The mapping line of a private copy: a fresh .dlpack-load-* folder, removed once loaded. */
const privateMapping = new RegExp(
  `^mapped [^|]*/\\.dlpack-load-[^/|]+/${artifact.replaceAll(".", "\\.")} \\(deleted\\)$`,
  "m",
);

/** Symbols bound a second time under another name (the general import door's forms). */
const ALIASES = Object.values(symbols).filter((spec) => "symbol" in spec).length;

/** Every dlopen call (the ABI probe, then the whole table; in Bun one more for each symbol bound
 * a second time under another name) opens the descriptor that holds the verified bytes (after the
 * C library, which makes the memory file), never a path someone else could swap. */
const throughDescriptor = runtime().name === "bun"
  ? new RegExp(`^dlopened libc\\.so\\.6 \\| /proc/self/fd/(\\d+)(?: \\| /proc/self/fd/\\1){${1 + ALIASES}}$`, "m")
  : /^dlopened libc\.so\.6 \| \/proc\/self\/fd\/(\d+) \| \/proc\/self\/fd\/\1$/m;

const loadedFrom = (memoryFiles: boolean) => memoryFiles ? "a sealed memory file" : "a private copy";

for (
  const [how, memoryFiles] of [["renamed over it", true], ["rewritten in place", true], [
    "rewritten in place",
    false,
  ]] as const
) {
  test(
    `ready(): a cache entry ${how} right after its checksum matched is not what gets loaded (${
      loadedFrom(memoryFiles)
    })`,
    async () => {
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
        const program = readyProgram(b.mod, before, true, memoryFiles) +
          `console.log("again " + await ready() + " hashed " + hashed);\n`;
        const out = await runProgram(b, program, { DLPACK_CACHE: b.cache, DLPACK_BASE_URL: "http://127.0.0.1:9/" });
        assert.equal(out.code, 0, show(out));
        assert.match(out.stdout, new RegExp(`^ready ${cached}$`, "m"), show(out));
        assert.match(out.stdout, /^same memory true$/m, show(out));
        assert.match(out.stdout, memoryFiles ? memoryMapping : privateMapping, show(out));
        assert.doesNotMatch(out.stdout, new RegExp(`^mapped .*${b.cache}/${artifact}( |$)`, "m"));
        assert.match(out.stdout, throughDescriptor, show(out));
        // The swap did happen, once: a second ready() neither hashes nor loads again.
        assert.match(out.stdout, new RegExp(`^again ${cached} hashed 1$`, "m"), show(out));
        assert.equal(sha256(cached), sha256(foreign));
        assert.deepEqual(readdirSync(b.cache), [artifact], "the private copy is gone");
      } finally {
        rmSync(b.root, { recursive: true, force: true });
      }
    },
    { skip, timeout: 60_000 },
  );
}

for (const memoryFiles of [true, false]) {
  test(
    `ready(): a downloaded build is loaded from ${loadedFrom(memoryFiles)}, not from the cache entry it was written to`,
    async () => {
      const b = box();
      const server = releaseServer();
      try {
        const out = await runProgram(b, readyProgram(b.mod, "", true, memoryFiles), {
          DLPACK_CACHE: b.cache,
          DLPACK_BASE_URL: `http://127.0.0.1:${server.port}/dist/`,
        });
        assert.equal(out.code, 0, show(out));
        assert.match(out.stdout, new RegExp(`^ready ${b.cache}/${artifact}$`, "m"), show(out));
        assert.match(out.stdout, memoryFiles ? memoryMapping : privateMapping, show(out));
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
}

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
      assert.match(out.stdout, memoryMapping, show(out));
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

test(
  "ready(): without memory files, a cache folder under a plain file has the private copy in the temporary folder",
  async () => {
    const b = box();
    const server = releaseServer();
    try {
      writeFileSync(`${b.root}/not-a-folder`, "a file where the cache's parent folder should be");
      const cache = `${b.root}/not-a-folder/cache`;
      const url = `http://127.0.0.1:${server.port}/dist/${artifact}`;
      // Without the C library no sealed memory file can be made: the verified bytes need a file.
      const out = await runProgram(b, readyProgram(b.mod, "", true, false), {
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
  },
  { skip, timeout: 60_000 },
);
