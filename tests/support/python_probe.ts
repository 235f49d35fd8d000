// Opens the embedded Python in a fresh process and prints the outcome (tests/python/bridge.test.ts).
import { openPython } from "../../python.ts";
import { DLPackError } from "../../mod.ts";

try {
  console.log(`opened ${openPython().library}`);
} catch (error) {
  if (!(error instanceof DLPackError)) throw error;
  console.log(`${error.code}: ${error.message}`);
}
