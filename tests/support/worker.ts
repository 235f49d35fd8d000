/**
 * A Worker for tests/reliability/workers.test.ts: its own JS realm using the same native library as the
 * main thread. It answers one message at a time; every answer carries `op` back and either the
 * result or `error` (a message), so the test sees failures instead of a silent worker.
 * @module
 */
import { exportDLPack, importDLPack, share, stats, zeros } from "../../mod.ts";
import { pinnedCount } from "../../src/native/owner.ts";
import { tp } from "./producer.ts";

interface Hammer {
  op: "hammer";
  sab: SharedArrayBuffer;
  slot: number;
  rounds: number;
}
interface ImportAddress {
  op: "import";
  address: bigint;
  slot: number;
}
interface Simple {
  op: "release-without-sweep" | "sweep";
}
interface ExportOwn {
  op: "export-own";
  /** A SharedArrayBuffer this Worker makes (no other realm holds it), or a plain ArrayBuffer. */
  shared: boolean;
  /** Float32 elements (default 4), holding 1, 2, 3, ...: a large buffer lies in a mapping of its
   * own, which its free unmaps, so reading it after the free faults instead of reading garbage. */
  length?: number;
}
type Message = Hammer | ImportAddress | Simple | ExportOwn;

const scope = globalThis as unknown as {
  onmessage: ((e: MessageEvent<Message>) => void) | null;
  postMessage(value: unknown): void;
};

function hammer(m: Hammer): Record<string, unknown> {
  const all = new Float32Array(m.sab);
  for (let r = 0; r < m.rounds; r++) {
    // The shared buffer, exported from this realm and consumed three ways.
    const address = share(all).take();
    switch (r % 3) {
      case 0:
        tp.tp_consume(address, 1);
        break;
      case 1:
        tp.tp_consume_on_thread(address, 1);
        break;
      default: {
        using view = importDLPack({ versioned: address });
        view.set(view.get(m.slot) as number + 1, m.slot);
      }
    }
    // A library allocation through a chain, released here.
    using own = zeros([4], "int32");
    using again = importDLPack(exportDLPack(own));
    again.set(r, 0);
  }
  stats();
  return { pinned: pinnedCount(), value: all[m.slot] };
}

scope.onmessage = (e: MessageEvent<Message>) => {
  const m = e.data;
  try {
    switch (m.op) {
      case "hammer":
        scope.postMessage({ op: m.op, ...hammer(m) });
        break;
      case "import": {
        // A struct the main thread exported (and pinned), released on this thread.
        const view = importDLPack({ versioned: m.address });
        const before = view.get(m.slot);
        view.set(42, m.slot);
        view.dispose();
        scope.postMessage({ op: m.op, before });
        break;
      }
      case "release-without-sweep": {
        // Pins this realm's id 1.. and releases it natively, leaving it queued: no sweep here.
        const address = exportDLPack(new Float32Array([9, 9])).take();
        tp.tp_consume(address, 1);
        scope.postMessage({ op: m.op });
        break;
      }
      case "export-own": {
        const length = m.length ?? 4;
        const memory = m.shared ? new SharedArrayBuffer(4 * length) : new ArrayBuffer(4 * length);
        const values = new Float32Array(memory);
        for (let i = 0; i < length; i++) values[i] = i + 1;
        scope.postMessage({ op: m.op, address: share(values).take() });
        break;
      }
      case "sweep":
        stats();
        scope.postMessage({ op: m.op, pinned: pinnedCount() });
        break;
    }
  } catch (error) {
    scope.postMessage({ op: m.op, error: String((error as Error)?.stack ?? error) });
  }
};
