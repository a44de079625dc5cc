/**
 * The binary records of the Web SDK's MSE player (packetization version 2, see
 * wcs-client-protocol.md §8): the SDK demuxes these in the browser and remuxes them to fMP4
 * for Media Source Extensions itself, so the server sends FLV-like tag bodies, not fMP4.
 *
 * A record is a type byte (9 video, 8 audio), a signed 32-bit timestamp in ms (the SDK uses
 * it as both PTS and DTS), a 32-bit payload length and the payload, all big-endian; one
 * WebSocket message may carry several records back to back. Video payloads are the AVC tag
 * bodies of FLV (0x17 0x00 + avcC, or 0x17/0x27 0x01 + length-prefixed NAL units); audio
 * payloads are 0x00 + AudioSpecificConfig or 0x01 + one raw AAC frame (no FLV sound byte).
 */
import { buildAvcC } from "../codecs/h264.ts";
import type { MediaFrame, Track } from "../frame.ts";
import {
  buildVideoConfigTag,
  videoTagHeaderBytes,
  writeVideoFrameHeader,
} from "../protocols/rtmp/flv_tag.ts";
import type { Stream } from "../stream.ts";

/** Record type bytes (the FLV tag types). */
export const mseRecordType = { audio: 8, video: 9 } as const;
/** Bytes before a record's payload: type, timestamp, length. */
export const mseRecordHeaderBytes = 9;
/** First payload byte of an audio record carrying the AudioSpecificConfig. */
const audioConfigMarker = 0;
/** First payload byte of an audio record carrying a raw AAC frame. */
const audioFrameMarker = 1;

/** A record with room for `payloadBytes` of payload after its header, which the caller fills. */
function record(type: number, timestampMs: number, payloadBytes: number): Uint8Array {
  const out = new Uint8Array(mseRecordHeaderBytes + payloadBytes);
  const view = new DataView(out.buffer);
  out[0] = type;
  // The SDK reads a signed 32-bit value; setInt32 wraps like ToInt32.
  view.setInt32(1, Math.round(timestampMs) | 0);
  view.setUint32(5, payloadBytes);
  return out;
}

/** Milliseconds of a track-clock time. */
function toMs(time: number, clockRate: number): number {
  return time * 1000 / clockRate;
}

/** The tracks the MSE player carries: the first H.264 video and the first AAC audio. */
export function mseTracks(tracks: readonly Track[]): { video?: Track; audio?: Track } {
  return {
    video: tracks.find((t) => t.kind === "video" && t.codec === "H264"),
    audio: tracks.find((t) => t.kind === "audio" && t.codec === "AAC"),
  };
}

/**
 * Serializes a stream's frames to MSE records, once per frame for every MSE player of the
 * stream (the records do not depend on the player).
 */
export class MsePackager {
  readonly video: Track | undefined;
  readonly audio: Track | undefined;
  #cache = new WeakMap<MediaFrame, Uint8Array>();

  static #byStream = new WeakMap<Stream, MsePackager>();

  /** The packager shared by every MSE player of `stream`. */
  static of(stream: Stream): MsePackager {
    let packager = MsePackager.#byStream.get(stream);
    if (!packager) {
      packager = new MsePackager(stream.tracks);
      MsePackager.#byStream.set(stream, packager);
    }
    return packager;
  }

  constructor(tracks: readonly Track[]) {
    const { video, audio } = mseTracks(tracks);
    this.video = video;
    this.audio = audio;
  }

  /**
   * The configurations the header records are made from: a sender whose last header was made
   * from others sends the header again (an encoder may set its parameter sets late).
   */
  get configs(): readonly [unknown, unknown] {
    return [this.video?.config, this.audio?.config];
  }

  /**
   * The decoder configuration records (avcC, AudioSpecificConfig) stamped `timestampMs`: the
   * time of the frame that follows, since the SDK resets its remuxer, dropping what it had
   * queued, on a video timestamp jump of more than 5 s.
   */
  header(timestampMs: number): Uint8Array[] {
    const out: Uint8Array[] = [];
    const video = this.video?.config;
    if (video?.codec === "H264" && video.sps.length > 0 && video.pps.length > 0) {
      const tag = buildVideoConfigTag("H264", buildAvcC(video.sps, video.pps));
      const rec = record(mseRecordType.video, timestampMs, tag.length);
      rec.set(tag, mseRecordHeaderBytes);
      out.push(rec);
    }
    const audio = this.audio?.config;
    if (audio?.codec === "AAC") {
      const rec = record(mseRecordType.audio, timestampMs, 1 + audio.asc.length);
      rec[mseRecordHeaderBytes] = audioConfigMarker;
      rec.set(audio.asc, mseRecordHeaderBytes + 1);
      out.push(rec);
    }
    return out;
  }

  /** The record of a frame, or undefined for a frame of a track the player does not carry. */
  record(frame: MediaFrame): Uint8Array | undefined {
    let bytes = this.#cache.get(frame);
    if (bytes) return bytes;
    bytes = this.#serialize(frame);
    if (bytes) this.#cache.set(frame, bytes);
    return bytes;
  }

  /** Milliseconds of a frame's decode time, on the timeline records carry. */
  timestampMs(frame: MediaFrame): number {
    const track = frame.trackId === this.video?.id ? this.video : this.audio;
    return track ? toMs(frame.dts, track.clockRate) : 0;
  }

  #serialize(frame: MediaFrame): Uint8Array | undefined {
    if (this.video && frame.trackId === this.video.id) {
      const header = videoTagHeaderBytes("H264");
      const rec = record(mseRecordType.video, this.timestampMs(frame), header + frame.data.length);
      // Composition offsets are ignored by the SDK (it uses the timestamp as PTS and DTS).
      writeVideoFrameHeader(rec.subarray(mseRecordHeaderBytes), "H264", frame.keyframe, 0);
      rec.set(frame.data, mseRecordHeaderBytes + header);
      return rec;
    }
    if (this.audio && frame.trackId === this.audio.id) {
      const rec = record(mseRecordType.audio, this.timestampMs(frame), 1 + frame.data.length);
      rec[mseRecordHeaderBytes] = audioFrameMarker;
      rec.set(frame.data, mseRecordHeaderBytes + 1);
      return rec;
    }
    return undefined;
  }
}
