// Runs the matrix cases of one peer (DLPACK_PEER, a name from tests/support/peers.ts) in this
// process and prints one "PEER-CASE <json>" line per case. Started by tests/python/matrix.test.ts
// for the peers that need a process of their own; not a test file itself.
import { runtime } from "../../ffi/mod.ts";
import { openPython } from "../../python.ts";
import { caseKey, peerCases, PEERS, type Result } from "./peers.ts";

const name = runtime().env("DLPACK_PEER");
const peer = PEERS.find((p) => p.name === name);
if (peer === undefined) throw new Error(`no peer named ${JSON.stringify(name)}`);
const py = openPython();
for (const c of peerCases(peer)) {
  let result: Result;
  try {
    const { outcome, detail } = c.run(py);
    result = { pair: c.pair, dtype: c.dtype, generation: c.generation, layout: c.layout, outcome, detail };
  } catch (error) {
    const detail = String((error as Error)?.stack ?? error).slice(0, 2000);
    result = { pair: c.pair, dtype: c.dtype, generation: c.generation, layout: c.layout, outcome: "failed", detail };
  }
  if (c.protocol) result.protocol = true;
  console.log(`PEER-CASE ${JSON.stringify({ key: caseKey(c), ...result })}`);
}
