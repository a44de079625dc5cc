/**
 * Payload formats that carry one whole frame per packet: G.711 (RFC 3551 PCMU/PCMA), G.722
 * and Opus (RFC 7587).
 */
import { TruncatedError } from "../../core/errors.ts";
import type { AudioCodec, MediaFrame } from "../frame.ts";
import type { Depacketizer } from "./depacketizer.ts";
import type { RtpPacket } from "./packet.ts";

/** One frame per packet, payload as is. */
export class FrameDepacketizer implements Depacketizer {
  #trackId: number;
  #codec: AudioCodec;

  /** `trackId`: the track the frames belong to; `codec`: PCMU, PCMA, G722 or OPUS. */
  constructor(trackId: number, codec: "PCMU" | "PCMA" | "G722" | "OPUS") {
    this.#trackId = trackId;
    this.#codec = codec;
  }

  push(packet: RtpPacket, emit: (frame: MediaFrame) => void): void {
    if (packet.payload.length === 0) throw new TruncatedError(`empty ${this.#codec} payload`);
    emit({
      trackId: this.#trackId,
      codec: this.#codec,
      pts: packet.timestamp,
      dts: packet.timestamp,
      keyframe: true,
      data: packet.payload,
    });
  }

  reset(): void {}
}
