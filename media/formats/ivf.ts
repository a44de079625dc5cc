/**
 * IVF, the plain VP8 container of libvpx: a 32-byte file header, then each frame behind a
 * 12-byte header (size, 64-bit timestamp). The codec engine reads VP8 from it, since
 * MPEG-TS has no VP8 mapping.
 */

/** Bytes of the file header. */
const fileHeaderBytes = 32;
/** Bytes of each frame header. */
const frameHeaderBytes = 12;

/** An IVF file of VP8 `frames` (whole frames, in decode order) of the given picture size. */
export function ivfOf(frames: readonly Uint8Array[], width: number, height: number): Uint8Array {
  const size = fileHeaderBytes + frames.reduce((n, f) => n + frameHeaderBytes + f.length, 0);
  const out = new Uint8Array(size);
  const view = new DataView(out.buffer);
  out.set([0x44, 0x4b, 0x49, 0x46]); // "DKIF"
  view.setUint16(4, 0, true); // version
  view.setUint16(6, fileHeaderBytes, true);
  out.set([0x56, 0x50, 0x38, 0x30], 8); // "VP80"
  view.setUint16(12, width, true);
  view.setUint16(14, height, true);
  view.setUint32(16, 30, true); // time base 1/30 s: timestamps count frames here
  view.setUint32(20, 1, true);
  view.setUint32(24, frames.length, true);
  let at = fileHeaderBytes;
  frames.forEach((frame, i) => {
    view.setUint32(at, frame.length, true);
    view.setBigUint64(at + 4, BigInt(i), true);
    out.set(frame, at + frameHeaderBytes);
    at += frameHeaderBytes + frame.length;
  });
  return out;
}
