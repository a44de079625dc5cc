/**
 * Reads what metrics need from the first RTP packet of a video frame without depacketizing:
 * the frame type (key, P, B) and, on keyframes, the picture size. H.264 per RFC 6184, VP8 per
 * RFC 7741. Nothing is allocated unless an SPS is parsed.
 */
import { parseH264Sps } from "../../codecs/h264.ts";
import { vp8IsKeyframe, vp8KeyframeInfo } from "../../codecs/vp8.ts";

/** Frame type as counted by the metrics. */
export type FrameType = "key" | "p" | "b" | "unknown";

/** Picture size in pixels. */
export interface PictureSize {
  width: number;
  height: number;
}

const stapA = 24;
const fuA = 28;

/** Offset of the VP8 payload after the payload descriptor, or -1 if truncated. */
export function vp8PayloadOffset(p: Uint8Array): number {
  if (p.length < 1) return -1;
  let offset = 1;
  if (p[0] & 0x80) {
    if (p.length < 2) return -1;
    const x = p[1];
    offset = 2;
    if (x & 0x80) offset += p.length > 2 && (p[2] & 0x80) ? 2 : 1;
    if (x & 0x40) offset++;
    if (x & 0x30) offset++;
  }
  return offset < p.length ? offset : -1;
}

/** True when the packet starts a VP8 frame (S bit set, partition 0). */
export function vp8StartsFrame(p: Uint8Array): boolean {
  return p.length > 0 && (p[0] & 0x10) !== 0 && (p[0] & 0x07) === 0;
}

/** Type of the VP8 frame starting in this packet. */
export function vp8FrameType(p: Uint8Array): FrameType {
  const offset = vp8PayloadOffset(p);
  if (offset < 0 || !vp8StartsFrame(p)) return "unknown";
  return vp8IsKeyframe(p, offset) ? "key" : "p";
}

/** Picture size of a VP8 keyframe starting in this packet. */
export function vp8PictureSize(p: Uint8Array): PictureSize | undefined {
  const offset = vp8PayloadOffset(p);
  const info = offset < 0 ? undefined : vp8KeyframeInfo(p, offset);
  return info && { width: info.width, height: info.height };
}

/** H.264 NAL type of the first NAL unit this packet carries (or continues). */
function h264FirstNal(p: Uint8Array): { type: number; offset: number } | undefined {
  if (p.length < 2) return undefined;
  const type = p[0] & 0x1f;
  if (type === stapA) return p.length > 3 ? { type: p[3] & 0x1f, offset: 3 } : undefined;
  if (type === fuA) {
    // Only a start fragment carries the slice header.
    return (p[1] & 0x80) ? { type: p[1] & 0x1f, offset: 1 } : undefined;
  }
  return { type, offset: 0 };
}

/** Reads an exp-Golomb ue(v) at `bit` of `p`; returns [value, next bit] or undefined. */
function readUe(p: Uint8Array, bit: number): [number, number] | undefined {
  let zeros = 0;
  const end = p.length * 8;
  while (bit < end && ((p[bit >> 3] >> (7 - (bit & 7))) & 1) === 0) {
    zeros++;
    bit++;
  }
  if (bit + zeros >= end || zeros > 31) return undefined;
  bit++;
  let value = 0;
  for (let i = 0; i < zeros; i++, bit++) value = value * 2 + ((p[bit >> 3] >> (7 - (bit & 7))) & 1);
  return [2 ** zeros - 1 + value, bit];
}

/** Type of the H.264 frame whose first packet this is (an IDR, SPS or STAP-A with them is key). */
export function h264FrameType(p: Uint8Array): FrameType {
  if (p.length > 0 && (p[0] & 0x1f) === stapA) {
    for (let o = 1; o + 2 < p.length;) {
      const size = (p[o] << 8) | p[o + 1];
      const t = p[o + 2] & 0x1f;
      if (t === 5 || t === 7) return "key";
      o += 2 + size;
    }
  }
  const nal = h264FirstNal(p);
  if (!nal) return "unknown";
  if (nal.type === 5 || nal.type === 7) return "key";
  if (nal.type !== 1) return "unknown";
  // Slice header after the NAL header byte (and the FU header): first_mb_in_slice, slice_type.
  const first = readUe(p, (nal.offset + 1) * 8);
  const sliceType = first && readUe(p, first[1]);
  if (!sliceType) return "unknown";
  const t = sliceType[0] % 5;
  return t === 1 ? "b" : "p";
}

/** Picture size from an SPS carried in this packet (single NAL or STAP-A), if any. */
export function h264PictureSize(p: Uint8Array): PictureSize | undefined {
  if (p.length < 2) return undefined;
  const type = p[0] & 0x1f;
  try {
    if (type === 7) return sizeOf(parseH264Sps(p));
    if (type !== stapA) return undefined;
    for (let o = 1; o + 2 < p.length;) {
      const size = (p[o] << 8) | p[o + 1];
      if ((p[o + 2] & 0x1f) === 7) return sizeOf(parseH264Sps(p.subarray(o + 2, o + 2 + size)));
      o += 2 + size;
    }
  } catch {
    // A damaged SPS leaves the size unknown until the next one.
  }
  return undefined;
}

function sizeOf({ width, height }: PictureSize): PictureSize {
  return { width, height };
}

/** The SPS or PPS NAL units (with header byte) this packet carries, single or in a STAP-A. */
export function h264ParameterSets(p: Uint8Array): Uint8Array[] {
  if (p.length < 2) return [];
  const type = p[0] & 0x1f;
  if (type === 7 || type === 8) return [p];
  if (type !== stapA) return [];
  const sets: Uint8Array[] = [];
  for (let o = 1; o + 2 < p.length;) {
    const size = (p[o] << 8) | p[o + 1];
    const t = p[o + 2] & 0x1f;
    if ((t === 7 || t === 8) && o + 2 + size <= p.length) {
      sets.push(p.subarray(o + 2, o + 2 + size));
    }
    o += 2 + size;
  }
  return sets;
}
