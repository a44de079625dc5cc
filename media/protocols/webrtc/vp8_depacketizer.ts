/**
 * VP8 over RTP (RFC 7741) to frames, on the media/rtp Depacketizer interface (which has no
 * VP8 yet): a frame starts at a packet with S=1 and partition 0 and ends at the marker bit.
 */
import { ParseError, TruncatedError } from "../../../core/errors.ts";
import { vp8IsKeyframe } from "../../codecs/vp8.ts";
import type { MediaFrame } from "../../frame.ts";
import { type Depacketizer, maxAccessUnitBytes } from "../../rtp/depacketizer.ts";
import type { RtpPacket } from "../../rtp/packet.ts";
import { vp8PayloadOffset, vp8StartsFrame } from "./video_payload.ts";

/** Builds VP8 frames from RTP packets. */
export class Vp8Depacketizer implements Depacketizer {
  readonly #trackId: number;
  #parts: Uint8Array[] = [];
  #bytes = 0;
  #keyframe = false;
  #timestamp = -1;

  /** `trackId`: the track the frames belong to. */
  constructor(trackId: number) {
    this.#trackId = trackId;
  }

  push(packet: RtpPacket, emit: (frame: MediaFrame) => void): void {
    const p = packet.payload;
    const offset = vp8PayloadOffset(p);
    if (offset < 0) throw new TruncatedError("VP8 payload descriptor cut");
    if (vp8StartsFrame(p)) {
      this.reset();
      this.#timestamp = packet.timestamp;
      this.#keyframe = vp8IsKeyframe(p, offset);
    } else if (this.#parts.length === 0 || packet.timestamp !== this.#timestamp) {
      // The frame's first packet was lost: nothing to append to until the next start.
      this.reset();
      return;
    }
    this.#parts.push(p.subarray(offset));
    this.#bytes += p.length - offset;
    if (this.#bytes > maxAccessUnitBytes) {
      this.reset();
      throw new ParseError(`VP8 frame over ${maxAccessUnitBytes} bytes`);
    }
    if (!packet.marker) return;
    const data = new Uint8Array(this.#bytes);
    let at = 0;
    for (const part of this.#parts) {
      data.set(part, at);
      at += part.length;
    }
    emit({
      trackId: this.#trackId,
      codec: "VP8",
      pts: this.#timestamp,
      dts: this.#timestamp,
      keyframe: this.#keyframe,
      data,
    });
    this.reset();
  }

  reset(): void {
    this.#parts = [];
    this.#bytes = 0;
  }
}
