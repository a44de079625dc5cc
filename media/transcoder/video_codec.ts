/**
 * The two engine-backed ends of a transcoding pipeline: a decoder that turns a source's
 * compressed video into raw I420 pictures, and an encoder that turns raw pictures back into
 * compressed frames. Each has a streaming implementation (one native ffmpeg for its whole
 * life, raw frames on pipes) and a chunked one for engines that only take whole inputs
 * (ffmpeg.wasm: a GOP or about a second per run).
 *
 * Timestamps: every raw picture and every frame carries its pts in 90 kHz on the source's
 * timeline. ffmpeg restamps what it writes, so both ends map its output back onto the pts of
 * the pictures they were given (decoders emit in presentation order; encoders run without
 * B-frames, so one frame comes out per picture, in order).
 */
import type { Logger } from "../../core/log.ts";
import type { CodecEngine } from "../engine/engine.ts";
import type { MediaFrame, Track } from "../frame.ts";
import type { RawVideoFrame } from "../mixer/video_composer.ts";
import type { PictureSize } from "./video_decoder_input.ts";

export type { RawVideoFrame };

/** Clock of every video timestamp of the pipeline, in Hz. */
export const pipelineVideoClockHz = 90000;

/** What a video decoder is built from. */
export interface VideoDecoderOptions {
  engine: CodecEngine;
  /** The source's video track (H264, H265 or VP8); its frames are passed to `push`. */
  track: Track;
  /** Receives each decoded picture, in presentation order, pts as given to `push`. */
  onPicture: (picture: RawVideoFrame) => void;
  log: Logger;
  /**
   * Largest picture size wanted: the engine scales each picture down to fit in it (aspect
   * kept, see `scaledSize`) where it can stream; absent, or on engines that decode a chunk
   * at a time, pictures come at the source's size.
   */
  box?: PictureSize;
}

/** Compressed video in, raw I420 pictures out. */
export interface VideoDecoder {
  /** Decodes one access unit (decode order, as the source's reader gives it). */
  push(frame: MediaFrame): void;
  /** Input frames not decoded: the engine was behind, or the frame came before a keyframe. */
  readonly dropped: number;
  /** Stops the engine's process or Worker; nothing is emitted afterwards. */
  close(): Promise<void>;
}

/** Video codecs the pipeline encodes to. */
export type EncodedVideoCodec = "H264" | "VP8";

/** What an encoder produces. */
export interface VideoEncoderSettings {
  codec: EncodedVideoCodec;
  /** Picture size in pixels, both even. */
  width: number;
  height: number;
  /** Output frames per second (the pictures come at this rate). */
  fps: number;
  /** Frames from one keyframe to the next. */
  keyFrameInterval: number;
  /** Target bitrate in kbit/s; 0 lets the encoder choose for the size. */
  bitrateKbps: number;
}

/** What a video encoder is built from. */
export interface VideoEncoderOptions {
  engine: CodecEngine;
  settings: VideoEncoderSettings;
  /** The output track: frames carry its id; the encoder sets its `config` (H.264 SPS/PPS). */
  track: Track;
  /**
   * Receives each encoded frame, pts = dts = the pts of its picture. H.264 payloads are
   * length-prefixed NAL units and every keyframe carries SPS and PPS.
   */
  onFrame: (frame: MediaFrame) => void;
  log: Logger;
}

/** Raw I420 pictures in, compressed frames out. */
export interface VideoEncoder {
  /**
   * Encodes one picture of `settings`' size; false when it was dropped (the engine is
   * behind). The encoder owns the picture's bytes from then on (they may wait in a pipe)
   * until it calls `release`, if it does (a streaming engine, once they are written): the
   * caller may then reuse their buffer. Not called when the picture was dropped.
   */
  push(picture: RawVideoFrame, release?: () => void): boolean;
  /** Pictures dropped because the engine was behind. */
  readonly dropped: number;
  /** Stops the engine's process or Worker; nothing is emitted afterwards. */
  close(): Promise<void>;
}
