/**
 * Media frames of a Stream as RTMP chunk bytes, made once per frame and shared by every RTMP
 * player and push of the stream: all of them send on the same chunk streams, message stream
 * and chunk size with absolute timestamps, so the bytes do not depend on the receiver.
 * Players (through their stream's `RtmpFanout`) get audio held back and joined to the next
 * video frame: one write per picture instead of one per frame is most of what a player costs
 * the server.
 */
import { ParseError } from "../../core/errors.ts";
import { buildAvcC } from "../codecs/h264.ts";
import { buildHvcC } from "../codecs/h265.ts";
import type { AudioCodec, MediaFrame, Track, VideoCodec } from "../frame.ts";
import type { AmfObject } from "../protocols/rtmp/amf0.ts";
import { joinChunkBytes, outChunkBytes, writeChunks } from "../protocols/rtmp/chunk_writer.ts";
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

/**
 * Longest span of audio held back for the next video frame, in milliseconds: bounds the audio
 * delay when pictures are sparse or stop.
 */
const audioHoldMaxMs = 100;
/**
 * Distance from the held audio beyond which a frame is not its continuation, in milliseconds
 * (the held audio is left over from before a gap or from a reader far behind, and dropped).
 */
const heldAudioStaleMs = 1000;
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
  #header!: Uint8Array;
  #publishHeader!: Uint8Array;
  #headerVersion = 0;
  /** The track configurations the headers were made from. */
  #headerConfigs: [unknown, unknown] = [undefined, undefined];
  #cache = new WeakMap<MediaFrame, Uint8Array>();
  #heldAudio: Uint8Array[] = [];
  /** Timestamp of the first held audio frame, in milliseconds. */
  #heldSinceMs = 0;

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
    this.#makeHeaders();
  }

  /** Chunk bytes of onMetaData and the sequence headers, sent to a receiver before any frame. */
  get header(): Uint8Array {
    this.#refreshHeaders();
    return this.#header;
  }

  /** Same as `header` but with `@setDataFrame`, as a publisher sends it to a server. */
  get publishHeader(): Uint8Array {
    this.#refreshHeaders();
    return this.#publishHeader;
  }

  /**
   * Changes when a track's configuration does: an encoder sets its parameter sets with its
   * first frame, after readers may have sent the headers without them. A sender whose
   * version is behind sends the headers again before its next frame.
   */
  get headerVersion(): number {
    this.#refreshHeaders();
    return this.#headerVersion;
  }

  #refreshHeaders(): void {
    const [video, audio] = this.#headerConfigs;
    if (this.video?.config !== video || this.audio?.config !== audio) this.#makeHeaders();
  }

  #makeHeaders(): void {
    const configs = this.#configMessages();
    this.#header = joinChunkBytes([this.#metaChunks(false), ...configs]);
    this.#publishHeader = joinChunkBytes([this.#metaChunks(true), ...configs]);
    this.#headerConfigs = [this.video?.config, this.audio?.config];
    this.#headerVersion++;
  }

  /** Chunk bytes of a frame, or undefined for a frame of a track RTMP does not carry. */
  chunks(frame: MediaFrame): Uint8Array | undefined {
    let bytes = this.#cache.get(frame);
    if (bytes) return bytes;
    bytes = this.#serialize(frame, frame.data);
    if (bytes) this.#cache.set(frame, bytes);
    return bytes;
  }

  /**
   * What players write for `frame`, given each frame of the stream once and in order:
   * undefined for audio held back (it goes out with the next video frame, or once
   * `audioHoldMaxMs` of it is held) and for a track RTMP does not carry.
   */
  playChunks(frame: MediaFrame): Uint8Array | undefined {
    if (!this.video) return this.chunks(frame);
    const video = frame.trackId === this.video.id;
    if (!video && frame.trackId !== this.audio?.id) return undefined;
    const ms = toMs(frame.dts, (video ? this.video : this.audio!).clockRate);
    const held = this.#heldAudio;
    if (held.length > 0 && Math.abs(ms - this.#heldSinceMs) > heldAudioStaleMs) held.length = 0;
    let out: Uint8Array;
    if (video) {
      // Serialized right after the held audio rather than through `chunks`: one copy of each
      // picture lives until the frame is collected, not two.
      out = this.#serialize(frame, frame.data, held)!;
    } else {
      if (held.length === 0) this.#heldSinceMs = ms;
      // Not through `chunks`: the bytes are copied into the bundle, so none is kept per frame.
      held.push(this.#serialize(frame, frame.data)!);
      if (ms - this.#heldSinceMs < audioHoldMaxMs) return undefined;
      out = joinChunkBytes(held);
    }
    held.length = 0;
    return out;
  }

  /** Forgets the audio held back, for players that start again on a later part of the stream. */
  dropHeldAudio(): void {
    this.#heldAudio.length = 0;
  }

  /** What a player writes after the last frame of an ended stream: the audio still held back. */
  endChunks(): Uint8Array | undefined {
    return this.#heldAudio.length > 0 ? joinChunkBytes(this.#heldAudio) : undefined;
  }

  /** Chunk bytes of an audio frame with other data in place of its own (mute, mixing). */
  audioChunks(frame: MediaFrame, data: Uint8Array): Uint8Array | undefined {
    return this.#serialize(frame, data);
  }

  /** Chunk bytes of `frame` carrying `data`, after the chunk bytes of `lead`. */
  #serialize(
    frame: MediaFrame,
    data: Uint8Array,
    lead: readonly Uint8Array[] = [],
  ): Uint8Array | undefined {
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
      return writeChunks(
        ChunkStreamId.video,
        {
          type: MessageType.video,
          streamId: mediaStreamId,
          timestamp: dtsMs,
          payload,
        },
        outChunkBytes,
        lead,
      );
    }
    if (this.audio && frame.trackId === this.audio.id) {
      const codec = this.audio.codec as AudioCodec;
      const header = audioTagHeaderBytes(codec);
      const payload = new Uint8Array(header + data.length);
      writeAudioFrameHeader(payload, codec);
      payload.set(data, header);
      return writeChunks(
        ChunkStreamId.audio,
        {
          type: MessageType.audio,
          streamId: mediaStreamId,
          timestamp: toMs(frame.dts, this.audio.clockRate),
          payload,
        },
        outChunkBytes,
        lead,
      );
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
