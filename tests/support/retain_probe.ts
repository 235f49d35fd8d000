// Opens libdlpack with a bare handle (no core()), optionally asks it to retain itself, closes the
// handle, and prints whether the library is still mapped (tests/distribution/library.test.ts, Linux only).
import { readFileSync } from "node:fs";
import { findLibrary, openLibrary } from "../../ffi/mod.ts";

const path = findLibrary("DLPACK_LIB");
const lib = openLibrary(path, { dlpk_retain_library: { args: [], returns: "i32" } } as const);
const retain = (globalThis as { process?: { argv: string[] } }).process?.argv.includes("--retain") ??
  Deno.args.includes("--retain");
if (retain) console.log(`retain ${lib.symbols.dlpk_retain_library()}`);
lib.close();
const mapped = readFileSync("/proc/self/maps", "utf8").includes(path);
console.log(`mapped ${mapped}`);
