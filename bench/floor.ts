// The floor a zero-copy array() is measured against: the runtime's own bare call that wraps native
// memory in an ArrayBuffer (Deno getArrayBuffer with a ready pointer, Bun toArrayBuffer). Benchmark
// code only: the library itself reaches the runtime through ffi/.

/** A function that makes one bare zero-copy ArrayBuffer over `byteLength` bytes at `address`. */
export function bareArrayBuffer(address: number, byteLength: number): () => ArrayBuffer {
  const g = globalThis as { Deno?: typeof Deno };
  if (g.Deno !== undefined) {
    const pointer = Deno.UnsafePointer.create(BigInt(address))!;
    return () => Deno.UnsafePointerView.getArrayBuffer(pointer, byteLength);
  }
  const ffi =
    (import.meta as unknown as { require(id: string): { toArrayBuffer(a: number, o: number, l: number): ArrayBuffer } })
      .require("bun:ffi");
  return () => ffi.toArrayBuffer(address, 0, byteLength);
}
