// Loads libdlpack in a fresh process and prints what happened (used by tests/distribution/library.test.ts).
import { corePath } from "../../ffi/mod.ts";
import { DLPackError } from "../../mod.ts";

try {
  console.log(`loaded ${corePath()}`);
} catch (error) {
  if (!(error instanceof DLPackError)) throw error;
  console.log(`${error.code}: ${error.message}`);
}
