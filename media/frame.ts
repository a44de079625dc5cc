/**
 * The unit of media every provider produces and every publisher consumes.
 *
 * Timestamps are integers in the clock of their track (`Track.clockRate`, Hz): 90 kHz for
 * video, the sample rate for audio. That keeps AAC (1024 samples a frame) and Opus exact,
 * which a shared clock would not.
 */

/** Video codecs of the media plane. */
export type VideoCodec = "H264" | "H265" | "VP8";
/** Audio codecs of the media plane. */
export type AudioCodec = "AAC" | "OPUS" | "PCMU" | "PCMA" | "G722" | "MP3";
/** Any codec of the media plane. */
export type Codec = VideoCodec | AudioCodec;
/** What a track carries. */
export type TrackKind = "video" | "audio";

/** Decoder configuration that travels with a track rather than with each frame. */
export type CodecConfig =
  /** H.264: SPS and PPS NAL units without start codes or length prefixes. */
  | { codec: "H264"; sps: Uint8Array[]; pps: Uint8Array[] }
  /** H.265: VPS, SPS and PPS NAL units without start codes or length prefixes. */
  | { codec: "H265"; vps: Uint8Array[]; sps: Uint8Array[]; pps: Uint8Array[] }
  /** AAC: the AudioSpecificConfig bytes (ISO 14496-3). */
  | { codec: "AAC"; asc: Uint8Array }
  /** Opus: the OpusHead identification header (RFC 7845), when the source gave one. */
  | { codec: "OPUS"; head?: Uint8Array };

/** One elementary stream of a Stream. */
export interface Track {
  /** Index of the track in its stream, stable for the stream's life. */
  id: number;
  kind: TrackKind;
  codec: Codec;
  /** Clock of the frames' pts/dts, in Hz. */
  clockRate: number;
  /** Picture width in pixels, when known (video). */
  width?: number;
  /** Picture height in pixels, when known (video). */
  height?: number;
  /** Samples per second (audio). */
  sampleRate?: number;
  /** Channel count (audio). */
  channels?: number;
  /** Decoder configuration, when the codec has one. */
  config?: CodecConfig;
}

/**
 * One access unit.
 *
 * Payload layout by codec:
 * - H264/H265: NAL units, each prefixed by its length as a 4-byte big-endian integer
 *   (the MP4/FLV layout; MPEG-TS and RTP convert at their edge).
 * - AAC: one raw access unit, no ADTS header.
 * - OPUS, PCMU, PCMA, VP8: the codec frame as carried in RTP.
 * - MP3: MPEG audio frames as an RTMP publisher sends them (converted to AAC at ingest, so
 *   no Stream carries MP3).
 */
export interface MediaFrame {
  /** `Track.id` of the track this frame belongs to. */
  trackId: number;
  codec: Codec;
  /** Presentation time, in the track's clock. */
  pts: number;
  /** Decode time, in the track's clock; equals pts for codecs without reordering. */
  dts: number;
  /** True for a frame a decoder can start at (IDR, or any audio frame). */
  keyframe: boolean;
  data: Uint8Array;
}

/** The kind of a codec. */
export function codecKind(codec: Codec): TrackKind {
  return codec === "H264" || codec === "H265" || codec === "VP8" ? "video" : "audio";
}
