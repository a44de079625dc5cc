/**
 * NAL unit framing shared by H.264 and H.265: Annex-B start codes, length prefixes and
 * emulation-prevention bytes (ISO 14496-10 §7.4.1, Annex B; ISO 14496-15 §5.3).
 */

import { ParseError } from "../../core/errors.ts";

/** NAL units of an Annex-B byte stream, as views without start codes or trailing zeros. */
export function splitAnnexB(data: Uint8Array): Uint8Array[] {
  const nals: Uint8Array[] = [];
  let start = -1;
  let i = 0;
  const n = data.length;
  while (i + 2 < n) {
    if (data[i + 2] > 1) {
      i += 3;
    } else if (data[i] === 0 && data[i + 1] === 0 && data[i + 2] === 1) {
      if (start >= 0) pushTrimmed(nals, data, start, i);
      i += 3;
      start = i;
    } else {
      i++;
    }
  }
  if (start >= 0) pushTrimmed(nals, data, start, n);
  return nals;
}

function pushTrimmed(nals: Uint8Array[], data: Uint8Array, start: number, end: number): void {
  // Zero bytes before a start code belong to it (4-byte start codes, trailing_zero_8bits).
  while (end > start && data[end - 1] === 0) end--;
  if (end > start) nals.push(data.subarray(start, end));
}

/** NAL units of a length-prefixed access unit (`lengthSize` bytes per prefix), as views. */
export function splitLengthPrefixed(data: Uint8Array, lengthSize = 4): Uint8Array[] {
  const nals: Uint8Array[] = [];
  let pos = 0;
  while (pos < data.length) {
    if (pos + lengthSize > data.length) throw new ParseError("NAL length prefix cut");
    let len = 0;
    for (let i = 0; i < lengthSize; i++) len = len * 256 + data[pos + i];
    pos += lengthSize;
    if (pos + len > data.length) throw new ParseError("NAL unit longer than its access unit");
    nals.push(data.subarray(pos, pos + len));
    pos += len;
  }
  return nals;
}

/** One access unit with each NAL unit prefixed by its 4-byte big-endian length. */
export function joinLengthPrefixed(nals: readonly Uint8Array[]): Uint8Array {
  let total = 0;
  for (const nal of nals) total += 4 + nal.length;
  const out = new Uint8Array(total);
  const view = new DataView(out.buffer);
  let pos = 0;
  for (const nal of nals) {
    view.setUint32(pos, nal.length);
    out.set(nal, pos + 4);
    pos += 4 + nal.length;
  }
  return out;
}

/** Annex-B bytes converted to the 4-byte length-prefixed layout of MediaFrame. */
export function annexBToLengthPrefixed(data: Uint8Array): Uint8Array {
  return joinLengthPrefixed(splitAnnexB(data));
}

/** A length-prefixed access unit converted to Annex-B with 4-byte start codes. */
export function lengthPrefixedToAnnexB(data: Uint8Array, lengthSize = 4): Uint8Array {
  const nals = splitLengthPrefixed(data, lengthSize);
  let total = 0;
  for (const nal of nals) total += 4 + nal.length;
  const out = new Uint8Array(total);
  let pos = 0;
  for (const nal of nals) {
    out[pos + 3] = 1;
    out.set(nal, pos + 4);
    pos += 4 + nal.length;
  }
  return out;
}

/** The RBSP of a NAL unit: the 0x03 byte of every 0x000003 sequence removed. */
export function removeEmulationPrevention(nal: Uint8Array): Uint8Array {
  let first = -1;
  for (let i = 2; i < nal.length; i++) {
    if (nal[i] === 3 && nal[i - 1] === 0 && nal[i - 2] === 0) {
      first = i;
      break;
    }
  }
  if (first < 0) return nal;
  const out = new Uint8Array(nal.length);
  out.set(nal.subarray(0, first));
  let o = first;
  let zeros = 0;
  for (let i = first + 1; i < nal.length; i++) {
    const b = nal[i];
    if (b === 3 && zeros >= 2) {
      zeros = 0;
      continue;
    }
    zeros = b === 0 ? zeros + 1 : 0;
    out[o++] = b;
  }
  return out.subarray(0, o);
}
