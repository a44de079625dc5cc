/**
 * Length of an RTP packet's header (fixed part, CSRCs and extension), read in place without
 * allocating: SRTP encrypts only what follows it. Use parseRtpPacket where a packet object
 * is wanted.
 */
import { rtpHeaderBytes } from "../packet.ts";

/** Header length of the RTP packet in `packet[0, length)`, or -1 when it is not RTP v2 or cut. */
export function rtpHeaderLength(packet: Uint8Array, length: number): number {
  if (length < rtpHeaderBytes) return -1;
  const b0 = packet[0];
  if (b0 >> 6 !== 2) return -1;
  let offset = rtpHeaderBytes + (b0 & 0x0f) * 4;
  if (b0 & 0x10) {
    if (length < offset + 4) return -1;
    offset += 4 + ((packet[offset + 2] << 8) | packet[offset + 3]) * 4;
  }
  return offset <= length ? offset : -1;
}
