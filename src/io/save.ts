/**
 * Writing tensors to disk: safetensors files laid out as the reference implementation writes them
 * and .npy files as `np.save` writes them, from views of any layout (non-contiguous ones are
 * written in C order through a copy), atomically: a temporary file in the same folder is renamed
 * over the target once it is complete, so readers see the old file or the new one, never a part.
 * @module
 */
import { runtime } from "../../ffi/mod.ts";
import { DLPackError, optionalBoolean, optionsObject, shown } from "../facts/errors.ts";
import {
  detach,
  isArray,
  objectSlots,
  setElements,
  typedArrayBuffer,
  typedArrayLength,
  typedArrayTag,
} from "../facts/intrinsics.ts";
import { checkPath, writeFileAtomically } from "./files.ts";
import { buildHeader, type EntryToWrite } from "./safetensors.ts";
import { npyPrefix } from "./npy.ts";
import { quoted } from "./json.ts";
import { utf8 } from "./utf8.ts";
import { centralDirectory, DEFLATED, localHeader, type MemberToWrite, STORED, type Written } from "./zip.ts";
import { crc32 as zlibCrc32, deflateRawSync } from "node:zlib";

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

/** `parts` concatenated into one fresh array. */
function joined(...parts: Uint8Array[]): Uint8Array<ArrayBuffer> {
  let n = 0;
  for (let i = 0; i < parts.length; i++) n += typedArrayLength(parts[i]!);
  const out = new Uint8Array(new ArrayBuffer(n));
  let at = 0;
  for (let i = 0; i < parts.length; i++) {
    setElements(out, parts[i]!, at);
    at += typedArrayLength(parts[i]!);
  }
  return out;
}

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

/** Options of {@link saveNpz}. */
export interface NpzOptions {
  /** Deflate every member, as `np.savez_compressed` does (loading then copies). Default false:
   * stored members, as `np.savez` writes them, aligned so that {@link loadNpz} maps them. */
  readonly compressed?: boolean | undefined;
}

/** A member of an archive being written: its .npy prefix, and its bytes once deflated. */
interface NpzMember {
  readonly arg: TensorArgument;
  readonly facts: TensorFacts;
  readonly prefix: Uint8Array<ArrayBuffer>;
  readonly zip: MemberToWrite;
  readonly deflated: Uint8Array<ArrayBuffer> | undefined;
}

/** `bytes` bytes of library or mapped memory at `address` as a Uint8Array (detach it after use). */
function memoryBytes(address: number, bytes: number): Uint8Array<ArrayBuffer> {
  return new Uint8Array(runtime().arrayBuffer(address, bytes));
}

/** A member's .npy bytes read once: their CRC-32, and deflated when `compressed`. */
function npzMember(name: string, arg: TensorArgument, compressed: boolean): NpzMember {
  const nameBytes = utf8(`${name}.npy`);
  if (nameBytes === undefined || nameBytes.length > 0xffff) {
    throw new DLPackError("argument", `array name ${quoted(name)} has no UTF-8 form a zip file can hold`);
  }
  const facts = tensorFacts(arg);
  const prefix = npyPrefix(facts.dtype, facts.shape, facts.fortranOnly);
  let crc = zlibCrc32(prefix);
  let deflated: Uint8Array<ArrayBuffer> | undefined;
  const whole = typedArrayLength(prefix) + facts.bytes;
  withTensorBytes(arg, facts.fortranOnly, (address) => {
    const data = facts.bytes > 0 ? memoryBytes(address, facts.bytes) : new Uint8Array(0);
    try {
      crc = zlibCrc32(data, crc);
      // A fresh array of the deflated bytes: zlib's result may be a window on a shared pool.
      if (compressed) deflated = joined(deflateRawSync(joined(prefix, data)));
    } finally {
      if (facts.bytes > 0) detach(data.buffer);
    }
  });
  const zip: MemberToWrite = {
    name: nameBytes,
    method: compressed ? DEFLATED : STORED,
    crc32: crc,
    compressedSize: deflated === undefined ? whole : typedArrayLength(deflated),
    size: whole,
  };
  return { arg, facts, prefix, zip, deflated };
}

/**
 * Writes `arrays` (name -> view or TypedArray) to a .npz archive at `path` that `np.load` reads,
 * each as the .npy member `np.savez` writes (`name.npy`), atomically. Stored members (the
 * default) are aligned so that {@link loadNpz} maps them zero-copy; `{ compressed: true }`
 * deflates them as `np.savez_compressed`. Layouts, device memory and dtypes as {@link saveNpy}'s.
 */
export function saveNpz(path: string, arrays: Readonly<Record<string, Writable>>, opts?: NpzOptions): void {
  const checked = checkPath(path);
  const compressed = optionalBoolean(optionsObject(opts, "saveNpz options").compressed, "compressed") ?? false;
  const given = entriesOf(arrays, "arrays");
  const members = objectSlots<NpzMember>(given.length) as NpzMember[];
  const args = objectSlots<TensorArgument>(given.length) as TensorArgument[];
  let taken = 0;
  try {
    for (; taken < given.length; taken++) {
      const [name, value] = given[taken]!;
      args[taken] = tensorArgument(value, `array ${quoted(name)}`);
      members[taken] = npzMember(name, args[taken]!, compressed);
    }
    writeFileAtomically(checked, (write) => {
      const written = objectSlots<Written>(members.length) as Written[];
      let offset = 0;
      for (let i = 0; i < members.length; i++) {
        const m = members[i]!;
        const header = localHeader(m.zip, offset, compressed ? 1 : 64);
        written[i] = { member: m.zip, offset };
        writeJsBytes(write, header);
        if (m.deflated !== undefined) writeJsBytes(write, m.deflated);
        else {
          writeJsBytes(write, m.prefix);
          if (m.facts.bytes > 0) {
            withTensorBytes(m.arg, m.facts.fortranOnly, (address) => write(address, m.facts.bytes));
          }
        }
        offset += typedArrayLength(header) + m.zip.compressedSize;
      }
      writeJsBytes(write, centralDirectory(written, offset));
    });
  } finally {
    for (let i = 0; i < taken; i++) releaseTensor(args[i]!);
  }
}
