/**
 * UTF-8 encoding of the strings the file formats store (tensor names, metadata, paths), written
 * here so that a lone surrogate is refused rather than replaced (TextEncoder would write U+FFFD:
 * another name, another path) and no built-in a caller replaced after load is involved.
 * @module
 */

import { typedArrayLength } from "../facts/intrinsics.ts";

const ReflectApply = Reflect.apply;
const charCodeAt = String.prototype.charCodeAt;

/** `text` as UTF-8, or undefined when it holds a lone surrogate (no UTF-8 form). */
export function utf8(text: string): Uint8Array<ArrayBuffer> | undefined {
  const n = text.length;
  let bytes = 0;
  for (let i = 0; i < n; i++) {
    const c = ReflectApply(charCodeAt, text, [i]) as number;
    if (c < 0x80) bytes += 1;
    else if (c < 0x800) bytes += 2;
    else if (c < 0xd800 || c > 0xdfff) bytes += 3;
    else {
      const next = i + 1 < n ? ReflectApply(charCodeAt, text, [i + 1]) as number : 0;
      if (c > 0xdbff || next < 0xdc00 || next > 0xdfff) return undefined;
      bytes += 4;
      i++;
    }
  }
  const out = new Uint8Array(bytes);
  let at = 0;
  for (let i = 0; i < n; i++) {
    let c = ReflectApply(charCodeAt, text, [i]) as number;
    if (c < 0x80) out[at++] = c;
    else if (c < 0x800) {
      out[at++] = 0xc0 | (c >> 6);
      out[at++] = 0x80 | (c & 0x3f);
    } else if (c < 0xd800 || c > 0xdfff) {
      out[at++] = 0xe0 | (c >> 12);
      out[at++] = 0x80 | ((c >> 6) & 0x3f);
      out[at++] = 0x80 | (c & 0x3f);
    } else {
      c = 0x10000 + ((c - 0xd800) << 10) + ((ReflectApply(charCodeAt, text, [++i]) as number) - 0xdc00);
      out[at++] = 0xf0 | (c >> 18);
      out[at++] = 0x80 | ((c >> 12) & 0x3f);
      out[at++] = 0x80 | ((c >> 6) & 0x3f);
      out[at++] = 0x80 | (c & 0x3f);
    }
  }
  return out;
}

/** Compares two byte strings as Rust and C compare them (bytewise, then by length): the order the
 * reference writer sorts tensor names in, which differs from JS string order beyond U+FFFF. */
export function compareBytes(a: Uint8Array, b: Uint8Array): number {
  const na = typedArrayLength(a);
  const nb = typedArrayLength(b);
  const n = na < nb ? na : nb;
  for (let i = 0; i < n; i++) {
    if (a[i] !== b[i]) return a[i]! - b[i]!;
  }
  return na - nb;
}

/** Whether `bytes` contain a NUL byte. */
export function hasNul(bytes: Uint8Array): boolean {
  const n = typedArrayLength(bytes);
  for (let i = 0; i < n; i++) if (bytes[i] === 0) return true;
  return false;
}
