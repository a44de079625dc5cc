/**
 * AAC helpers (ISO 14496-3): the AudioSpecificConfig of MP4/FLV/SDP and the ADTS frame
 * header of MPEG-TS (§1.6.2.1, §1.A.2).
 */

import { ParseError, TruncatedError } from "../../core/errors.ts";
import { BitReader } from "./bitreader.ts";

/** Sampling rates by samplingFrequencyIndex, in Hz. */
export const aacSampleRates: readonly number[] = [
  96000,
  88200,
  64000,
  48000,
  44100,
  32000,
  24000,
  22050,
  16000,
  12000,
  11025,
  8000,
  7350,
];

/** Samples per AAC frame (AAC-LC; the core rate of HE-AAC). */
export const aacSamplesPerFrame = 1024;

/** The fields of an AudioSpecificConfig the media plane uses. */
export interface AudioSpecificConfig {
  /** audioObjectType of the core codec (2 = AAC-LC). */
  objectType: number;
  /** Core sampling rate in Hz. */
  sampleRate: number;
  /** Output sampling rate of SBR (HE-AAC) in Hz, when signalled explicitly. */
  extensionSampleRate?: number;
  /** channelConfiguration (1..7; 0 = defined in the bitstream). */
  channelConfig: number;
  /** Channel count implied by channelConfig (0 when unknown). */
  channels: number;
}

const channelsByConfig = [0, 1, 2, 3, 4, 5, 6, 8];

function readObjectType(r: BitReader): number {
  const type = r.readBits(5);
  return type === 31 ? 32 + r.readBits(6) : type;
}

function readSampleRate(r: BitReader): number {
  const index = r.readBits(4);
  if (index === 15) return r.readBits(24);
  const rate = aacSampleRates[index];
  if (rate === undefined) throw new ParseError("reserved AAC sampling frequency index");
  return rate;
}

/** Parses an AudioSpecificConfig. */
export function parseAsc(data: Uint8Array): AudioSpecificConfig {
  if (data.length < 2) throw new TruncatedError("AudioSpecificConfig too short");
  const r = new BitReader(data);
  let objectType = readObjectType(r);
  if (objectType === 0) throw new ParseError("AAC object type 0 is invalid");
  const sampleRate = readSampleRate(r);
  if (sampleRate === 0) throw new ParseError("AAC sampling rate 0");
  const channelConfig = r.readBits(4);
  if (channelConfig > 7) throw new ParseError("reserved AAC channel configuration");
  let extensionSampleRate: number | undefined;
  if (objectType === 5 || objectType === 29) {
    extensionSampleRate = readSampleRate(r);
    objectType = readObjectType(r);
  }
  return {
    objectType,
    sampleRate,
    extensionSampleRate,
    channelConfig,
    channels: channelsByConfig[channelConfig],
  };
}

/** Builds a 2-byte AudioSpecificConfig (rates from the standard table, channels 1..8). */
export function buildAsc(objectType: number, sampleRate: number, channels: number): Uint8Array {
  const index = aacSampleRates.indexOf(sampleRate);
  const config = channels === 8 ? 7 : channels;
  if (index < 0 || objectType < 1 || objectType > 30 || config < 1 || config > 7) {
    throw new ParseError("AAC config not expressible in 2 bytes");
  }
  return new Uint8Array([
    (objectType << 3) | (index >> 1),
    ((index & 1) << 7) | (config << 3),
  ]);
}

/** Length of an ADTS header without CRC, in bytes. */
export const adtsHeaderBytes = 7;

/** One ADTS frame header. */
export interface AdtsHeader {
  /** audioObjectType (profile + 1). */
  objectType: number;
  sampleRate: number;
  channelConfig: number;
  /** Header length in bytes (7, or 9 with CRC). */
  headerBytes: number;
  /** Whole frame length, header included, in bytes. */
  frameBytes: number;
  /** Raw data blocks in the frame (each 1024 samples). */
  rawBlocks: number;
}

/** Parses the ADTS header at `offset`; TruncatedError when fewer than 7 bytes are there. */
export function parseAdtsHeader(data: Uint8Array, offset = 0): AdtsHeader {
  if (data.length - offset < adtsHeaderBytes) throw new TruncatedError("ADTS header cut");
  const b = data.subarray(offset, offset + adtsHeaderBytes);
  if (b[0] !== 0xff || (b[1] & 0xf6) !== 0xf0) throw new ParseError("no ADTS sync word");
  const index = (b[2] >> 2) & 0x0f;
  const sampleRate = aacSampleRates[index];
  if (sampleRate === undefined) throw new ParseError("reserved ADTS sampling frequency index");
  const headerBytes = b[1] & 1 ? 7 : 9;
  const frameBytes = ((b[3] & 3) << 11) | (b[4] << 3) | (b[5] >> 5);
  if (frameBytes < headerBytes) throw new ParseError("ADTS frame shorter than its header");
  return {
    objectType: (b[2] >> 6) + 1,
    sampleRate,
    channelConfig: ((b[2] & 1) << 2) | (b[3] >> 6),
    headerBytes,
    frameBytes,
    rawBlocks: (b[6] & 3) + 1,
  };
}

/** Largest ADTS frame, header included, in bytes (13-bit length field). */
export const maxAdtsFrameBytes = 8191;

/**
 * Writes a 7-byte ADTS header (no CRC, one raw block) for a payload of `payloadBytes`
 * into `out` at `offset`.
 */
export function writeAdtsHeader(
  out: Uint8Array,
  offset: number,
  asc: AudioSpecificConfig,
  payloadBytes: number,
): void {
  const index = aacSampleRates.indexOf(asc.sampleRate);
  const frameBytes = payloadBytes + adtsHeaderBytes;
  if (index < 0 || asc.objectType > 4 || frameBytes > maxAdtsFrameBytes) {
    throw new ParseError("AAC frame not expressible in ADTS");
  }
  out[offset] = 0xff;
  out[offset + 1] = 0xf1;
  out[offset + 2] = ((asc.objectType - 1) << 6) | (index << 2) | (asc.channelConfig >> 2);
  out[offset + 3] = ((asc.channelConfig & 3) << 6) | (frameBytes >> 11);
  out[offset + 4] = (frameBytes >> 3) & 0xff;
  out[offset + 5] = ((frameBytes & 7) << 5) | 0x1f; // buffer fullness 0x7ff: variable rate
  out[offset + 6] = 0xfc;
}

/** The AudioSpecificConfig equivalent to an ADTS header. */
export function adtsToAsc(header: AdtsHeader): Uint8Array {
  return buildAsc(
    header.objectType,
    header.sampleRate,
    header.channelConfig === 7 ? 8 : header.channelConfig,
  );
}
