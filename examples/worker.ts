// Handing a view to a Worker zero-copy, both ways: the main thread posts the versioned address of
// an export (`exportDLPack(view).take()`, a bigint, which any message carries), the Worker imports
// it, writes, and hands a view of its own back the same way. `postMessage(view)` itself throws a
// DLPackError saying so: a view is a handle on memory, and a clone would be an empty object.
import { type DLPackError, exportDLPack, importDLPack, zeros } from "../mod.ts";

const worker = new Worker(new URL("./worker_writer.ts", import.meta.url), { type: "module" });
const answers: ((value: { address?: bigint }) => void)[] = [];
worker.onmessage = (e: MessageEvent<{ address?: bigint }>) => answers.shift()?.(e.data);
const ask = (message: unknown) =>
  new Promise<{ address?: bigint }>((resolve) => {
    answers.push(resolve);
    worker.postMessage(message);
  });

using image = zeros([2, 3], "uint8");
try {
  worker.postMessage(image);
} catch (error) {
  console.log(`postMessage(view): ${(error as DLPackError).code}: ${(error as Error).message.slice(0, 40)}...`);
}
// The export holds a share of the memory: the sender may dispose its view at once (here it keeps
// it, to read what the Worker wrote).
await ask({ op: "fill", address: exportDLPack(image).take(), value: 42 });
console.log("written by the Worker:", image.toNested());

const { address } = await ask({ op: "make" });
worker.terminate();
// Library memory is native: the Worker's view outlives the Worker once imported here.
using made = importDLPack({ versioned: address! });
console.log("made by the Worker:", made.toNested());
if (image.get(1, 2) !== 42 || made.get(3) !== 3) throw new Error("worker hand-off failed");
console.log("worker hand-off ok");
