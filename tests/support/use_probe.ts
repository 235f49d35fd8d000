// Calls useLibrary() with the path in DLPACK_TEST_USE (before any use), then reports where the
// library was loaded from (used by tests/distribution/lookup.test.ts in fresh processes).
import { corePath, runtime } from "../../ffi/mod.ts";
import { DLPackError, useLibrary } from "../../mod.ts";

try {
  useLibrary(runtime().env("DLPACK_TEST_USE")!);
  console.log(`loaded ${corePath()}`);
} catch (error) {
  if (!(error instanceof DLPackError)) throw error;
  console.log(`${error.code}: ${error.message}`);
}
