/**
 * AAC into RTP (RFC 3640, mpeg4-generic, mode AAC-hbr): one access unit per packet behind
 * an AU header section of one 16-bit header (13-bit size, 3-bit index 0). An access unit
 * bigger than a packet is fragmented (§3.2.3): every fragment repeats the header with the
 * whole AU's size, and the marker is set on the last one only.
 */
import { ParseError } from "../../core/errors.ts";
import type { MediaFrame } from "../frame.ts";
import { type Packetizer, type PacketSink, rtpMaxPayloadBytes } from "./packetizer.ts";

/** The fmtp of the payload format this packetizer writes (without `config`). */
export const aacHbrFmtp = "streamtype=5;profile-level-id=1;mode=AAC-hbr;sizelength=13;" +
  "indexlength=3;indexdeltalength=3";
/** AU-headers-length field plus one AU header, in bytes. */
const auSectionBytes = 4;
/** Largest AU size a 13-bit field holds, in bytes. */
const maxAuBytes = 8191;

/** Packetizes raw AAC access units. */
export class AacPacketizer implements Packetizer {
  #maxPayloadBytes: number;

  /** `maxPayloadBytes`: largest payload, AU header section included, in bytes. */
  constructor(maxPayloadBytes: number = rtpMaxPayloadBytes) {
    if (maxPayloadBytes <= auSectionBytes) throw new RangeError("payload limit too small for AAC");
    this.#maxPayloadBytes = maxPayloadBytes;
  }

  packetize(frame: MediaFrame, emit: PacketSink): void {
    const data = frame.data;
    if (frame.codec !== "AAC") throw new ParseError(`${frame.codec} is not AAC`);
    if (data.length === 0) throw new ParseError("empty AAC frame");
    if (data.length > maxAuBytes) throw new ParseError(`AAC frame of ${data.length} bytes`);
    const piece = this.#maxPayloadBytes - auSectionBytes;
    for (let pos = 0; pos < data.length; pos += piece) {
      const end = Math.min(pos + piece, data.length);
      const payload = new Uint8Array(auSectionBytes + end - pos);
      payload[1] = 16; // AU-headers-length, in bits
      payload[2] = data.length >> 5;
      payload[3] = (data.length & 0x1f) << 3;
      payload.set(data.subarray(pos, end), auSectionBytes);
      emit(payload, end === data.length, 0);
    }
  }
}
