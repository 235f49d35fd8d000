// Rewrites the generated part of a document: the text between `<!-- NAME:begin -->` and
// `<!-- NAME:end -->`. Used by the bench (docs/performance.md) and the interop matrix (docs/python.md).
import { readFileSync, writeFileSync } from "node:fs";

/** Replaces what stands between the two markers named `name` in `path` with `text`. */
export function replaceBetweenMarkers(path: string, name: string, text: string): void {
  const current = readFileSync(path, "utf8");
  const begin = `<!-- ${name}:begin -->`;
  const end = `<!-- ${name}:end -->`;
  const from = current.indexOf(begin);
  const to = current.indexOf(end);
  if (from < 0 || to < from) throw new Error(`${path} lacks the ${name} markers`);
  writeFileSync(path, `${current.slice(0, from + begin.length)}\n${text}\n${current.slice(to)}`);
}
