/**
 * RTCP sender reports a sender writes (RFC 3550 §6.4.1), each in a compound packet with an
 * SDES CNAME (§6.5.1): the report ties the track's RTP timestamps to a wall clock, and the
 * CNAME, the same for every track of a session, tells a receiver which tracks to align.
 */
import { writeUint32 } from "./rtp_writer.ts";

/** Seconds from the NTP epoch (1900) to the Unix epoch (1970). */
export const ntpUnixOffsetSec = 2_208_988_800;
/** Length of a sender report without report blocks, in bytes. */
const senderReportBytes = 28;
const rtcpSenderReport = 200;
const rtcpSdes = 202;
const sdesCname = 1;

/** What one sender report says. */
export interface SenderReportFields {
  ssrc: number;
  /** Wall clock of the report, in seconds since 1900. */
  ntpSec: number;
  /** RTP timestamp of the same instant. */
  rtpTimestamp: number;
  /** Packets sent so far. */
  packets: number;
  /** Payload bytes sent so far. */
  octets: number;
  /** Canonical name of the session (ASCII, at most 255 bytes). */
  cname: string;
}

/** The compound packet SR + SDES, after `prefixBytes` zero bytes for the caller. */
export function writeSenderReport(fields: SenderReportFields, prefixBytes = 0): Uint8Array {
  const cname = new TextEncoder().encode(fields.cname).subarray(0, 255);
  // SDES: header, SSRC, CNAME item (type, length, text), end item, padded to 32 bits.
  const sdesBytes = Math.ceil((4 + 4 + 2 + cname.length + 1) / 4) * 4;
  const out = new Uint8Array(prefixBytes + senderReportBytes + sdesBytes);
  let at = prefixBytes;
  out[at] = 0x80;
  out[at + 1] = rtcpSenderReport;
  out[at + 3] = senderReportBytes / 4 - 1;
  writeUint32(out, at + 4, fields.ssrc);
  const whole = Math.floor(fields.ntpSec);
  writeUint32(out, at + 8, whole >>> 0);
  writeUint32(out, at + 12, Math.floor((fields.ntpSec - whole) * 2 ** 32) >>> 0);
  writeUint32(out, at + 16, fields.rtpTimestamp >>> 0);
  writeUint32(out, at + 20, fields.packets >>> 0);
  writeUint32(out, at + 24, fields.octets >>> 0);
  at += senderReportBytes;
  out[at] = 0x81; // one chunk
  out[at + 1] = rtcpSdes;
  out[at + 3] = sdesBytes / 4 - 1;
  writeUint32(out, at + 4, fields.ssrc);
  out[at + 8] = sdesCname;
  out[at + 9] = cname.length;
  out.set(cname, at + 10);
  // The end item and the padding are the zero bytes left.
  return out;
}
