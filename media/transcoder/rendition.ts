/**
 * One output profile of a decoded source: pictures resized, resampled to the output frame
 * rate and stamped with a watermark by the video kernels (in a Worker), then encoded; audio
 * passed through or converted. Output frames keep the source's timeline: video frame n of
 * the output is presented at origin + n / fps, where origin is the first picture's pts, and
 * audio keeps its own pts, so A/V stay as in sync as the source was.
 *
 * The output frame rate is driven by the source's pictures, not by a wall clock: tick n is
 * composed once a picture at or after its time has arrived, from the newest picture due by
 * then. A missing input frame therefore repeats the last picture; a gap longer than
 * `sourceGapMs` is logged and skipped rather than filled.
 */
import type { Logger } from "../../core/log.ts";
import { type AudioTarget, codecArgs, targetTrack } from "../engine/audio_conversion.ts";
import type { CodecEngine } from "../engine/engine.ts";
import { LiveTranscode } from "../engine/live_transcode.ts";
import type { MediaFrame, Track } from "../frame.ts";
import { pictureBuffers } from "../mixer/buffer_pool.ts";
import { VideoComposer } from "../mixer/video_composer.ts";
import type { PictureNeed } from "./decoded_source.ts";
import {
  type EncodedVideoCodec,
  pipelineVideoClockHz,
  type RawVideoFrame,
  type VideoEncoder,
} from "./video_codec.ts";
import { createVideoEncoder, setH264Config } from "./video_encoder.ts";
import type { FusedOutput } from "./fused_renditions.ts";
import type { WatermarkImage } from "./watermark.ts";

/** Longest source gap filled by repeating the last picture, in ms; longer ones are skipped. */
export const sourceGapMs = 2000;
/**
 * Output frames being composed at once, in seconds of output; a tick beyond is dropped (the
 * kernels are behind). Pictures come in bursts: a new reader gets the cached GOP at once,
 * and a chunked decoder (ffmpeg.wasm) a run of up to 2 s.
 */
const maxComposingSec = { streaming: 1, chunked: 2.5 };
/**
 * Longest audio is held back waiting for the video of its time, in ms: streaming engines
 * add ~150 ms to video, chunked ones (ffmpeg.wasm) a GOP plus a second and two runs.
 */
const maxAudioHoldMs = { streaming: 1000, chunked: 5000 };
/** Largest side of an output picture, in pixels. */
export const maxOutputSide = 4096;
/** Frame rate when neither the profile nor the source's pictures give one. */
const defaultFps = 30;
/** Keyframe interval when the profile gives none, in seconds. */
const defaultKeyFrameIntervalSec = 2;

/** A watermark image and where its top-left corner goes on the output, in pixels. */
export interface PlacedWatermark {
  image: WatermarkImage;
  x: number;
  y: number;
}

/** What the audio of a rendition becomes; absent: the source's audio as it is. */
export interface AudioProfile {
  codec: AudioTarget;
  /** Output sample rate in Hz (0: 48 kHz); Opus always runs at 48 kHz. */
  sampleRate: number;
  /** Output bitrate in kbit/s (0: the codec's default). */
  bitrateKbps: number;
}

/** What a rendition makes of its source. */
export interface RenditionProfile {
  /** Output size; 0 for one side keeps the source's aspect, 0 for both its size. */
  width: number;
  height: number;
  /** Output frames per second; 0 follows the source. */
  fps: number;
  /** Frames from keyframe to keyframe; 0 means two seconds' worth. */
  keyFrameInterval: number;
  videoCodec: EncodedVideoCodec;
  /** Video bitrate in kbit/s; 0 lets the encoder pick for the size. */
  bitrateKbps: number;
  audio?: AudioProfile;
}

/** What a rendition is built from. */
export interface RenditionOptions {
  engine: CodecEngine;
  profile: RenditionProfile;
  /** The source's video track, if any. */
  sourceVideo: Track | undefined;
  /** The source's audio track, if any. */
  sourceAudio: Track | undefined;
  watermark?: PlacedWatermark;
  /**
   * False keeps a rendition that could be fused on the decoder → kernels → encoder path
   * (default true: see `Rendition.fused`).
   */
  fuse?: boolean;
  /** Receives every output frame, track ids of `Rendition.tracks`. */
  onFrame: (frame: MediaFrame) => void;
  log: Logger;
}

/** Counters of a rendition. */
export interface RenditionStats {
  /** Output frames encoded. */
  encodedFrames: number;
  /**
   * Video frames dropped because a stage was behind: pictures the composer skipped, ticks
   * not composed, pictures the encoder refused.
   */
  droppedFrames: number;
  /** Source gaps longer than `sourceGapMs`. */
  sourceGaps: number;
}

/** The output size of a `width` x `height` source for a profile asking `reqW` x `reqH`. */
export function outputSize(
  width: number,
  height: number,
  reqW: number,
  reqH: number,
): { width: number; height: number } {
  const even = (n: number) => Math.max(2, Math.min(maxOutputSide, Math.round(n / 2) * 2));
  if (reqW > 0 && reqH > 0) return { width: reqW, height: reqH };
  if (reqW > 0) return { width: reqW, height: even(reqW * height / width) };
  if (reqH > 0) return { width: even(reqH * width / height), height: reqH };
  return { width: even(width), height: even(height) };
}

/** One output profile of a decoded source. */
export class Rendition {
  /** The output tracks: video (when the source has video) then audio; ids are indexes. */
  readonly tracks: Track[] = [];
  #stats = { encodedFrames: 0, droppedFrames: 0, sourceGaps: 0 };
  #options: RenditionOptions;
  #video: Track | undefined;
  #audio: Track | undefined;
  #composer: VideoComposer | undefined;
  #encoder: VideoEncoder | undefined;
  #audioTranscode: LiveTranscode | undefined;
  #watermark: PlacedWatermark | undefined;
  /**
   * Its video when made by the source's fused ffmpeg (see fused_renditions.ts): native
   * engine, H.264, no watermark, output size known from the start. Undefined otherwise,
   * and once a watermark moved it to the kernels.
   */
  #fused: FusedOutput | undefined;
  #fusedDropped = 0;
  #fps = 0;
  /** pts of the first picture: output frame n is presented at origin + n / fps. */
  #origin = 0;
  #nextTick = 0;
  #lastPicturePts = -Infinity;
  /** Pictures before the first, to measure the source's frame rate when the profile has none. */
  #firstPictures: RawVideoFrame[] = [];
  #composing = 0;
  #maxComposing = 1;
  /** The last picture when it went to the encoder as it was (no kernel work), else none. */
  #passed: RawVideoFrame | undefined;
  /** Encoder writes not done yet of each passed picture's bytes (see `#pass`). */
  #writing = new Map<Uint8Array, number>();
  /** Passed pictures' bytes also given to the composer: never recycled. */
  #kept = new WeakSet<Uint8Array>();
  /** Output time (90 kHz) up to which video has been emitted; audio waits for it. */
  #videoUntil = -Infinity;
  #heldAudio: MediaFrame[] = [];
  #closed = false;

  constructor(options: RenditionOptions) {
    this.#options = options;
    this.#watermark = options.watermark;
    const { sourceVideo, sourceAudio, profile, engine } = options;
    if (sourceVideo) {
      this.#video = {
        id: this.tracks.length,
        kind: "video",
        codec: profile.videoCodec,
        clockRate: pipelineVideoClockHz,
      };
      if (sourceVideo.width && sourceVideo.height) {
        Object.assign(
          this.#video,
          outputSize(sourceVideo.width, sourceVideo.height, profile.width, profile.height),
        );
      }
      this.tracks.push(this.#video);
      if (
        engine.start && options.fuse !== false && profile.videoCodec === "H264" &&
        !options.watermark && this.#video.width && this.#video.height
      ) {
        this.#fused = this.#fusedOutput(this.#video);
      }
    }
    if (sourceAudio) {
      const audio = profile.audio;
      const converts = audio !== undefined &&
        (audio.codec !== sourceAudio.codec ||
          (audio.sampleRate > 0 && audio.sampleRate !== sourceAudio.clockRate) ||
          audio.bitrateKbps > 0);
      this.#audio = converts
        ? { ...targetTrack(sourceAudio, audio.codec, engine, audio.sampleRate || undefined) }
        : { ...sourceAudio };
      this.#audio.id = this.tracks.length;
      this.tracks.push(this.#audio);
      if (converts) {
        this.#audioTranscode = new LiveTranscode({
          engine,
          input: sourceAudio,
          output: this.#audio,
          codecArgs: codecArgs(this.#audio, audio.bitrateKbps * 1000),
          onFrame: (frame) => this.#onAudioOut(frame),
          log: options.log.child({ conversion: `${sourceAudio.codec}>${audio.codec}` }),
        });
      }
    }
  }

  /** True while its video is made by the source's fused ffmpeg. */
  get fused(): boolean {
    return this.#fused !== undefined;
  }

  /** The fused ffmpeg's rendition of this one: frames out, gaps and losses counted. */
  #fusedOutput(video: Track): FusedOutput {
    const { profile } = this.#options;
    this.#fps = profile.fps;
    return {
      settings: {
        codec: "H264",
        width: video.width!,
        height: video.height!,
        fps: profile.fps,
        keyFrameInterval: profile.keyFrameInterval,
        bitrateKbps: profile.bitrateKbps,
      },
      onFrame: (frame) => {
        if (this.#closed || !this.#fused) return;
        if (frame.keyframe) setH264Config(video, frame.data);
        this.#onVideoOut({ ...frame, trackId: video.id, codec: "H264" });
      },
      onSourceGap: () => {
        this.#stats.sourceGaps++;
      },
      onDropped: (frames) => {
        this.#fusedDropped += frames;
      },
    };
  }

  /** Counters since start. */
  get stats(): RenditionStats {
    const stats = { ...this.#stats };
    stats.droppedFrames += this.#fusedDropped;
    // The encoder counts what it refused and what a failed run lost.
    stats.droppedFrames += this.#encoder?.dropped ?? 0;
    return stats;
  }

  /**
   * The pictures this rendition needs of its source: as large as its output (a side left to
   * the source's aspect unbounded), or the source's size when it keeps that.
   */
  get pictureNeed(): PictureNeed {
    if (this.#fused) return { fused: this.#fused };
    const { width, height } = this.#options.profile;
    if (width <= 0 && height <= 0) return "source";
    return {
      width: width > 0 ? width : maxOutputSide,
      height: height > 0 ? height : maxOutputSide,
    };
  }

  /** The output frame rate, once the first pictures have set it (0 before). */
  get fps(): number {
    return this.#fps;
  }

  /**
   * Draws `watermark` over the frames composed from now on; undefined removes it. A fused
   * rendition moves to the kernels (its `pictureNeed` changes: the subscriber must pass it
   * on), whose first frame comes from the decoder's first keyframe.
   */
  setWatermark(watermark: PlacedWatermark | undefined): void {
    this.#watermark = watermark;
    if (watermark && this.#fused) {
      this.#fused = undefined;
      this.#options.log.info("rendition moves to the kernels for a watermark");
    }
    this.#composer?.setWatermark(watermark && { ...watermark.image, ...watermark });
  }

  /** A decoded picture of the source, in presentation order. */
  pushPicture(picture: RawVideoFrame): void {
    // A fused rendition's video comes from the fused ffmpeg, not from pictures.
    if (this.#closed || !this.#video || this.#fused) return;
    if (!this.#composer && !this.#startVideo(picture)) return;
    this.#compose(picture);
  }

  /** A compressed audio frame of the source. */
  pushAudio(frame: MediaFrame): void {
    if (this.#closed || !this.#audio) return;
    if (this.#audioTranscode) this.#audioTranscode.push(frame);
    else this.#onAudioOut({ ...frame, trackId: this.#audio.id });
  }

  /** Stops the kernels, the encoder and the audio conversion; nothing is emitted afterwards. */
  async close(): Promise<void> {
    if (this.#closed) return;
    this.#closed = true;
    this.#composer?.close();
    await Promise.all([this.#encoder?.close(), this.#audioTranscode?.close()]);
  }

  /**
   * Starts the video stages at the first pictures: their size fixes the output size and,
   * when the profile has no frame rate, their spacing the rate. False while still measuring.
   */
  #startVideo(picture: RawVideoFrame): boolean {
    const { profile, engine, log } = this.#options;
    let fps = profile.fps;
    if (fps <= 0) {
      this.#firstPictures.push(picture);
      const first = this.#firstPictures[0];
      if (this.#firstPictures.length < 2) return false;
      const spacing = picture.pts - first.pts;
      fps = spacing > 0
        ? Math.min(60, Math.max(1, Math.round(pipelineVideoClockHz / spacing)))
        : defaultFps;
    }
    this.#fps = fps;
    const spanSec = engine.start ? maxComposingSec.streaming : maxComposingSec.chunked;
    this.#maxComposing = Math.max(1, Math.round(fps * spanSec));
    const video = this.#video!;
    const size = outputSize(picture.width, picture.height, profile.width, profile.height);
    video.width = size.width;
    video.height = size.height;
    const watermark = this.#watermark;
    this.#composer = new VideoComposer({
      ...size,
      frameRate: fps,
      layout: "grid",
      fit: "letterbox",
      watermark: watermark && { ...watermark.image, ...watermark },
      pool: pictureBuffers,
    });
    this.#composer.addInput("source");
    this.#encoder = createVideoEncoder({
      engine,
      settings: {
        codec: profile.videoCodec,
        ...size,
        fps,
        keyFrameInterval: profile.keyFrameInterval > 0
          ? profile.keyFrameInterval
          : Math.round(fps * defaultKeyFrameIntervalSec),
        bitrateKbps: profile.bitrateKbps,
      },
      track: video,
      onFrame: (frame) => this.#onVideoOut(frame),
      log,
    });
    const first = this.#firstPictures[0] ?? picture;
    this.#origin = first.pts;
    log.info("rendition started", { width: size.width, height: size.height, fps });
    // Pictures held while measuring the rate go first.
    const held = this.#firstPictures.slice(0, -1);
    this.#firstPictures = [];
    for (const early of held) this.#compose(early);
    return true;
  }

  /**
   * Composes every output tick due by a picture's time: through the kernels, or straight to
   * the encoder when the picture needs nothing of them (see `#passes`).
   */
  #compose(picture: RawVideoFrame): void {
    const composer = this.#composer!;
    const pts = picture.pts - this.#origin;
    if (pts < 0) {
      this.#stats.droppedFrames++;
      return;
    }
    const tickPts = (tick: number) => Math.round(tick * pipelineVideoClockHz / this.#fps);
    if (pts - this.#lastPicturePts > sourceGapMs * pipelineVideoClockHz / 1000) {
      if (this.#lastPicturePts >= 0) {
        this.#stats.sourceGaps++;
        this.#options.log.warn("source gap skipped", {
          gapMs: Math.round((pts - this.#lastPicturePts) * 1000 / pipelineVideoClockHz),
        });
      }
      // Resume at this picture's own tick: a long gap is not filled with repeats.
      this.#nextTick = Math.max(this.#nextTick, Math.floor(pts * this.#fps / pipelineVideoClockHz));
    }
    this.#lastPicturePts = pts;
    const frame = { ...picture, pts };
    // Ticks before this picture's time show the previous picture: passed on too if it was,
    // else composed (the kernels have it); nothing passes while a composed frame is on its
    // way, so frames reach the encoder in order.
    const previous = this.#passed;
    const repeatsPrevious = tickPts(this.#nextTick) < pts;
    if (this.#passes(frame) && this.#composing === 0 && (previous || !repeatsPrevious)) {
      this.#passed = frame;
      while (tickPts(this.#nextTick) <= pts) {
        const at = tickPts(this.#nextTick++);
        this.#pass(at < pts ? previous! : frame, at);
      }
      if (previous) this.#recycle(previous.data);
      return;
    }
    this.#passed = undefined;
    if (previous) {
      // It may still be on its way to the encoder: not handed over, and never recycled.
      this.#kept.add(previous.data);
      composer.push("source", previous);
    }
    if (!composer.push("source", frame, true)) this.#stats.droppedFrames++;
    while (tickPts(this.#nextTick) <= pts) {
      const tick = this.#nextTick++;
      if (this.#composing >= this.#maxComposing) {
        this.#stats.droppedFrames++;
        continue;
      }
      this.#composing++;
      composer.compose(tick).then((frame) => {
        this.#composing--;
        if (this.#closed) return;
        // The frame's buffer goes back to the composer for the next frames once written.
        const recycle = () => composer.recycle(frame);
        if (!this.#encoder!.push({ ...frame, pts: frame.pts + this.#origin }, recycle)) recycle();
      }, (err) => {
        this.#composing--;
        if (this.#closed) return;
        this.#stats.droppedFrames++;
        this.#options.log.warn("composing a frame failed", { err });
      });
    }
  }

  /**
   * Gives a picture to the encoder as it is, for the tick at `at`. The encoder only reads
   * the bytes (as do the other renditions of a shared picture); a picture of its own goes
   * back to the decoders' pool once written and no tick may show it again.
   */
  #pass(picture: RawVideoFrame, at: number): void {
    const data = picture.data;
    const own = ownBuffer(data);
    if (own) this.#writing.set(data, (this.#writing.get(data) ?? 0) + 1);
    const written = () => {
      const left = this.#writing.get(data)! - 1;
      if (left > 0) this.#writing.set(data, left);
      else {
        this.#writing.delete(data);
        this.#recycle(data);
      }
    };
    const pushed = this.#encoder!.push(
      { ...picture, pts: at + this.#origin },
      own ? written : undefined,
    );
    if (own && !pushed) written();
  }

  /** Returns passed bytes of its own to the pool when nothing may use them any more. */
  #recycle(data: Uint8Array): void {
    if (!ownBuffer(data) || this.#writing.has(data) || this.#passed?.data === data) return;
    if (!this.#kept.has(data)) pictureBuffers.give(data.buffer as ArrayBuffer);
  }

  /**
   * True when the kernels would give the picture back as it is: it has the output's size
   * (the decoder scaled it, with the scaler the kernels would use) and no watermark is
   * drawn. A Worker round trip and two copies of every frame are then saved.
   */
  #passes(picture: RawVideoFrame): boolean {
    const video = this.#video!;
    return !this.#watermark && picture.width === video.width &&
      picture.height === video.height;
  }

  #onVideoOut(frame: MediaFrame): void {
    if (this.#closed) return;
    this.#stats.encodedFrames++;
    this.#options.onFrame(frame);
    this.#videoUntil = frame.pts;
    this.#releaseAudio(frame.pts);
  }

  /**
   * Audio goes out once the video of its time has (video takes longer through the
   * pipeline), so readers get the two interleaved in time; it is held at most
   * `maxAudioHoldMs`, and not at all without video.
   */
  #onAudioOut(frame: MediaFrame): void {
    if (this.#closed) return;
    const audioClock = this.#audio!.clockRate;
    const time = frame.pts * pipelineVideoClockHz / audioClock;
    if (!this.#video || time <= this.#videoUntil) {
      this.#options.onFrame(frame);
      return;
    }
    this.#heldAudio.push(frame);
    const holdMs = this.#options.engine.start ? maxAudioHoldMs.streaming : maxAudioHoldMs.chunked;
    const latest = time - holdMs * pipelineVideoClockHz / 1000;
    this.#releaseAudio(Math.max(this.#videoUntil, latest));
  }

  /** Emits the held audio presented up to `until` (90 kHz). */
  #releaseAudio(until: number): void {
    const audioClock = this.#audio?.clockRate ?? 1;
    let i = 0;
    for (; i < this.#heldAudio.length; i++) {
      const frame = this.#heldAudio[i];
      if (frame.pts * pipelineVideoClockHz / audioClock > until) break;
      this.#options.onFrame(frame);
    }
    if (i > 0) this.#heldAudio.splice(0, i);
  }
}

/** True when `data` is the whole of an ArrayBuffer (not shared): a pool's buffer. */
function ownBuffer(data: Uint8Array): boolean {
  const { buffer, byteOffset, byteLength } = data;
  return buffer instanceof ArrayBuffer && byteOffset === 0 && byteLength === buffer.byteLength;
}
