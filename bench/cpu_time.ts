// The calling thread's CPU time (clock_gettime(CLOCK_THREAD_CPUTIME_ID)): on a shared, noisy machine
// it leaves out the time this thread waited for a core. Benchmark code only.

const CLOCK_THREAD_CPUTIME_ID = 3;
const timespec = new BigInt64Array(2);

function bind(): () => number {
  const g = globalThis as { Deno?: typeof Deno };
  if (g.Deno !== undefined) {
    const lib = Deno.dlopen("libc.so.6", { clock_gettime: { parameters: ["i32", "buffer"], result: "i32" } });
    const call = lib.symbols.clock_gettime;
    return () => {
      call(CLOCK_THREAD_CPUTIME_ID, timespec);
      return Number(timespec[0]) * 1e9 + Number(timespec[1]);
    };
  }
  const ffi = (import.meta as unknown as {
    require(id: string): {
      dlopen(path: string, defs: unknown): { symbols: { clock_gettime(id: number, ts: BigInt64Array): number } };
    };
  }).require("bun:ffi");
  const call = ffi.dlopen("libc.so.6", { clock_gettime: { args: ["i32", "ptr"], returns: "i32" } }).symbols
    .clock_gettime;
  return () => {
    call(CLOCK_THREAD_CPUTIME_ID, timespec);
    return Number(timespec[0]) * 1e9 + Number(timespec[1]);
  };
}

/** Nanoseconds of CPU time this thread has used. */
export const threadNs: () => number = bind();
