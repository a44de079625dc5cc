/** Builds RTP packets for the tests of the depacketizers (test code only). */
import { parseRtpPacket, type RtpPacket } from "./packet.ts";

/** Fields of a test packet. */
export interface TestPacket {
  seq?: number;
  ts?: number;
  marker?: boolean;
  pt?: number;
  payload: number[] | Uint8Array;
}

/** The bytes of an RTP packet. */
export function rtpBytes(p: TestPacket): Uint8Array {
  const payload = p.payload instanceof Uint8Array ? p.payload : Uint8Array.from(p.payload);
  const out = new Uint8Array(12 + payload.length);
  const view = new DataView(out.buffer);
  out[0] = 0x80;
  out[1] = (p.marker ? 0x80 : 0) | (p.pt ?? 96);
  view.setUint16(2, p.seq ?? 0);
  view.setUint32(4, p.ts ?? 0);
  view.setUint32(8, 0x1234);
  out.set(payload, 12);
  return out;
}

/** A parsed RTP packet. */
export function rtp(p: TestPacket): RtpPacket {
  return parseRtpPacket(rtpBytes(p));
}
