// The Bun single-binary entry: `bun build --compile` embeds the library named by this `type: "file"`
// import into the executable, and `useLibrary` points the module at the embedded copy (Bun
// extracts it for dlopen). Bun-only: Deno has no `type: "file"` imports. The program itself is
// examples/roundtrip.ts, imported dynamically so that it runs after `useLibrary`.
import library from "../../zig/zig-out/lib/libdlpack.so" with { type: "file" };
import { useLibrary } from "../../mod.ts";

useLibrary(library);
await import("../roundtrip.ts");
