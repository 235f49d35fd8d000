/**
 * A Worker for tests/reliability/worker_handoff.test.ts: it takes views the documented way (a
 * versioned address in a message, imported here), writes them, hands its own views back the same
 * way, and reports what posting a view itself does. Every answer carries `op`, and `error` when
 * something threw, so the test sees failures instead of a silent Worker.
 * @module
 */
import { arange, DLPackError, exportDLPack, importDLPack } from "../../mod.ts";

interface Message {
  op: "write" | "make" | "post-view";
  address?: bigint;
  value?: number;
}

const scope = globalThis as unknown as {
  onmessage: ((e: MessageEvent<Message>) => void) | null;
  postMessage(value: unknown): void;
};

scope.onmessage = (e: MessageEvent<Message>) => {
  const m = e.data;
  try {
    switch (m.op) {
      case "write": {
        // The receiver's share: the memory lives until this view is disposed, whatever the
        // sender did with its own view after posting. Disposed before the answer goes: the main
        // thread may end this Worker as soon as it has the answer.
        let answer: Record<string, unknown>;
        {
          using view = importDLPack({ versioned: m.address! });
          using flat = view.ndim === 1 ? view.slice() : view.reshape([-1]);
          for (let i = 0; i < flat.size; i++) flat.set(m.value! + i, i);
          answer = { op: m.op, shape: view.shape, dtype: view.dtype };
        }
        scope.postMessage(answer);
        break;
      }
      case "make": {
        // A view made here, handed to the main thread: native memory outlives this Worker.
        let address: bigint;
        {
          using made = arange(10, 14, "float64");
          address = exportDLPack(made).take();
        }
        scope.postMessage({ op: m.op, address });
        break;
      }
      case "post-view": {
        using made = arange(3, "int32");
        let code = "none";
        let message = "";
        try {
          scope.postMessage({ op: "delivered", view: made });
        } catch (error) {
          code = error instanceof DLPackError ? error.code : `not a DLPackError: ${error}`;
          message = String((error as Error).message);
        }
        scope.postMessage({ op: m.op, code, message });
        break;
      }
    }
  } catch (error) {
    scope.postMessage({ op: m.op, error: String((error as Error)?.stack ?? error) });
  }
};
