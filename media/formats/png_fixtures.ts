/**
 * PNG helpers of the tests and the fuzz target: mutated PNGs with their checks written
 * again (signature, chunk CRCs, and the Adler-32 of an uncompressed zlib stream), so a
 * mutation reaches the chunk, scanline and pixel code instead of stopping at a magic number
 * or a checksum.
 */
import { pngCrc32 } from "./png.ts";

const signature = [137, 80, 78, 71, 13, 10, 26, 10];
/** Modulus of Adler-32 (RFC 1950): the largest prime below 65536. */
const adlerModulus = 65521;

/**
 * A copy of `png` with the 8-byte signature written again, the Adler-32 of an IDAT made of
 * stored (level 0) deflate blocks recomputed, and the CRC of every whole chunk recomputed;
 * the rest is left as it is.
 */
export function restampPngChecks(png: Uint8Array): Uint8Array {
  const out = png.slice();
  out.set(signature.slice(0, out.length));
  const view = new DataView(out.buffer);
  // Chunks follow the signature: length, type, data, CRC.
  for (let at = signature.length; at + 12 <= out.length;) {
    const length = view.getUint32(at);
    if (at + 12 + length > out.length) break;
    if (String.fromCharCode(...out.subarray(at + 4, at + 8)) === "IDAT") {
      restampStoredAdler(out.subarray(at + 8, at + 8 + length));
    }
    view.setUint32(at + 8 + length, pngCrc32(out.subarray(at + 4, at + 8 + length)));
    at += 12 + length;
  }
  return out;
}

/**
 * Rewrites the Adler-32 that ends `zlib` when the stream is all stored blocks (a header
 * byte, LEN, NLEN, then LEN raw bytes each); any other stream is left alone.
 */
function restampStoredAdler(zlib: Uint8Array): void {
  let a = 1;
  let b = 0;
  let at = 2;
  for (let last = false; !last;) {
    if (at + 5 > zlib.length || (zlib[at] & 0b110) !== 0) return;
    last = (zlib[at] & 1) === 1;
    const length = zlib[at + 1] | (zlib[at + 2] << 8);
    at += 5;
    if (at + length > zlib.length) return;
    for (let i = at; i < at + length; i++) {
      a = (a + zlib[i]) % adlerModulus;
      b = (b + a) % adlerModulus;
    }
    at += length;
  }
  if (at + 4 > zlib.length) return;
  new DataView(zlib.buffer, zlib.byteOffset + at, 4).setUint32(0, ((b << 16) | a) >>> 0);
}
