/**
 * A live Matroska stream of raw media, as the mixer's A/V encoder feeds its ffmpeg: raw I420
 * pictures (V_UNCOMPRESSED) and interleaved s16le PCM (A_PCM/INT/LIT) in one pipe, each
 * block with its own timestamp. Raw inputs (`-f rawvideo`, `-f s16le`) carry none: ffmpeg
 * counts pictures and samples, so a picture the mixer could not compose put the video's
 * timeline behind the sound's for good, and ffmpeg, which works on the output stream that
 * is furthest behind, then held the sound back as far.
 *
 * Segment and clusters are of unknown size (a live stream); timestamps are in milliseconds.
 * Block headers are returned apart from the payload so a picture is written from its own
 * buffer, never copied.
 */

/** Track numbers of the stream. */
export const mkvVideoTrack = 1;
export const mkvAudioTrack = 2;

/** A cluster is started at least this often, in ms: block timestamps are relative to it. */
const clusterSpanMs = 5000;

/** What the stream carries. */
export interface RawMkvOptions {
  /** Picture size, in pixels. */
  width: number;
  height: number;
  /**
   * Pictures per second: the video track's default duration, from which ffmpeg takes the
   * encoder's frame rate (x264's rate control spends the bitrate over it; without it ffmpeg
   * took the millisecond time base for a rate, and a 2000 kbit/s output came out at 66).
   */
  fps: number;
  /** PCM sample rate, in Hz, and interleaved channels. */
  sampleRate: number;
  channels: number;
}

/** Writes the header and blocks of one live raw Matroska stream. */
export class RawMkvWriter {
  #clusterMs: number | undefined;

  constructor(private readonly options: RawMkvOptions) {}

  /** The EBML header, the segment's start, its info and its two tracks. */
  header(): Uint8Array {
    const { width, height, fps, sampleRate, channels } = this.options;
    const ebml = element(0x1a45dfa3, [
      uintElement(0x4286, 1), // EBMLVersion
      uintElement(0x42f7, 1), // EBMLReadVersion
      uintElement(0x42f2, 4), // EBMLMaxIDLength
      uintElement(0x42f3, 8), // EBMLMaxSizeLength
      stringElement(0x4282, "matroska"), // DocType
      uintElement(0x4287, 4), // DocTypeVersion
      uintElement(0x4285, 2), // DocTypeReadVersion
    ]);
    const info = element(0x1549a966, [
      uintElement(0x2ad7b1, 1_000_000), // TimestampScale: 1 ms
      stringElement(0x4d80, "mediaserver"), // MuxingApp
      stringElement(0x5741, "mediaserver"), // WritingApp
    ]);
    const tracks = element(0x1654ae6b, [
      element(0xae, [
        uintElement(0xd7, mkvVideoTrack), // TrackNumber
        uintElement(0x73c5, mkvVideoTrack), // TrackUID
        uintElement(0x83, 1), // TrackType: video
        stringElement(0x86, "V_UNCOMPRESSED"),
        uintElement(0x23e383, Math.round(1e9 / fps)), // DefaultDuration, in ns
        element(0xe0, [
          uintElement(0xb0, width), // PixelWidth
          uintElement(0xba, height), // PixelHeight
          bytesElement(0x2eb524, new TextEncoder().encode("I420")), // ColourSpace
        ]),
      ]),
      element(0xae, [
        uintElement(0xd7, mkvAudioTrack),
        uintElement(0x73c5, mkvAudioTrack),
        uintElement(0x83, 2), // TrackType: audio
        stringElement(0x86, "A_PCM/INT/LIT"),
        element(0xe1, [
          floatElement(0xb5, sampleRate), // SamplingFrequency
          uintElement(0x9f, channels), // Channels
          uintElement(0x6264, 16), // BitDepth
        ]),
      ]),
    ]);
    return concat([ebml, unknownSizeStart(0x18538067), info, tracks]);
  }

  /**
   * The bytes in front of a block of `payloadBytes` of track `track` at `timeMs` (whole ms,
   * after the track's previous block): a new cluster when due, and the block's header.
   */
  blockHeader(track: number, timeMs: number, payloadBytes: number): Uint8Array {
    const parts: Uint8Array[] = [];
    // Relative times are signed 16-bit: a block of one track a little before the cluster's
    // start (the other track's block opened it) stays in it.
    if (this.#clusterMs === undefined || Math.abs(timeMs - this.#clusterMs) >= clusterSpanMs) {
      this.#clusterMs = timeMs;
      parts.push(unknownSizeStart(0x1f43b675), uintElement(0xe7, Math.max(0, timeMs)));
    }
    const relative = timeMs - this.#clusterMs;
    // SimpleBlock: track number, 16-bit relative timestamp, flags (keyframe).
    const head = new Uint8Array([0x80 | track, (relative >> 8) & 0xff, relative & 0xff, 0x80]);
    parts.push(id(0xa3), size(head.length + payloadBytes), head);
    return concat(parts);
  }
}

function id(value: number): Uint8Array {
  const bytes: number[] = [];
  for (let v = value; v > 0; v = Math.floor(v / 256)) bytes.unshift(v & 0xff);
  return new Uint8Array(bytes);
}

/** An EBML size in 8 bytes (any length a picture can have). */
function size(value: number): Uint8Array {
  const out = new Uint8Array(8);
  out[0] = 0x01;
  let v = value;
  for (let i = 7; i >= 1; i--) {
    out[i] = v & 0xff;
    v = Math.floor(v / 256);
  }
  return out;
}

function element(elementId: number, children: Uint8Array[]): Uint8Array {
  const body = concat(children);
  return concat([id(elementId), size(body.length), body]);
}

function uintElement(elementId: number, value: number): Uint8Array {
  const bytes: number[] = [];
  for (let v = value; v > 0 || bytes.length === 0; v = Math.floor(v / 256)) bytes.unshift(v & 0xff);
  return element(elementId, [new Uint8Array(bytes)]);
}

function floatElement(elementId: number, value: number): Uint8Array {
  const body = new Uint8Array(8);
  new DataView(body.buffer).setFloat64(0, value);
  return element(elementId, [body]);
}

function stringElement(elementId: number, value: string): Uint8Array {
  return element(elementId, [new TextEncoder().encode(value)]);
}

function bytesElement(elementId: number, value: Uint8Array): Uint8Array {
  return element(elementId, [value]);
}

/** An element of unknown size (the stream goes on): its ID and the all-ones size. */
function unknownSizeStart(elementId: number): Uint8Array {
  return concat([id(elementId), new Uint8Array([0x01, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff])]);
}

function concat(parts: Uint8Array[]): Uint8Array {
  const out = new Uint8Array(parts.reduce((n, p) => n + p.length, 0));
  let at = 0;
  for (const part of parts) {
    out.set(part, at);
    at += part.length;
  }
  return out;
}
