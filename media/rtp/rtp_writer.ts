/**
 * The bytes of RTP packets a sender writes (RFC 3550 §5.1): the fixed header (no CSRC, no
 * extension) and the payload, after room for a prefix the caller fills in (the 4-byte
 * interleaved frame header of RTSP over TCP), so a packet is built with one allocation.
 */
import { rtpHeaderBytes } from "./packet.ts";

/** Header fields of a packet to send. */
export interface RtpHeaderFields {
  marker: boolean;
  payloadType: number;
  /** 16-bit sequence number. */
  sequenceNumber: number;
  /** 32-bit timestamp. */
  timestamp: number;
  ssrc: number;
}

/** A new buffer: `prefixBytes` zero bytes, the RTP header, then `payload`. */
export function writeRtpPacket(
  fields: RtpHeaderFields,
  payload: Uint8Array,
  prefixBytes = 0,
): Uint8Array {
  const out = new Uint8Array(prefixBytes + rtpHeaderBytes + payload.length);
  const h = prefixBytes;
  out[h] = 0x80;
  out[h + 1] = (fields.marker ? 0x80 : 0) | (fields.payloadType & 0x7f);
  out[h + 2] = (fields.sequenceNumber >> 8) & 0xff;
  out[h + 3] = fields.sequenceNumber & 0xff;
  writeUint32(out, h + 4, fields.timestamp);
  writeUint32(out, h + 8, fields.ssrc);
  out.set(payload, h + rtpHeaderBytes);
  return out;
}

/** Writes a 32-bit big-endian integer. */
export function writeUint32(out: Uint8Array, at: number, value: number): void {
  out[at] = (value >>> 24) & 0xff;
  out[at + 1] = (value >>> 16) & 0xff;
  out[at + 2] = (value >>> 8) & 0xff;
  out[at + 3] = value & 0xff;
}
