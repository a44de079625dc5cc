/** RTP packets (RFC 3550 §5.1): the fixed header, CSRCs, header extension and padding. */
import { ParseError, TruncatedError } from "../../core/errors.ts";

/** Length of the fixed RTP header, in bytes. */
export const rtpHeaderBytes = 12;

/** One RTP packet; `payload` is a view into the bytes it was parsed from. */
export interface RtpPacket {
  marker: boolean;
  payloadType: number;
  /** 16-bit sequence number. */
  sequenceNumber: number;
  /** 32-bit timestamp, in the clock of the payload format. */
  timestamp: number;
  ssrc: number;
  payload: Uint8Array;
}

/** Parses an RTP packet; a packet that is not version 2 or is cut is a ParseError. */
export function parseRtpPacket(data: Uint8Array): RtpPacket {
  if (data.length < rtpHeaderBytes) throw new TruncatedError("RTP packet shorter than its header");
  const b0 = data[0];
  if (b0 >> 6 !== 2) throw new ParseError("not RTP version 2");
  let offset = rtpHeaderBytes + (b0 & 0x0f) * 4;
  if (b0 & 0x10) {
    if (data.length < offset + 4) throw new TruncatedError("RTP extension header cut");
    offset += 4 + ((data[offset + 2] << 8) | data[offset + 3]) * 4;
  }
  let end = data.length;
  if (b0 & 0x20) {
    const padding = data[end - 1];
    if (padding === 0) throw new ParseError("RTP padding count of zero");
    end -= padding;
  }
  if (offset > end) throw new TruncatedError("RTP header longer than the packet");
  const b1 = data[1];
  return {
    marker: (b1 & 0x80) !== 0,
    payloadType: b1 & 0x7f,
    sequenceNumber: (data[2] << 8) | data[3],
    timestamp: ((data[4] << 24) | (data[5] << 16) | (data[6] << 8) | data[7]) >>> 0,
    ssrc: ((data[8] << 24) | (data[9] << 16) | (data[10] << 8) | data[11]) >>> 0,
    payload: data.subarray(offset, end),
  };
}
