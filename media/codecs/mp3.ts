/**
 * MPEG audio frame headers (ISO 11172-3, ISO 13818-3 and the MPEG 2.5 extension): layers I,
 * II and III, which MPEG-TS carries as stream types 0x03/0x04 and the media plane calls "MP3".
 */
import { ParseError, TruncatedError } from "../../core/errors.ts";

/** Length of an MPEG audio frame header, in bytes. */
export const mpegAudioHeaderBytes = 4;

/** What one frame header says. */
export interface MpegAudioHeader {
  /** 1 (MPEG-1), 2 (MPEG-2) or 2.5 (MPEG 2.5). */
  version: 1 | 2 | 2.5;
  layer: 1 | 2 | 3;
  sampleRate: number;
  channels: 1 | 2;
  /** Samples per channel the frame decodes to. */
  samples: number;
  /** Whole frame, header included, in bytes. */
  frameBytes: number;
}

/** Bitrates in kbit/s by bitrate index: MPEG-1 layers I, II, III, then MPEG-2/2.5 I and II/III. */
const bitratesKbps = [
  [0, 32, 64, 96, 128, 160, 192, 224, 256, 288, 320, 352, 384, 416, 448],
  [0, 32, 48, 56, 64, 80, 96, 112, 128, 160, 192, 224, 256, 320, 384],
  [0, 32, 40, 48, 56, 64, 80, 96, 112, 128, 160, 192, 224, 256, 320],
  [0, 32, 48, 56, 64, 80, 96, 112, 128, 144, 160, 176, 192, 224, 256],
  [0, 8, 16, 24, 32, 40, 48, 56, 64, 80, 96, 112, 128, 144, 160],
];
/** Sample rates of MPEG-1 in Hz; MPEG-2 halves them, MPEG 2.5 quarters them. */
const mpeg1SampleRates = [44_100, 48_000, 32_000];

/** Parses the frame header at `offset`; ParseError for a bad or free-format header. */
export function parseMpegAudioHeader(data: Uint8Array, offset = 0): MpegAudioHeader {
  if (offset + mpegAudioHeaderBytes > data.length) {
    throw new TruncatedError("MPEG audio header cut");
  }
  const b1 = data[offset + 1], b2 = data[offset + 2], b3 = data[offset + 3];
  if (data[offset] !== 0xff || (b1 & 0xe0) !== 0xe0) {
    throw new ParseError("no MPEG audio sync word");
  }
  const versionBits = (b1 >> 3) & 3;
  const layerBits = (b1 >> 1) & 3;
  const bitrateIndex = b2 >> 4;
  const rateIndex = (b2 >> 2) & 3;
  if (versionBits === 1 || layerBits === 0 || rateIndex === 3) {
    throw new ParseError("reserved MPEG audio header value");
  }
  if (bitrateIndex === 0 || bitrateIndex === 15) {
    throw new ParseError("free-format or bad MPEG audio bitrate");
  }
  const version = versionBits === 3 ? 1 : versionBits === 2 ? 2 : 2.5;
  const layer = (4 - layerBits) as 1 | 2 | 3;
  const table = version === 1 ? layer - 1 : layer === 1 ? 3 : 4;
  const bitrate = bitratesKbps[table][bitrateIndex] * 1000;
  const sampleRate = mpeg1SampleRates[rateIndex] / (version === 1 ? 1 : version === 2 ? 2 : 4);
  const padding = (b2 >> 1) & 1;
  const samples = layer === 1 ? 384 : layer === 3 && version !== 1 ? 576 : 1152;
  const frameBytes = layer === 1
    ? (Math.floor(12 * bitrate / sampleRate) + padding) * 4
    : Math.floor(samples / 8 * bitrate / sampleRate) + padding;
  return { version, layer, sampleRate, channels: b3 >> 6 === 3 ? 1 : 2, samples, frameBytes };
}
