/**
 * Writing tensors to disk: safetensors files laid out as the reference implementation writes them
 * and .npy files as `np.save` writes them, from views of any layout (non-contiguous ones are
 * written in C order through a copy), atomically: a temporary file in the same folder is renamed
 * over the target once it is complete, so readers see the old file or the new one, never a part.
 * @module
 */
import { runtime } from "../../ffi/mod.ts";
import { DLPackError, shown } from "../facts/errors.ts";
import { isArray, objectSlots, typedArrayBuffer, typedArrayLength, typedArrayTag } from "../facts/intrinsics.ts";
import { checkPath, writeFileAtomically } from "./files.ts";
import { buildHeader, type EntryToWrite } from "./safetensors.ts";
import { npyPrefix } from "./npy.ts";
import { quoted } from "./json.ts";
import {
  releaseTensor,
  type TensorArgument,
  tensorArgument,
  type TensorFacts,
  tensorFacts,
  withTensorBytes,
  type Writable,
} from "./views.ts";

const ObjectKeys = Object.keys;

/** The own enumerable string keys of a caller's record and each value read once, in order. */
function entriesOf(record: unknown, what: string): [string, unknown][] {
  if (record === null || typeof record !== "object" || isArray(record) || typedArrayTag(record) !== undefined) {
    throw new DLPackError("argument", `${what} must be a record of name -> value, got ${shown(record)}`);
  }
  const keys = ObjectKeys(record);
  const out = objectSlots<[string, unknown]>(keys.length) as [string, unknown][];
  for (let i = 0; i < keys.length; i++) {
    const key = keys[i]!;
    out[i] = [key, (record as Record<string, unknown>)[key]];
  }
  return out;
}

/** Writes the JS bytes `bytes` through `write` (they stay reachable for the call). */
function writeJsBytes(write: (address: number, bytes: number) => void, bytes: Uint8Array<ArrayBuffer>): void {
  // In Bun, taking the buffer moves a small array's storage out of the GC heap before its address is read.
  typedArrayBuffer(bytes);
  write(runtime().addressOf(bytes), typedArrayLength(bytes));
}

/**
 * Writes `tensors` (name -> view or TypedArray) to a safetensors file at `path`, with `metadata`
 * (strings) as the header's `__metadata__`. The layout is the reference writer's: data ordered by
 * dtype (widest first) then name, the header's JSON padded to a multiple of 8 bytes. Views of any
 * layout are written in C order; device memory is refused ("device"), dtypes the format lacks
 * ("dtype": complex128, complex32 and some float8 formats).
 */
export function saveSafetensors(
  path: string,
  tensors: Readonly<Record<string, Writable>>,
  metadata?: Readonly<Record<string, string>> | null,
): void {
  const checked = checkPath(path);
  const given = entriesOf(tensors, "tensors");
  const pairs = metadata === undefined || metadata === null ? [] : entriesOf(metadata, "metadata");
  for (let i = 0; i < pairs.length; i++) {
    if (typeof pairs[i]![1] !== "string") {
      throw new DLPackError(
        "argument",
        `metadata ${quoted(pairs[i]![0])} must be a string, got ${shown(pairs[i]![1])}`,
      );
    }
  }
  const args = objectSlots<TensorArgument>(given.length) as TensorArgument[];
  let taken = 0;
  try {
    const entries = objectSlots<EntryToWrite>(given.length) as EntryToWrite[];
    for (; taken < given.length; taken++) {
      const [name, value] = given[taken]!;
      if (name === "__metadata__") {
        throw new DLPackError("argument", `"__metadata__" is the format's, not a tensor name`);
      }
      args[taken] = tensorArgument(value, `tensor ${quoted(name)}`);
      const facts: TensorFacts = tensorFacts(args[taken]!);
      entries[taken] = { name, dtype: facts.dtype, shape: facts.shape, bytes: facts.bytes };
    }
    const header = buildHeader(entries, pairs as [string, string][]);
    writeFileAtomically(checked, (write) => {
      writeJsBytes(write, header.prefix);
      for (let k = 0; k < header.order.length; k++) {
        const i = header.order[k]!;
        const bytes = entries[i]!.bytes;
        if (bytes > 0) withTensorBytes(args[i]!, false, (address) => write(address, bytes));
      }
    });
  } finally {
    for (let i = 0; i < taken; i++) releaseTensor(args[i]!);
  }
}

/**
 * Writes `view` (or a TypedArray) to a .npy file at `path` as `np.save` would: version 1.0 (2.0
 * for a header beyond 64 KiB), C order, or Fortran order for a view that is F- and not
 * C-contiguous (its memory as it is). Other layouts are written in C order through a copy. dtypes
 * numpy lacks (bfloat16, the float8/6/4 formats, complex32) are refused ("dtype").
 */
export function saveNpy(path: string, view: Writable): void {
  const checked = checkPath(path);
  const arg = tensorArgument(view, "the array");
  try {
    const facts = tensorFacts(arg);
    const prefix = npyPrefix(facts.dtype, facts.shape, facts.fortranOnly);
    writeFileAtomically(checked, (write) => {
      writeJsBytes(write, prefix);
      if (facts.bytes > 0) withTensorBytes(arg, facts.fortranOnly, (address) => write(address, facts.bytes));
    });
  } finally {
    releaseTensor(arg);
  }
}
