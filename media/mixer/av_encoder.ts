/**
 * A mixer's output encoded by one ffmpeg: the composed pictures to H.264 and the mixed sound
 * to Opus, both in one MPEG-TS on its stdout. A separate audio encoder was one more process
 * per mixer, with its own pipes read and written on the server's event loop; the CLI's
 * graph the mixer is measured against encodes both in one process too.
 *
 * Both go in on its stdin as one live Matroska stream of raw pictures and PCM, each block
 * stamped with its time on the mixer's clock (raw_mkv.ts tells why raw inputs would not do).
 * Video frames come back in picture order (no reordering, none dropped or repeated by
 * ffmpeg), each matched to the picture of its time; audio frames are placed from the first
 * PCM sample written, as PcmEncoder places them. Native engine only: the caller keeps the
 * separate encoders otherwise.
 */
import type { Logger } from "../../core/log.ts";
import { codecArgs } from "../engine/audio_conversion.ts";
import type { CodecEngine, LiveJob } from "../engine/engine.ts";
import { TsDemuxer } from "../formats/mpegts/demuxer.ts";
import type { MediaFrame, Track } from "../frame.ts";
import type {
  RawVideoFrame,
  VideoEncoder,
  VideoEncoderSettings,
} from "../transcoder/video_codec.ts";
import { i420Bytes, setH264Config } from "../transcoder/video_encoder.ts";
import { videoEncoderArgs } from "../transcoder/video_encoder_args.ts";
import type { PcmFormat } from "./pcm_codec.ts";
import { mkvAudioTrack, mkvVideoTrack, RawMkvWriter } from "./raw_mkv.ts";

/**
 * Pictures that may wait for ffmpeg's stdin before pushes are refused: 100 ms at 30 fps
 * (late video is useless), as the streaming video encoder allows a 720p output.
 */
const maxPendingPictures = 3;
/**
 * Writes that may wait for ffmpeg's stdin: the pictures' (two each: block header, picture)
 * and 1 s of 20 ms sound frames beside them.
 */
const maxPendingPcmWrites = 50;
/** All of them, and the stream's header: a picture's two writes always find room. */
const maxPendingWrites = 2 * maxPendingPictures + maxPendingPcmWrites + 1;

/** What an AvEncoder is built from. */
export interface AvEncoderOptions {
  engine: CodecEngine;
  /** The output pictures' size, rate and bitrate (H.264 only). */
  video: VideoEncoderSettings;
  /** The output video track: frames carry its id, its SPS/PPS are set from keyframes. */
  videoTrack: Track;
  format: PcmFormat;
  /** The output audio track (OPUS at the format's rate): frames carry its id. */
  audioTrack: Track;
  /** Audio bitrate in bit/s (0: the codec's default). */
  audioBitrate: number;
  /** Receives each encoded frame, video and audio, on the timelines of the pushes. */
  onFrame: (frame: MediaFrame) => void;
  log: Logger;
}

/** One ffmpeg encoding a mixer's pictures and sound. */
export class AvEncoder {
  /** The video side, as the composer's output expects an encoder. */
  readonly video: VideoEncoder;
  #options: AvEncoderOptions;
  #job: LiveJob;
  #mkv: RawMkvWriter;
  /** Pictures written whose bytes ffmpeg has not taken yet. */
  #pendingPictures = 0;
  /** Sound frames written that ffmpeg has not taken yet. */
  #pendingPcm = 0;
  readonly #pcmWritten = () => {
    this.#pendingPcm--;
  };
  /** Times (ms on the mixer's clock) and pts of the pictures written, not yet come back. */
  #pictures: { ms: number; pts: number }[] = [];
  #lastVideoMs = -Infinity;
  #lastAudioMs = -Infinity;
  /** ffmpeg's pts (90 kHz) of the time 0 of the mixer's clock, from its first video frame. */
  #videoZero: number | undefined;
  /** Sample index of the first PCM pushed: the audio timeline starts there. */
  #firstPcmPts: number | undefined;
  #audioOffset: number | undefined;
  #reading: Promise<void>;
  #closed = false;
  #closing: Promise<void> | undefined;
  #videoDropped = 0;
  /** PCM frames refused (ffmpeg behind or gone). */
  pcmDropped = 0;

  /** Starts ffmpeg; throws the engine's error when it cannot start. */
  constructor(options: AvEncoderOptions) {
    if (!options.engine.start) throw new Error("the A/V encoder needs an engine that streams");
    if (options.video.codec !== "H264") throw new Error("the A/V encoder makes H.264 only");
    this.#options = options;
    const { video, format, audioTrack, audioBitrate } = options;
    const codec = videoEncoderArgs(video, options.engine.kind).outputArgs;
    this.#job = options.engine.start({
      // The format is in the stream's header: no probing, which would wait for data.
      inputArgs: ["-probesize", "32", "-analyzeduration", "0", "-f", "matroska"],
      outputArgs: [
        ...["-map", "0:v", "-map", "0:a"],
        // The video encoder's arguments, the format last.
        ...codec.slice(0, -2),
        // codecArgs is for an audio-only output: its `-vn` would drop the pictures here.
        ...codecArgs(audioTrack, audioBitrate).filter((a) => a !== "-vn"),
        // One PES per audio frame.
        ...["-pes_payload_size", "0"],
        ...codec.slice(-2),
      ],
      maxPendingWrites,
    });
    this.#mkv = new RawMkvWriter({ ...video, ...format });
    this.#job.write(this.#mkv.header());
    const dropped = () => this.#videoDropped;
    this.video = {
      push: (picture, release) => this.#pushPicture(picture, release),
      get dropped() {
        return dropped();
      },
      close: () => this.close(),
    };
    this.#reading = this.#read();
  }

  /** Encodes interleaved PCM whose first sample frame is at `pts` (in samples). */
  push(samples: Int16Array, pts: number): void {
    if (this.#closed) return;
    const ms = Math.max(
      this.#lastAudioMs + 1,
      Math.round(pts * 1000 / this.#options.format.sampleRate),
    );
    const header = this.#mkv.blockHeader(mkvAudioTrack, ms, samples.byteLength);
    // One write, header and samples (copied: the caller reuses its buffer for the next frame).
    const block = new Uint8Array(header.length + samples.byteLength);
    block.set(header);
    block.set(
      new Uint8Array(samples.buffer, samples.byteOffset, samples.byteLength),
      header.length,
    );
    if (this.#pendingPcm >= maxPendingPcmWrites || !this.#job.write(block, this.#pcmWritten)) {
      this.pcmDropped++;
      return;
    }
    this.#pendingPcm++;
    this.#lastAudioMs = ms;
    this.#firstPcmPts ??= pts;
  }

  /** Stops ffmpeg; nothing is emitted afterwards (idempotent). */
  close(): Promise<void> {
    this.#closing ??= (async () => {
      this.#closed = true;
      await this.#job.close();
      await this.#reading;
    })();
    return this.#closing;
  }

  #pushPicture(picture: RawVideoFrame, release?: () => void): boolean {
    const { width, height } = this.#options.video;
    if (this.#closed) return false;
    if (
      picture.width !== width || picture.height !== height ||
      picture.data.length !== i420Bytes(width, height)
    ) {
      this.#options.log.warn("A/V encoder refused a picture of another size", {
        picture: `${picture.width}x${picture.height}`,
      });
      this.#videoDropped++;
      return false;
    }
    if (this.#pendingPictures >= maxPendingPictures) {
      this.#videoDropped++;
      return false;
    }
    const ms = Math.max(this.#lastVideoMs + 1, Math.round(picture.pts * 1000 / 90000));
    const header = this.#mkv.blockHeader(mkvVideoTrack, ms, picture.data.length);
    // Header and picture written apart: the picture goes from its own buffer, uncopied.
    if (!this.#job.write(header)) {
      this.#videoDropped++;
      return false;
    }
    this.#pendingPictures++;
    const written = () => {
      this.#pendingPictures--;
      release?.();
    };
    // Taken after its header was (the same queue, and ffmpeg has not exited meanwhile).
    this.#job.write(picture.data, written);
    this.#lastVideoMs = ms;
    this.#pictures.push({ ms, pts: picture.pts });
    return true;
  }

  async #read(): Promise<void> {
    const { log } = this.#options;
    const demuxer = new TsDemuxer();
    try {
      for await (const chunk of this.#job.output) {
        if (this.#closed) break;
        for (const frame of demuxer.push(chunk)) {
          if (this.#closed) break;
          if (frame.codec === "H264") this.#videoFrame(frame);
          else if (frame.codec === this.#options.audioTrack.codec) this.#audioFrame(frame);
        }
      }
    } catch (err) {
      if (!this.#closed) log.warn("A/V encoder output failed", { err });
    }
    if (!this.#closed) {
      log.warn("A/V encoder ended early", { errors: this.#job.errors });
      await this.#job.close();
    }
  }

  /** A video frame on the pts of the picture of its time. */
  #videoFrame(frame: MediaFrame): void {
    const { videoTrack, onFrame, log } = this.#options;
    // ffmpeg keeps the blocks' times apart from a start of its own (the first picture's,
    // or earlier by the audio encoder's delay): the first frame is the first picture.
    this.#videoZero ??= frame.pts - (this.#pictures[0]?.ms ?? 0) * 90;
    const ms = Math.round((frame.pts - this.#videoZero) / 90);
    // Pictures before its time got no frame (never expected: ffmpeg drops none).
    while (this.#pictures.length > 0 && this.#pictures[0].ms < ms) {
      this.#pictures.shift();
      log.warn("A/V encoder skipped a picture");
    }
    const picture = this.#pictures[0];
    if (!picture || picture.ms !== ms) {
      log.warn("A/V encoder frame matches no picture", { ms });
      return;
    }
    this.#pictures.shift();
    if (frame.keyframe) setH264Config(videoTrack, frame.data);
    onFrame({
      ...frame,
      trackId: videoTrack.id,
      codec: "H264",
      pts: picture.pts,
      dts: picture.pts,
    });
  }

  /** An audio frame placed from the first sample pushed (ffmpeg restamps from its zero). */
  #audioFrame(frame: MediaFrame): void {
    const { audioTrack, onFrame } = this.#options;
    this.#audioOffset ??= (this.#firstPcmPts ?? 0) - frame.pts;
    const pts = frame.pts + this.#audioOffset;
    onFrame({ ...frame, trackId: audioTrack.id, pts, dts: pts });
  }
}
