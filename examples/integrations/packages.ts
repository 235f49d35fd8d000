/**
 * Loads the npm packages the integration examples use from the folder `tools/npm.sh` installs
 * them into (`DLPACK_NODE_MODULES`, else `.tools/integrations/node_modules` in this checkout), the
 * same way in Deno and Bun. In a project of your own, import them as usual instead
 * (`import * as ort from "onnxruntime-node"` with a package.json, or `npm:onnxruntime-node@1.30.0`
 * in Deno).
 * @module
 */
import { createRequire } from "node:module";
import { existsSync } from "node:fs";

/** The node_modules folder the examples load packages from. */
export function nodeModules(): string {
  const fromEnv = (globalThis as { process?: { env: Record<string, string | undefined> } }).process?.env
    .DLPACK_NODE_MODULES;
  if (fromEnv) return fromEnv;
  return decodeURIComponent(new URL("../../.tools/integrations/node_modules", import.meta.url).pathname);
}

/** The package's exports, or why it cannot be loaded (the tests skip with that reason). */
export function loadPackage<T>(name: string): { module: T } | { missing: string } {
  const folder = nodeModules();
  if (!existsSync(`${folder}/${name}/package.json`)) {
    return { missing: `${name} is not installed in ${folder} (tools/npm.sh installs the pinned versions)` };
  }
  const require = createRequire(`${folder}/../package.json`);
  return { module: require(name) as T };
}
