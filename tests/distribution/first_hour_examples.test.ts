// The newcomer's programs in examples/ run as written with plain `deno run` / `bun run`: the image
// program (numpy in, crop, channel, permute, means, float32, numpy out, checked by numpy) and the
// Worker hand-off (a Worker writes a view the main thread reads, and hands one back).
import assert from "node:assert/strict";
import { repoRoot, runScript, test } from "../support/harness.ts";
import { noPython } from "../support/python.ts";

const show = (out: { stdout: string; stderr: string }) => `--- stdout\n${out.stdout}\n--- stderr\n${out.stderr}`;

test("examples/image.ts: numpy's image through crop, channel, permute and normalise, back to numpy", () => {
  const out = runScript(`${repoRoot}/examples/image.ts`, {}, { allowAll: true });
  assert.equal(out.code, 0, show(out));
  assert.match(out.stdout, /^BufferView<uint8> shape \[48, 64, 3\], strides \[192, 3, 1\], cpu:0, readwrite$/m);
  assert.match(out.stdout, /^channel 2: mean \d+\.\d{3}, std \d+\.\d{3}$/m);
  assert.match(out.stdout, /^normalised: BufferView<float32> shape \[3, 32, 32\]/m);
  assert.match(out.stdout, /^image ok$/m);
}, { skip: noPython, timeout: 60_000 });

test("examples/worker.ts: a Worker writes a view zero-copy and hands one back", () => {
  const out = runScript(`${repoRoot}/examples/worker.ts`, {}, { allowAll: true });
  assert.equal(out.code, 0, show(out));
  assert.match(out.stdout, /^postMessage\(view\): argument: a BufferView cannot be cloned/m);
  assert.match(out.stdout, /^worker hand-off ok$/m);
}, { timeout: 60_000 });
