/**
 * Payload formats with whole frames in a packet: Opus (RFC 7587), one frame per packet, and
 * G.711 (RFC 3551 PCMU/PCMA) and G.722 (one byte a clock unit of its 8 kHz RTP clock), where
 * a frame longer than a packet is split at byte boundaries with each part's timestamp
 * advanced by its offset.
 */
import { ParseError } from "../../core/errors.ts";
import type { MediaFrame } from "../frame.ts";
import { type Packetizer, type PacketSink, rtpMaxPayloadBytes } from "./packetizer.ts";

/** Packetizes Opus, PCMU, PCMA or G.722 frames. */
export class FramePacketizer implements Packetizer {
  #maxPayloadBytes: number;

  /** `maxPayloadBytes`: largest payload, in bytes. */
  constructor(maxPayloadBytes: number = rtpMaxPayloadBytes) {
    this.#maxPayloadBytes = maxPayloadBytes;
  }

  packetize(frame: MediaFrame, emit: PacketSink): void {
    const data = frame.data;
    if (data.length === 0) throw new ParseError(`empty ${frame.codec} frame`);
    const max = this.#maxPayloadBytes;
    if (frame.codec === "PCMU" || frame.codec === "PCMA" || frame.codec === "G722") {
      for (let pos = 0; pos < data.length; pos += max) {
        emit(data.subarray(pos, Math.min(pos + max, data.length)), false, pos);
      }
      return;
    }
    if (frame.codec !== "OPUS") throw new ParseError(`${frame.codec} is not a frame format`);
    // An Opus packet cannot be split (RFC 7587 §4.2); a bigger one is a broken source.
    if (data.length > max) throw new ParseError(`Opus packet of ${data.length} bytes`);
    emit(data, false, 0);
  }
}
