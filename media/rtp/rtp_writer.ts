/**
 * The fixed header of RTP packets a sender writes (RFC 3550 §5.1; no CSRC, no extension),
 * written into the caller's buffer, so packets of a frame share one allocation.
 */

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

/** Writes the fixed RTP header at `at` of `out` (12 bytes). */
export function writeRtpHeader(out: Uint8Array, at: number, fields: RtpHeaderFields): void {
  out[at] = 0x80;
  out[at + 1] = (fields.marker ? 0x80 : 0) | (fields.payloadType & 0x7f);
  out[at + 2] = (fields.sequenceNumber >> 8) & 0xff;
  out[at + 3] = fields.sequenceNumber & 0xff;
  writeUint32(out, at + 4, fields.timestamp);
  writeUint32(out, at + 8, fields.ssrc);
}

/** Writes a 32-bit big-endian integer. */
export function writeUint32(out: Uint8Array, at: number, value: number): void {
  out[at] = (value >>> 24) & 0xff;
  out[at + 1] = (value >>> 16) & 0xff;
  out[at + 2] = (value >>> 8) & 0xff;
  out[at + 3] = value & 0xff;
}
