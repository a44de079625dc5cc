/**
 * MPEG-TS program-specific information (ISO 13818-1 §2.4.4): PAT and PMT sections with
 * their CRC, and the stream types and descriptors of the codecs of the media plane.
 */

import { ParseError, TruncatedError } from "../../../core/errors.ts";
import type { Codec } from "../../frame.ts";

/** Length of a TS packet, in bytes. */
export const tsPacketBytes = 188;
/** First byte of every TS packet. */
export const tsSyncByte = 0x47;
/** PID of the program association table. */
export const patPid = 0;

/** stream_type values (ISO 13818-1 Table 2-34). */
export const StreamType = {
  /** ADTS AAC (ISO 13818-7). */
  aacAdts: 0x0f,
  h264: 0x1b,
  h265: 0x24,
  /** PES private data: Opus when a registration descriptor says "Opus". */
  privateData: 0x06,
  /** MPEG-1 audio (ISO 11172-3, layers I to III). */
  mpeg1Audio: 0x03,
  /** MPEG-2 audio (ISO 13818-3). */
  mpeg2Audio: 0x04,
} as const;

/** Descriptor tags used here. */
const registrationDescriptorTag = 0x05;
const extensionDescriptorTag = 0x7f;
/** Extension descriptor tag of the Opus channel configuration (ETSI TS 102 366-style). */
const opusExtensionTag = 0x80;
/** format_identifier "Opus" of the registration descriptor. */
const opusFormatId = 0x4f707573;

const crcTable = (() => {
  const table = new Uint32Array(256);
  for (let i = 0; i < 256; i++) {
    let c = i << 24;
    for (let k = 0; k < 8; k++) c = c & 0x80000000 ? (c << 1) ^ 0x04c11db7 : c << 1;
    table[i] = c >>> 0;
  }
  return table;
})();

/** CRC-32/MPEG-2 of `data[start, end)` (what PSI sections end with). */
export function crc32Mpeg(data: Uint8Array, start = 0, end = data.length): number {
  let crc = 0xffffffff;
  for (let i = start; i < end; i++) crc = (crc << 8) ^ crcTable[((crc >>> 24) ^ data[i]) & 0xff];
  return crc >>> 0;
}

/** One elementary stream of a PMT. */
export interface PmtStream {
  pid: number;
  streamType: number;
  /** The media-plane codec, when the stream carries one. */
  codec?: Codec;
  /** Opus channel count from the extension descriptor. */
  opusChannels?: number;
}

/** A program map: its PCR PID and streams. */
export interface Pmt {
  pcrPid: number;
  streams: PmtStream[];
}

/** Writes a PSI section with its CRC into `out` at `offset`; returns the bytes written. */
function writeSection(
  out: Uint8Array,
  offset: number,
  tableId: number,
  tableIdExtension: number,
  body: number[],
): number {
  const sectionLength = 5 + body.length + 4;
  const s = [
    tableId,
    0xb0 | (sectionLength >> 8),
    sectionLength & 0xff,
    tableIdExtension >> 8,
    tableIdExtension & 0xff,
    0xc1, // version 0, current
    0,
    0,
    ...body,
  ];
  out.set(s, offset);
  const crc = crc32Mpeg(out, offset, offset + s.length);
  out[offset + s.length] = crc >>> 24;
  out[offset + s.length + 1] = (crc >>> 16) & 0xff;
  out[offset + s.length + 2] = (crc >>> 8) & 0xff;
  out[offset + s.length + 3] = crc & 0xff;
  return s.length + 4;
}

/** A PAT section listing one program (number 1) at `pmtPid`, written at `offset`. */
export function writePat(out: Uint8Array, offset: number, pmtPid: number): number {
  return writeSection(out, offset, 0x00, 1, [0, 1, 0xe0 | (pmtPid >> 8), pmtPid & 0xff]);
}

/** A PMT section for program 1, written at `offset`; returns the bytes written. */
export function writePmt(out: Uint8Array, offset: number, pmt: Pmt): number {
  const body = [0xe0 | (pmt.pcrPid >> 8), pmt.pcrPid & 0xff, 0xf0, 0];
  for (const s of pmt.streams) {
    const descriptors = s.codec === "OPUS"
      ? [
        registrationDescriptorTag,
        4,
        ...[24, 16, 8, 0].map((shift) => (opusFormatId >>> shift) & 0xff),
        extensionDescriptorTag,
        2,
        opusExtensionTag,
        s.opusChannels ?? 2,
      ]
      : [];
    body.push(s.streamType, 0xe0 | (s.pid >> 8), s.pid & 0xff, 0xf0, descriptors.length);
    body.push(...descriptors);
  }
  return writeSection(out, offset, 0x02, 1, body);
}

/** Checks a section's length and CRC; returns the view of its bytes after the 8-byte header. */
function sectionBody(section: Uint8Array, tableId: number): Uint8Array {
  if (section.length < 3) throw new TruncatedError("PSI section cut");
  if (section[0] !== tableId) throw new ParseError(`expected PSI table ${tableId}`);
  const length = ((section[1] & 0x0f) << 8) | section[2];
  if (length < 9) throw new ParseError("PSI section too short");
  if (3 + length > section.length) throw new TruncatedError("PSI section cut");
  if (crc32Mpeg(section, 0, 3 + length) !== 0) throw new ParseError("PSI CRC mismatch");
  return section.subarray(8, 3 + length - 4);
}

/** The PMT PID of the first program of a PAT section. */
export function parsePat(section: Uint8Array): number | undefined {
  const body = sectionBody(section, 0x00);
  for (let i = 0; i + 4 <= body.length; i += 4) {
    const program = (body[i] << 8) | body[i + 1];
    if (program !== 0) return ((body[i + 2] & 0x1f) << 8) | body[i + 3];
  }
  return undefined;
}

/** Parses a PMT section. */
export function parsePmt(section: Uint8Array): Pmt {
  const body = sectionBody(section, 0x02);
  if (body.length < 4) throw new ParseError("PMT too short");
  const pcrPid = ((body[0] & 0x1f) << 8) | body[1];
  let pos = 4 + (((body[2] & 0x0f) << 8) | body[3]);
  const streams: PmtStream[] = [];
  while (pos + 5 <= body.length) {
    const streamType = body[pos];
    const pid = ((body[pos + 1] & 0x1f) << 8) | body[pos + 2];
    const infoLength = ((body[pos + 3] & 0x0f) << 8) | body[pos + 4];
    const end = pos + 5 + infoLength;
    if (end > body.length) throw new ParseError("PMT descriptors run past the section");
    const stream: PmtStream = { pid, streamType };
    let isOpus = false;
    for (let d = pos + 5; d + 2 <= end;) {
      const tag = body[d];
      const len = body[d + 1];
      const data = body.subarray(d + 2, Math.min(end, d + 2 + len));
      if (tag === registrationDescriptorTag && data.length >= 4) {
        isOpus = ((data[0] << 24) | (data[1] << 16) | (data[2] << 8) | data[3]) >>> 0 ===
          opusFormatId;
      } else if (
        tag === extensionDescriptorTag && data.length >= 2 && data[0] === opusExtensionTag
      ) {
        stream.opusChannels = data[1] === 0 ? 2 : Math.min(data[1], 8);
      }
      d += 2 + len;
    }
    if (streamType === StreamType.h264) stream.codec = "H264";
    else if (streamType === StreamType.h265) stream.codec = "H265";
    else if (streamType === StreamType.aacAdts) stream.codec = "AAC";
    else if (streamType === StreamType.privateData && isOpus) stream.codec = "OPUS";
    else if (streamType === StreamType.mpeg1Audio || streamType === StreamType.mpeg2Audio) {
      stream.codec = "MP3";
    }
    streams.push(stream);
    pos = end;
  }
  return { pcrPid, streams };
}
