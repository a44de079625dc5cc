/**
 * PES packet headers (ISO 13818-1 §2.4.3.6): the 33-bit 90 kHz PTS/DTS fields, written by the
 * muxer and read back by the demuxer.
 */

import { ParseError, TruncatedError } from "../../../core/errors.ts";

/** Clock of PES timestamps and of the PCR base, in Hz. */
export const pesClockRate = 90000;
/** Timestamps wrap at 2^33 ticks of the 90 kHz clock. */
export const timestampWrap = 2 ** 33;

/** stream_id values used for the codecs of the media plane. */
export const PesStreamId = { video: 0xe0, audio: 0xc0, privateStream1: 0xbd } as const;

/** Writes a PTS or DTS field (5 bytes, `prefix` in the top nibble) at `offset`. */
export function writeTimestamp(out: Uint8Array, offset: number, prefix: number, ts: number): void {
  const t = ((ts % timestampWrap) + timestampWrap) % timestampWrap;
  const high = Math.floor(t / 2 ** 30); // bits 32..30
  const mid = Math.floor(t / 2 ** 15) & 0x7fff;
  const low = t & 0x7fff;
  out[offset] = (prefix << 4) | (high << 1) | 1;
  out[offset + 1] = mid >> 7;
  out[offset + 2] = ((mid & 0x7f) << 1) | 1;
  out[offset + 3] = low >> 7;
  out[offset + 4] = ((low & 0x7f) << 1) | 1;
}

function readTimestamp(b: Uint8Array, offset: number): number {
  return ((b[offset] >> 1) & 7) * 2 ** 30 + (b[offset + 1] << 22 | (b[offset + 2] >> 1) << 15 |
    b[offset + 3] << 7 | b[offset + 4] >> 1);
}

/**
 * Writes a PES header with PTS (and DTS when it differs) at `offset`; `payloadBytes` sets
 * PES_packet_length, written as 0 (unbounded) when it does not fit 16 bits or `unbounded`.
 * Returns the header length in bytes.
 */
export function writePesHeader(
  out: Uint8Array,
  offset: number,
  streamId: number,
  pts: number,
  dts: number,
  payloadBytes: number,
  unbounded: boolean,
): number {
  const withDts = dts !== pts;
  const headerData = withDts ? 10 : 5;
  const length = 3 + headerData + payloadBytes;
  out[offset] = 0;
  out[offset + 1] = 0;
  out[offset + 2] = 1;
  out[offset + 3] = streamId;
  const packetLength = unbounded || length > 0xffff ? 0 : length;
  out[offset + 4] = packetLength >> 8;
  out[offset + 5] = packetLength & 0xff;
  out[offset + 6] = 0x80; // '10' marker, no scrambling, no priority
  out[offset + 7] = withDts ? 0xc0 : 0x80;
  out[offset + 8] = headerData;
  writeTimestamp(out, offset + 9, withDts ? 3 : 2, pts);
  if (withDts) writeTimestamp(out, offset + 14, 1, dts);
  return 9 + headerData;
}

/** A parsed PES header. */
export interface PesHeader {
  streamId: number;
  /** PES_packet_length: bytes after this field, 0 when unbounded. */
  packetLength: number;
  /** 90 kHz, modulo 2^33; undefined when absent. */
  pts?: number;
  dts?: number;
  /** Offset of the payload within the PES. */
  payloadOffset: number;
}

/** Parses the header of a PES packet that starts at byte 0 of `pes`. */
export function parsePesHeader(pes: Uint8Array): PesHeader {
  if (pes.length < 9) throw new TruncatedError("PES header cut");
  if (pes[0] !== 0 || pes[1] !== 0 || pes[2] !== 1) throw new ParseError("no PES start code");
  const streamId = pes[3];
  const packetLength = (pes[4] << 8) | pes[5];
  if ((pes[6] & 0xc0) !== 0x80) throw new ParseError("PES without MPEG-2 header");
  const flags = pes[7] >> 6;
  const payloadOffset = 9 + pes[8];
  if (payloadOffset > pes.length) throw new TruncatedError("PES header cut");
  const header: PesHeader = { streamId, packetLength, payloadOffset };
  if (flags & 2) {
    if (pes[8] < 5) throw new ParseError("PES header too short for its PTS");
    header.pts = readTimestamp(pes, 9);
    header.dts = header.pts;
    if (flags === 3) {
      if (pes[8] < 10) throw new ParseError("PES header too short for its DTS");
      header.dts = readTimestamp(pes, 14);
    }
  }
  return header;
}
