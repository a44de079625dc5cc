/**
 * RTCP (RFC 3550 §6.4.1): the sender reports of a compound packet, which tie a stream's RTP
 * timestamps to the sender's NTP wall clock so tracks can be aligned.
 */
import { ParseError, TruncatedError } from "../../core/errors.ts";

/** RTCP packet type of a sender report. */
const rtcpSenderReport = 200;

/** What a sender report says about one SSRC. */
export interface SenderReport {
  ssrc: number;
  /** NTP time of the report, in milliseconds since 1900 (fraction kept). */
  ntpMs: number;
  /** RTP timestamp of the same instant. */
  rtpTimestamp: number;
}

/** The sender reports of a compound RTCP packet; other packet types are skipped. */
export function parseSenderReports(data: Uint8Array): SenderReport[] {
  const reports: SenderReport[] = [];
  let pos = 0;
  while (pos < data.length) {
    if (data.length - pos < 4) throw new TruncatedError("RTCP header cut");
    if (data[pos] >> 6 !== 2) throw new ParseError("not RTCP version 2");
    const type = data[pos + 1];
    const bytes = (((data[pos + 2] << 8) | data[pos + 3]) + 1) * 4;
    if (pos + bytes > data.length) throw new TruncatedError("RTCP packet longer than its datagram");
    if (type === rtcpSenderReport) {
      if (bytes < 28) throw new TruncatedError("RTCP sender report cut");
      const view = new DataView(data.buffer, data.byteOffset + pos, bytes);
      reports.push({
        ssrc: view.getUint32(4),
        ntpMs: view.getUint32(8) * 1000 + view.getUint32(12) / 4294967.296,
        rtpTimestamp: view.getUint32(16),
      });
    }
    pos += bytes;
  }
  return reports;
}
