/**
 * Media frames of a Stream as RTMP chunk bytes, made once per frame and shared by every RTMP
 * player and push of the stream: all of them send on the same chunk streams, message stream
 * and chunk size with absolute timestamps, so the bytes do not depend on the receiver.
 */
import { ParseError } from "../../core/errors.ts";
import { buildAvcC } from "../codecs/h264.ts";
import { buildHvcC } from "../codecs/h265.ts";
import type { AudioCodec, MediaFrame, Track, VideoCodec } from "../frame.ts";
import type { AmfObject } from "../protocols/rtmp/amf0.ts";
import { outChunkBytes, writeChunks } from "../protocols/rtmp/chunk_writer.ts";
import { buildMetaData } from "../protocols/rtmp/command.ts";
import {
  audioTagHeaderBytes,
  buildAudioConfigTag,
  buildVideoConfigTag,
  metadataAudioCodecId,
  metadataVideoCodecId,
  videoTagHeaderBytes,
  writeAudioFrameHeader,
  writeVideoFrameHeader,
} from "../protocols/rtmp/flv_tag.ts";
import { ChunkStreamId, MessageType } from "../protocols/rtmp/message.ts";
import { mediaStreamId } from "../protocols/rtmp/server.ts";
import type { Stream } from "../stream.ts";

const rtmpVideoCodecs = new Set<string>(["H264", "H265"]);
const rtmpAudioCodecs = new Set<string>(["AAC", "OPUS", "PCMU", "PCMA"]);

/** The tracks of a stream RTMP can carry: the first video and first audio of a known codec. */
function rtmpTracks(tracks: readonly Track[]): { video?: Track; audio?: Track } {
  return {
    video: tracks.find((t) => t.kind === "video" && rtmpVideoCodecs.has(t.codec)),
    audio: tracks.find((t) => t.kind === "audio" && rtmpAudioCodecs.has(t.codec)),
  };
}

/** Milliseconds of a track-clock time, never negative (RTMP timestamps are unsigned). */
function toMs(time: number, clockRate: number): number {
  return Math.max(0, Math.round(time * 1000 / clockRate));
}

/** Serializes the frames of one stream to RTMP chunks, caching them per frame. */
export class RtmpPackager {
  readonly video: Track | undefined;
  readonly audio: Track | undefined;
  /** Chunk bytes of onMetaData and the sequence headers, sent to a receiver before any frame. */
  readonly header: Uint8Array;
  /** Same as `header` but with `@setDataFrame`, as a publisher sends it to a server. */
  readonly publishHeader: Uint8Array;
  #cache = new WeakMap<MediaFrame, Uint8Array>();

  static #byStream = new WeakMap<Stream, RtmpPackager>();

  /** The packager shared by every RTMP receiver of `stream`. */
  static of(stream: Stream): RtmpPackager {
    let packager = RtmpPackager.#byStream.get(stream);
    if (!packager) {
      packager = new RtmpPackager(stream.tracks);
      RtmpPackager.#byStream.set(stream, packager);
    }
    return packager;
  }

  constructor(tracks: readonly Track[]) {
    const { video, audio } = rtmpTracks(tracks);
    this.video = video;
    this.audio = audio;
    const configs = this.#configMessages();
    this.header = concat([this.#metaChunks(false), ...configs]);
    this.publishHeader = concat([this.#metaChunks(true), ...configs]);
  }

  /** Chunk bytes of a frame, or undefined for a frame of a track RTMP does not carry. */
  chunks(frame: MediaFrame): Uint8Array | undefined {
    let bytes = this.#cache.get(frame);
    if (bytes) return bytes;
    bytes = this.#serialize(frame, frame.data);
    if (bytes) this.#cache.set(frame, bytes);
    return bytes;
  }

  /** Chunk bytes of an audio frame with other data in place of its own (mute, mixing). */
  audioChunks(frame: MediaFrame, data: Uint8Array): Uint8Array | undefined {
    return this.#serialize(frame, data);
  }

  #serialize(frame: MediaFrame, data: Uint8Array): Uint8Array | undefined {
    if (this.video && frame.trackId === this.video.id) {
      const codec = this.video.codec as VideoCodec;
      const header = videoTagHeaderBytes(codec);
      const payload = new Uint8Array(header + data.length);
      const dtsMs = toMs(frame.dts, this.video.clockRate);
      writeVideoFrameHeader(
        payload,
        codec,
        frame.keyframe,
        toMs(frame.pts, this.video.clockRate) - dtsMs,
      );
      payload.set(data, header);
      return writeChunks(ChunkStreamId.video, {
        type: MessageType.video,
        streamId: mediaStreamId,
        timestamp: dtsMs,
        payload,
      }, outChunkBytes);
    }
    if (this.audio && frame.trackId === this.audio.id) {
      const codec = this.audio.codec as AudioCodec;
      const header = audioTagHeaderBytes(codec);
      const payload = new Uint8Array(header + data.length);
      writeAudioFrameHeader(payload, codec);
      payload.set(data, header);
      return writeChunks(ChunkStreamId.audio, {
        type: MessageType.audio,
        streamId: mediaStreamId,
        timestamp: toMs(frame.dts, this.audio.clockRate),
        payload,
      }, outChunkBytes);
    }
    return undefined;
  }

  #metaChunks(withSetDataFrame: boolean): Uint8Array {
    const meta: AmfObject = { duration: 0 };
    if (this.video) {
      meta.width = this.video.width ?? 0;
      meta.height = this.video.height ?? 0;
      meta.videocodecid = metadataVideoCodecId(this.video.codec as VideoCodec);
    }
    if (this.audio) {
      meta.audiocodecid = metadataAudioCodecId(this.audio.codec as AudioCodec);
      meta.audiosamplerate = this.audio.sampleRate ?? this.audio.clockRate;
      meta.stereo = (this.audio.channels ?? 1) > 1;
    }
    return writeChunks(ChunkStreamId.data, {
      type: MessageType.dataAmf0,
      streamId: mediaStreamId,
      timestamp: 0,
      payload: buildMetaData(meta, withSetDataFrame),
    }, outChunkBytes);
  }

  #configMessages(): Uint8Array[] {
    const out: Uint8Array[] = [];
    const video = this.video?.config;
    let videoRecord: Uint8Array | undefined;
    if (video?.codec === "H264") videoRecord = buildAvcC(video.sps, video.pps);
    else if (video?.codec === "H265") videoRecord = buildHvcC(video.vps, video.sps, video.pps);
    if (videoRecord) {
      out.push(writeChunks(ChunkStreamId.video, {
        type: MessageType.video,
        streamId: mediaStreamId,
        timestamp: 0,
        payload: buildVideoConfigTag(video!.codec as VideoCodec, videoRecord),
      }, outChunkBytes));
    }
    const audio = this.audio?.config;
    let audioConfig: Uint8Array | undefined;
    if (audio?.codec === "AAC") audioConfig = audio.asc;
    else if (audio?.codec === "OPUS") audioConfig = audio.head;
    if (audio && audioConfig) {
      out.push(writeChunks(ChunkStreamId.audio, {
        type: MessageType.audio,
        streamId: mediaStreamId,
        timestamp: 0,
        payload: buildAudioConfigTag(audio.codec as AudioCodec, audioConfig),
      }, outChunkBytes));
    } else if (this.audio?.codec === "AAC") {
      throw new ParseError("AAC track without an AudioSpecificConfig");
    }
    return out;
  }
}

function concat(parts: Uint8Array[]): Uint8Array {
  let size = 0;
  for (const p of parts) size += p.length;
  const out = new Uint8Array(size);
  let offset = 0;
  for (const p of parts) {
    out.set(p, offset);
    offset += p.length;
  }
  return out;
}
