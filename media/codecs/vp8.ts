/**
 * VP8 frame header (RFC 6386 §9.1): the 3-byte frame tag of every frame and, on keyframes,
 * the start code and picture size that follow it. Functions read a frame starting at
 * `offset`, so RTP payloads are read in place.
 */
import { ParseError } from "../../core/errors.ts";

/** What a VP8 keyframe header says. */
export interface Vp8KeyframeInfo {
  width: number;
  height: number;
  /** The frame tag's version (0-3), which MP4's vpcC records as the profile. */
  version: number;
}

/** Bytes of frame tag, start code and the two size fields. */
const keyframeHeaderBytes = 10;

/** True when the frame at `offset` is a keyframe (the frame tag's P bit is 0). */
export function vp8IsKeyframe(frame: Uint8Array, offset = 0): boolean {
  return frame.length > offset && (frame[offset] & 0x01) === 0;
}

/** The keyframe header at `offset`, or undefined when the bytes there are not one. */
export function vp8KeyframeInfo(frame: Uint8Array, offset = 0): Vp8KeyframeInfo | undefined {
  const o = offset;
  if (
    frame.length < o + keyframeHeaderBytes || !vp8IsKeyframe(frame, o) ||
    frame[o + 3] !== 0x9d || frame[o + 4] !== 0x01 || frame[o + 5] !== 0x2a
  ) {
    return undefined;
  }
  return {
    // The top two bits of each size are the upscaling mode, not part of the size.
    width: (frame[o + 6] | (frame[o + 7] << 8)) & 0x3fff,
    height: (frame[o + 8] | (frame[o + 9] << 8)) & 0x3fff,
    version: (frame[o] >> 1) & 0x07,
  };
}

/** The keyframe header of a whole frame; a ParseError when it is not a keyframe. */
export function parseVp8Keyframe(frame: Uint8Array): Vp8KeyframeInfo {
  const info = vp8KeyframeInfo(frame);
  if (!info) throw new ParseError("not a VP8 keyframe (no frame tag with start code)");
  return info;
}
