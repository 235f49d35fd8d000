// The Worker of examples/worker.ts: imports the addresses it is sent, writes, and answers only
// after its views are disposed (the main thread may end it as soon as it has the answer, and a
// Worker ended while it holds a view never releases it).
import { arange, exportDLPack, importDLPack } from "../mod.ts";

const scope = globalThis as unknown as {
  onmessage: ((e: MessageEvent<{ op: string; address?: bigint; value?: number }>) => void) | null;
  postMessage(value: unknown): void;
};

scope.onmessage = (e) => {
  if (e.data.op === "fill") {
    {
      using view = importDLPack({ versioned: e.data.address! });
      view.fill(e.data.value!);
    }
    scope.postMessage({});
  } else {
    let address: bigint;
    {
      using made = arange(4, "float32");
      address = exportDLPack(made).take(); // the export's share keeps the memory for the receiver
    }
    scope.postMessage({ address });
  }
};
