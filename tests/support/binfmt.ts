/**
 * Minimal readers for the three shared-library formats the release build produces: ELF (Linux),
 * Mach-O (macOS) and PE (Windows). They read exactly what the release tests check (format, CPU,
 * kind of file, exported function names, and the platform floor: glibc symbol versions for ELF,
 * the minimum OS for Mach-O) and refuse anything else with a clear message. Every read is bounds
 * checked, so a truncated or corrupt file throws `BinaryFormatError` instead of reading garbage.
 * @module
 */

/** What the readers found in a shared library. */
export interface LibraryFacts {
  readonly format: "ELF" | "Mach-O" | "PE";
  /** "x86_64", "aarch64", or the raw machine number for anything else. */
  readonly machine: string;
  /** A shared library (ELF ET_DYN, Mach-O MH_DYLIB, PE with the DLL flag), not an executable. */
  readonly sharedLibrary: boolean;
  /** Exported symbol names as C spells them (Mach-O's leading underscore removed), sorted. */
  readonly exports: readonly string[];
  /** ELF only: the glibc symbol versions the library needs ("GLIBC_2.17", ...), sorted. */
  readonly glibcVersions?: readonly string[];
  /** Mach-O only: the minimum macOS version from LC_BUILD_VERSION ("11.0.0"). */
  readonly minOS?: string | undefined;
}

/** A file the readers cannot make sense of. */
export class BinaryFormatError extends Error {
  /** Makes one. */
  constructor(message: string) {
    super(message);
    this.name = "BinaryFormatError";
  }
}

/** Little-endian reads that throw BinaryFormatError past the end. */
class Reader {
  readonly view: DataView;
  constructor(readonly bytes: Uint8Array, readonly what: string) {
    this.view = new DataView(bytes.buffer, bytes.byteOffset, bytes.byteLength);
  }
  private check(offset: number, size: number): void {
    if (!Number.isSafeInteger(offset) || offset < 0 || offset + size > this.bytes.length) {
      throw new BinaryFormatError(`${this.what}: truncated or corrupt (read of ${size} bytes at ${offset})`);
    }
  }
  u8(o: number): number {
    this.check(o, 1);
    return this.view.getUint8(o);
  }
  u16(o: number): number {
    this.check(o, 2);
    return this.view.getUint16(o, true);
  }
  u32(o: number): number {
    this.check(o, 4);
    return this.view.getUint32(o, true);
  }
  u64(o: number): number {
    this.check(o, 8);
    const value = this.view.getBigUint64(o, true);
    if (value > BigInt(Number.MAX_SAFE_INTEGER)) throw new BinaryFormatError(`${this.what}: offset ${value} too large`);
    return Number(value);
  }
  cString(o: number): string {
    this.check(o, 1);
    const end = this.bytes.indexOf(0, o);
    if (end < 0) throw new BinaryFormatError(`${this.what}: unterminated string at ${o}`);
    return new TextDecoder().decode(this.bytes.subarray(o, end));
  }
  uleb(o: number): [value: number, next: number] {
    let value = 0;
    let scale = 1;
    for (let i = o;; i++) {
      const byte = this.u8(i);
      value += (byte & 0x7f) * scale;
      scale *= 128;
      if ((byte & 0x80) === 0) return [value, i + 1];
      if (scale > 2 ** 56) throw new BinaryFormatError(`${this.what}: ULEB128 at ${o} too long`);
    }
  }
}

/** Reads a shared library of any of the three formats. */
export function readLibrary(bytes: Uint8Array, what = "file"): LibraryFacts {
  const r = new Reader(bytes, what);
  if (bytes.length >= 4 && r.u32(0) === 0x464c457f) return readElf(r);
  if (bytes.length >= 4 && r.u32(0) === 0xfeedfacf) return readMachO(r);
  if (bytes.length >= 2 && r.u16(0) === 0x5a4d) return readPe(r);
  throw new BinaryFormatError(`${what}: not an ELF, 64-bit Mach-O or PE file`);
}

const ELF_MACHINES: Record<number, string> = { 62: "x86_64", 183: "aarch64" };

function readElf(r: Reader): LibraryFacts {
  if (r.u8(4) !== 2 || r.u8(5) !== 1) throw new BinaryFormatError(`${r.what}: only 64-bit little-endian ELF is read`);
  const type = r.u16(16);
  const machine = r.u16(18);
  const shoff = r.u64(40);
  const shentsize = r.u16(58);
  const shnum = r.u16(60);
  if (shoff === 0 || shnum === 0) throw new BinaryFormatError(`${r.what}: ELF without section headers`);
  const sections = Array.from({ length: shnum }, (_, i) => {
    const at = shoff + i * shentsize;
    return {
      type: r.u32(at + 4),
      offset: r.u64(at + 24),
      size: r.u64(at + 32),
      link: r.u32(at + 40),
      info: r.u32(at + 44),
    };
  });
  const exports: string[] = [];
  const glibc = new Set<string>();
  for (const section of sections) {
    if (section.type === 11) { // SHT_DYNSYM: what the dynamic loader resolves
      const strtab = sections[section.link];
      if (strtab === undefined) throw new BinaryFormatError(`${r.what}: .dynsym links to no string table`);
      for (let at = section.offset; at + 24 <= section.offset + section.size; at += 24) {
        const info = r.u8(at + 4);
        const visibility = r.u8(at + 5) & 3;
        const defined = r.u16(at + 6) !== 0;
        const global = (info >> 4) === 1 || (info >> 4) === 2;
        if ((info & 0xf) === 2 && global && defined && (visibility === 0 || visibility === 3)) {
          exports.push(r.cString(strtab.offset + r.u32(at)));
        }
      }
    } else if (section.type === 0x6ffffffe) { // SHT_GNU_verneed: versions needed from other libraries
      const strtab = sections[section.link];
      if (strtab === undefined) throw new BinaryFormatError(`${r.what}: .gnu.version_r links to no string table`);
      let need = section.offset;
      for (let n = 0; n < section.info; n++) {
        let aux = need + r.u32(need + 8);
        for (let a = 0; a < r.u16(need + 2); a++) {
          const name = r.cString(strtab.offset + r.u32(aux + 8));
          if (name.startsWith("GLIBC_")) glibc.add(name);
          aux += r.u32(aux + 12);
        }
        need += r.u32(need + 12);
      }
    }
  }
  return {
    format: "ELF",
    machine: ELF_MACHINES[machine] ?? `ELF machine ${machine}`,
    sharedLibrary: type === 3,
    exports: exports.sort(),
    glibcVersions: [...glibc].sort(compareVersions),
  };
}

const MACHO_CPUS: Record<number, string> = { 0x01000007: "x86_64", 0x0100000c: "aarch64" };

function readMachO(r: Reader): LibraryFacts {
  const cpu = r.u32(4);
  const filetype = r.u32(12);
  const ncmds = r.u32(16);
  let trie: { offset: number; size: number } | undefined;
  let minOS: string | undefined;
  let at = 32;
  for (let i = 0; i < ncmds; i++) {
    const cmd = r.u32(at);
    const size = r.u32(at + 4);
    if (size < 8) throw new BinaryFormatError(`${r.what}: load command ${i} has size ${size}`);
    if (cmd === 0x80000022 || cmd === 0x22) trie = { offset: r.u32(at + 40), size: r.u32(at + 44) }; // LC_DYLD_INFO(_ONLY)
    else if (cmd === 0x80000033) trie = { offset: r.u32(at + 8), size: r.u32(at + 12) }; // LC_DYLD_EXPORTS_TRIE
    else if (cmd === 0x32) { // LC_BUILD_VERSION: minos is xxxx.yy.zz in nibbles
      const v = r.u32(at + 12);
      minOS = `${v >>> 16}.${(v >>> 8) & 0xff}.${v & 0xff}`;
    }
    at += size;
  }
  if (trie === undefined) throw new BinaryFormatError(`${r.what}: Mach-O without an export trie`);
  const exports: string[] = [];
  // The export trie is what dyld (and so dlsym) consults: a prefix tree whose terminal nodes are
  // exported names. Depth and visits are bounded so a corrupt trie cannot loop.
  const visited = new Set<number>();
  const walk = (node: number, prefix: string, depth: number) => {
    if (depth > 256 || visited.has(node) || node >= trie!.size) {
      throw new BinaryFormatError(`${r.what}: corrupt export trie`);
    }
    visited.add(node);
    const base = trie!.offset;
    const [terminalSize, afterSize] = r.uleb(base + node);
    if (terminalSize > 0) exports.push(prefix);
    let p = afterSize + terminalSize;
    const children = r.u8(p++);
    for (let c = 0; c < children; c++) {
      const edge = r.cString(p);
      p += new TextEncoder().encode(edge).length + 1;
      const [child, next] = r.uleb(p);
      p = next;
      walk(child, prefix + edge, depth + 1);
    }
  };
  if (trie.size > 0) walk(0, "", 0);
  return {
    format: "Mach-O",
    machine: MACHO_CPUS[cpu] ?? `Mach-O cputype 0x${cpu.toString(16)}`,
    sharedLibrary: filetype === 6,
    exports: exports.map((name) => name.startsWith("_") ? name.slice(1) : name).sort(),
    minOS,
  };
}

const PE_MACHINES: Record<number, string> = { 0x8664: "x86_64", 0xaa64: "aarch64" };

function readPe(r: Reader): LibraryFacts {
  const pe = r.u32(0x3c);
  if (r.u32(pe) !== 0x00004550) throw new BinaryFormatError(`${r.what}: MZ file without a PE header`);
  const coff = pe + 4;
  const machine = r.u16(coff);
  const sectionCount = r.u16(coff + 2);
  const optionalSize = r.u16(coff + 16);
  const characteristics = r.u16(coff + 18);
  const optional = coff + 20;
  if (r.u16(optional) !== 0x20b) throw new BinaryFormatError(`${r.what}: only PE32+ (64-bit) is read`);
  if (r.u32(optional + 108) < 1) throw new BinaryFormatError(`${r.what}: PE without data directories`);
  const exportRva = r.u32(optional + 112);
  const sections = Array.from({ length: sectionCount }, (_, i) => {
    const at = optional + optionalSize + i * 40;
    return { size: Math.max(r.u32(at + 8), r.u32(at + 16)), rva: r.u32(at + 12), raw: r.u32(at + 20) };
  });
  const offsetOf = (rva: number) => {
    const s = sections.find((s) => rva >= s.rva && rva < s.rva + s.size);
    if (s === undefined) throw new BinaryFormatError(`${r.what}: RVA 0x${rva.toString(16)} is in no section`);
    return rva - s.rva + s.raw;
  };
  const exports: string[] = [];
  if (exportRva !== 0) {
    const dir = offsetOf(exportRva);
    const count = r.u32(dir + 24);
    const names = offsetOf(r.u32(dir + 32));
    for (let i = 0; i < count; i++) exports.push(r.cString(offsetOf(r.u32(names + 4 * i))));
  }
  return {
    format: "PE",
    machine: PE_MACHINES[machine] ?? `PE machine 0x${machine.toString(16)}`,
    sharedLibrary: (characteristics & 0x2000) !== 0,
    exports: exports.sort(),
  };
}

/** Orders "GLIBC_2.9" before "GLIBC_2.17". */
export function compareVersions(a: string, b: string): number {
  const pa = a.replace(/^\D+/, "").split(".").map(Number);
  const pb = b.replace(/^\D+/, "").split(".").map(Number);
  for (let i = 0; i < Math.max(pa.length, pb.length); i++) {
    const d = (pa[i] ?? 0) - (pb[i] ?? 0);
    if (d !== 0) return d;
  }
  return 0;
}
