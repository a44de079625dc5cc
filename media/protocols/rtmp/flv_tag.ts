/**
 * Payloads of RTMP audio and video messages, which are FLV tag bodies (FLV 10.1 §E.4.2,
 * §E.4.3) extended by Enhanced RTMP (v1/v2: an ex-header with a FourCC, 'hvc1' for H.265 and
 * 'Opus' for Opus). H.264/H.265 frames keep the 4-byte length-prefixed NAL layout of
 * MediaFrame, so no NAL conversion happens on either side.
 */
import { ParseError, TruncatedError } from "../../../core/errors.ts";
import type { AudioCodec, VideoCodec } from "../../frame.ts";

/** Legacy FLV video codec id of AVC (H.264). */
export const flvCodecAvc = 7;
/** Legacy FLV sound format of AAC. */
export const flvSoundAac = 10;
/** FLV sound format of G.711 A-law. */
export const flvSoundPcma = 7;
/** FLV sound format of G.711 mu-law. */
export const flvSoundPcmu = 8;
/** Sound format that marks an Enhanced RTMP audio ex-header. */
const flvSoundExHeader = 9;
/** FLV sound format of MP3. */
export const flvSoundMp3 = 2;
/** FLV sound format of MP3 at 8 kHz. */
export const flvSoundMp3At8k = 14;
/** Sample rates of the FLV sound rate bits, in Hz (MP3 at 48 kHz is flagged 44 kHz). */
const flvSoundRatesHz = [5512, 11025, 22050, 44100];

/** Names of the FLV sound formats the server cannot carry nor convert. */
const unsupportedSoundFormats: Record<number, string> = {
  0: "Linear PCM",
  1: "ADPCM",
  3: "Linear PCM",
  4: "Nellymoser",
  5: "Nellymoser",
  6: "Nellymoser",
  11: "Speex",
  15: "device-specific sound",
};

const fourCc = {
  avc1: "avc1",
  hvc1: "hvc1",
  opus: "Opus",
  mp4a: "mp4a",
} as const;

/** A FourCC as the 32-bit number Enhanced RTMP puts in `videocodecid`/`audiocodecid`. */
export function fourCcNumber(code: string): number {
  return ((code.charCodeAt(0) << 24) | (code.charCodeAt(1) << 16) | (code.charCodeAt(2) << 8) |
    code.charCodeAt(3)) >>> 0;
}

/** Enhanced RTMP packet types (video: 0-3 used here; audio: 0-2). */
const ExPacket = { sequenceStart: 0, codedFrames: 1, sequenceEnd: 2, codedFramesX: 3 } as const;

/** What a video message carries. */
export type VideoTag =
  | { kind: "config"; codec: VideoCodec; config: Uint8Array }
  | { kind: "frame"; codec: VideoCodec; keyframe: boolean; ctsMs: number; data: Uint8Array }
  | { kind: "end"; codec: VideoCodec }
  /** Command frames, metadata and codecs the server does not carry: skipped, with the reason. */
  | { kind: "skip"; reason: string };

/** What an audio message carries. */
export type AudioTag =
  | { kind: "config"; codec: AudioCodec; config: Uint8Array }
  /** A frame; MP3 frames also carry the rate and channels of the FLV header. */
  | { kind: "frame"; codec: AudioCodec; data: Uint8Array; rateHz?: number; channels?: number }
  /** An audio codec the server cannot carry nor convert, by name ("Speex"). */
  | { kind: "unsupported"; codec: string }
  | { kind: "skip"; reason: string };

function si24(data: Uint8Array, pos: number): number {
  const v = (data[pos] << 16) | (data[pos + 1] << 8) | data[pos + 2];
  return v & 0x800000 ? v - 0x1000000 : v;
}

function readFourCc(data: Uint8Array, pos: number): string {
  if (data.length < pos + 4) throw new TruncatedError("FLV tag FourCC cut");
  return String.fromCharCode(data[pos], data[pos + 1], data[pos + 2], data[pos + 3]);
}

/** Parses a video message payload (legacy AVC or Enhanced RTMP). */
export function parseVideoTag(data: Uint8Array): VideoTag {
  if (data.length < 1) throw new TruncatedError("FLV video tag empty");
  const b0 = data[0];
  if (b0 & 0x80) {
    const frameType = (b0 >> 4) & 7;
    const packetType = b0 & 0x0f;
    const code = readFourCc(data, 1);
    const codec: VideoCodec | undefined = code === fourCc.hvc1
      ? "H265"
      : code === fourCc.avc1
      ? "H264"
      : undefined;
    if (!codec) return { kind: "skip", reason: `video FourCC ${JSON.stringify(code)}` };
    if (frameType === 5) return { kind: "skip", reason: "video command frame" };
    switch (packetType) {
      case ExPacket.sequenceStart:
        return { kind: "config", codec, config: data.subarray(5) };
      case ExPacket.sequenceEnd:
        return { kind: "end", codec };
      case ExPacket.codedFrames:
        if (data.length < 8) throw new TruncatedError("FLV video composition time cut");
        return {
          kind: "frame",
          codec,
          keyframe: frameType === 1,
          ctsMs: si24(data, 5),
          data: data.subarray(8),
        };
      case ExPacket.codedFramesX:
        return {
          kind: "frame",
          codec,
          keyframe: frameType === 1,
          ctsMs: 0,
          data: data.subarray(5),
        };
      default:
        return { kind: "skip", reason: `video packet type ${packetType}` };
    }
  }
  const frameType = b0 >> 4;
  const codecId = b0 & 0x0f;
  if (codecId !== flvCodecAvc) return { kind: "skip", reason: `FLV video codec ${codecId}` };
  if (frameType === 5) return { kind: "skip", reason: "video command frame" };
  if (data.length < 5) throw new TruncatedError("FLV AVC header cut");
  switch (data[1]) {
    case 0:
      return { kind: "config", codec: "H264", config: data.subarray(5) };
    case 1:
      return {
        kind: "frame",
        codec: "H264",
        keyframe: frameType === 1,
        ctsMs: si24(data, 2),
        data: data.subarray(5),
      };
    case 2:
      return { kind: "end", codec: "H264" };
    default:
      throw new ParseError(`FLV AVC packet type ${data[1]}`);
  }
}

/** Parses an audio message payload (legacy AAC/G.711 or Enhanced RTMP). */
export function parseAudioTag(data: Uint8Array): AudioTag {
  if (data.length < 1) throw new TruncatedError("FLV audio tag empty");
  const format = data[0] >> 4;
  if (format === flvSoundExHeader) {
    const packetType = data[0] & 0x0f;
    const code = readFourCc(data, 1);
    const codec: AudioCodec | undefined = code === fourCc.opus
      ? "OPUS"
      : code === fourCc.mp4a
      ? "AAC"
      : undefined;
    if (!codec) return { kind: "skip", reason: `audio FourCC ${JSON.stringify(code)}` };
    if (packetType === ExPacket.sequenceStart) {
      return { kind: "config", codec, config: data.subarray(5) };
    }
    if (packetType === ExPacket.codedFrames) {
      return { kind: "frame", codec, data: data.subarray(5) };
    }
    return { kind: "skip", reason: `audio packet type ${packetType}` };
  }
  if (format === flvSoundAac) {
    if (data.length < 2) throw new TruncatedError("FLV AAC header cut");
    if (data[1] === 0) return { kind: "config", codec: "AAC", config: data.subarray(2) };
    if (data[1] === 1) return { kind: "frame", codec: "AAC", data: data.subarray(2) };
    throw new ParseError(`FLV AAC packet type ${data[1]}`);
  }
  if (format === flvSoundPcmu) return { kind: "frame", codec: "PCMU", data: data.subarray(1) };
  if (format === flvSoundPcma) return { kind: "frame", codec: "PCMA", data: data.subarray(1) };
  if (format === flvSoundMp3 || format === flvSoundMp3At8k) {
    return {
      kind: "frame",
      codec: "MP3",
      data: data.subarray(1),
      rateHz: format === flvSoundMp3At8k ? 8000 : flvSoundRatesHz[(data[0] >> 2) & 3],
      channels: (data[0] & 1) + 1,
    };
  }
  return {
    kind: "unsupported",
    codec: unsupportedSoundFormats[format] ?? `FLV sound format ${format}`,
  };
}

/** Bytes of a video tag header before the frame data (legacy AVC and Enhanced 'hvc1' alike). */
export function videoTagHeaderBytes(codec: VideoCodec): number {
  return codec === "H264" ? 5 : 8;
}

/** Writes the video tag header of a frame into `out` (sized by `videoTagHeaderBytes`). */
export function writeVideoFrameHeader(
  out: Uint8Array,
  codec: VideoCodec,
  keyframe: boolean,
  ctsMs: number,
): void {
  const frameType = keyframe ? 1 : 2;
  let pos: number;
  if (codec === "H264") {
    out[0] = (frameType << 4) | flvCodecAvc;
    out[1] = 1;
    pos = 2;
  } else if (codec === "H265") {
    out[0] = 0x80 | (frameType << 4) | ExPacket.codedFrames;
    writeFourCc(out, 1, fourCc.hvc1);
    pos = 5;
  } else {
    throw new ParseError(`${codec} is not carried over RTMP`);
  }
  out[pos] = (ctsMs >> 16) & 0xff;
  out[pos + 1] = (ctsMs >> 8) & 0xff;
  out[pos + 2] = ctsMs & 0xff;
}

/** The video tag of a decoder configuration record (avcC or hvcC). */
export function buildVideoConfigTag(codec: VideoCodec, record: Uint8Array): Uint8Array {
  // Legacy AVC: type byte, packet type, composition time; Enhanced: type byte, FourCC.
  const header = 5;
  const out = new Uint8Array(header + record.length);
  if (codec === "H264") {
    out[0] = 0x10 | flvCodecAvc;
    out[1] = 0;
  } else if (codec === "H265") {
    out[0] = 0x80 | 0x10 | ExPacket.sequenceStart;
    writeFourCc(out, 1, fourCc.hvc1);
  } else {
    throw new ParseError(`${codec} is not carried over RTMP`);
  }
  out.set(record, header);
  return out;
}

/** Bytes of an audio tag header before the frame data. */
export function audioTagHeaderBytes(codec: AudioCodec): number {
  return codec === "AAC" ? 2 : codec === "OPUS" ? 5 : 1;
}

/** Writes the audio tag header of a frame into `out` (sized by `audioTagHeaderBytes`). */
export function writeAudioFrameHeader(out: Uint8Array, codec: AudioCodec): void {
  if (codec === "AAC") {
    // 0xAF: AAC, and the fixed rate/size/type bits FLV prescribes for it.
    out[0] = 0xaf;
    out[1] = 1;
  } else if (codec === "OPUS") {
    out[0] = (flvSoundExHeader << 4) | ExPacket.codedFrames;
    writeFourCc(out, 1, fourCc.opus);
  } else {
    // G.711: 5.5 kHz rate bits (ignored for these formats), 16-bit, mono.
    out[0] = ((codec === "PCMU" ? flvSoundPcmu : flvSoundPcma) << 4) | 0x02;
  }
}

/** The audio tag of a decoder configuration (AAC AudioSpecificConfig, Opus OpusHead). */
export function buildAudioConfigTag(codec: AudioCodec, config: Uint8Array): Uint8Array {
  if (codec === "AAC") {
    const out = new Uint8Array(2 + config.length);
    out[0] = 0xaf;
    out[1] = 0;
    out.set(config, 2);
    return out;
  }
  if (codec === "OPUS") {
    const out = new Uint8Array(5 + config.length);
    out[0] = (flvSoundExHeader << 4) | ExPacket.sequenceStart;
    writeFourCc(out, 1, fourCc.opus);
    out.set(config, 5);
    return out;
  }
  throw new ParseError(`${codec} has no RTMP sequence header`);
}

function writeFourCc(out: Uint8Array, pos: number, code: string): void {
  for (let i = 0; i < 4; i++) out[pos + i] = code.charCodeAt(i);
}

/** The `videocodecid` of metadata: 7 for AVC, the FourCC number for Enhanced codecs. */
export function metadataVideoCodecId(codec: VideoCodec): number {
  return codec === "H264" ? flvCodecAvc : fourCcNumber(fourCc.hvc1);
}

/** The `audiocodecid` of metadata: the FLV sound format, the FourCC number for Opus. */
export function metadataAudioCodecId(codec: AudioCodec): number {
  return codec === "AAC"
    ? flvSoundAac
    : codec === "OPUS"
    ? fourCcNumber(fourCc.opus)
    : codec === "PCMU"
    ? flvSoundPcmu
    : flvSoundPcma;
}
