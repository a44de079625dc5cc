/**
 * The pipeline's video encoder: raw I420 pictures in, H.264 or VP8 frames out on the
 * pictures' own pts. With an engine that streams (native ffmpeg) one ffmpeg runs for the
 * encoder's whole life, pictures on its stdin; otherwise (ffmpeg.wasm) pictures are gathered
 * into chunks of whole GOPs, about a second of them, and each chunk is encoded by one run, which adds
 * about a chunk plus a run of latency.
 *
 * ffmpeg encodes without reordering and neither drops nor repeats pictures, so frame n of a
 * run is picture n of that run: each frame takes the pts of the picture it was written as.
 */
import type { LiveJob } from "../engine/engine.ts";
import { findH264ParameterSets } from "../codecs/h264.ts";
import type { MediaFrame } from "../frame.ts";
import type { RawVideoFrame, VideoEncoder, VideoEncoderOptions } from "./video_codec.ts";
import { videoEncoderArgs } from "./video_encoder_args.ts";
import {
  type EncodedPicture,
  type EncodedPictureReader,
  encodedPictureReader,
} from "./video_encoder_output.ts";

/**
 * Bytes of pictures that may wait for the native ffmpeg's stdin before pushes are refused:
 * three 720p frames (100 ms at 30 fps), since late video is useless. Small pictures get as
 * many more places, up to `maxPendingEncoderWrites`: a burst of repeats (a source gap filled)
 * must not be refused while the pipe holds a few kilobytes.
 */
const pendingEncoderBytes = 3 * i420Bytes(1280, 720);
/** Most pictures that may wait for the native ffmpeg's stdin, whatever their size. */
export const maxPendingEncoderWrites = 30;
/** Longest span of pictures one chunked run encodes, in milliseconds. */
const maxChunkMs = 2000;
/**
 * Chunks that may wait while a run is going; pictures beyond them are dropped. Two: a
 * chunked decoder hands over a whole GOP at once (2 s of pictures for a GOP of 60 at 30 fps).
 */
const maxQueuedChunks = 2;
/** Longest one chunked run may take, in milliseconds. */
const chunkRunTimeoutMs = 15_000;

/**
 * An encoder for `options.settings`: streaming when the engine can, chunked otherwise.
 * Throws the engine's error when its ffmpeg cannot be started (EngineError, or a 503 when
 * no file descriptor is left).
 */
export function createVideoEncoder(options: VideoEncoderOptions): VideoEncoder {
  return options.engine.start
    ? new StreamingVideoEncoder(options)
    : new ChunkedVideoEncoder(options);
}

/** Bytes of an I420 picture of the given size (chroma planes of half size, rounded up). */
export function i420Bytes(width: number, height: number): number {
  return width * height + 2 * Math.ceil(width / 2) * Math.ceil(height / 2);
}

/**
 * True when the picture is of the encoder's size: any other would desynchronise ffmpeg's raw
 * input for good, so it is refused (a caller's bug, logged).
 */
function fits(picture: RawVideoFrame, options: VideoEncoderOptions): boolean {
  const { width, height } = options.settings;
  if (
    picture.width === width && picture.height === height &&
    picture.data.length === i420Bytes(width, height)
  ) {
    return true;
  }
  options.log.warn("video encoder refused a picture of another size", {
    picture: `${picture.width}x${picture.height}`,
    bytes: picture.data.length,
    encoder: `${width}x${height}`,
  });
  return false;
}

/**
 * The pts of the pictures given to one ffmpeg run, by picture number, and the emission of
 * the frames that come back.
 */
class Run {
  #pts: number[] = [];
  /** Picture number of `#pts[0]`. */
  #first = 0;
  #options: VideoEncoderOptions;
  /** Pictures ffmpeg wrote no frame for, frames of no picture: never expected, logged once. */
  #lost = 0;
  #unmatched = 0;

  constructor(options: VideoEncoderOptions) {
    this.#options = options;
  }

  /** Pictures written whose frames have not come back yet. */
  get waiting(): number {
    return this.#pts.length;
  }

  /** Records the pts of the next picture written to ffmpeg. */
  add(pts: number): void {
    this.#pts.push(pts);
  }

  /** Emits one encoded picture on its picture's pts. */
  emit(picture: EncodedPicture): void {
    const { track, settings, onFrame, log } = this.#options;
    // A frame whose number is ahead means ffmpeg skipped pictures: their pts are passed.
    while (this.#pts.length > 0 && this.#first < picture.index) {
      this.#pts.shift();
      this.#first++;
      if (this.#lost++ === 0) log.warn("video encoder skipped a picture", { codec: track.codec });
    }
    if (this.#pts.length === 0 || this.#first !== picture.index) {
      if (this.#unmatched++ === 0) {
        log.warn("video encoder frame matches no picture", { index: picture.index });
      }
      return;
    }
    const pts = this.#pts.shift()!;
    this.#first++;
    if (settings.codec === "H264" && picture.keyframe) setH264Config(track, picture.data);
    const frame: MediaFrame = {
      trackId: track.id,
      codec: settings.codec,
      pts,
      dts: pts,
      keyframe: picture.keyframe,
      data: picture.data,
    };
    onFrame(frame);
  }
}

/** Sets the track's SPS/PPS from a keyframe's in-band ones, when they differ. */
export function setH264Config(track: VideoEncoderOptions["track"], accessUnit: Uint8Array): void {
  const { sps, pps } = findH264ParameterSets(accessUnit);
  if (sps.length === 0 || pps.length === 0) return;
  const config = track.config;
  if (
    config?.codec === "H264" && sameNals(config.sps, sps) && sameNals(config.pps, pps)
  ) {
    return;
  }
  // Copies: the frame's buffer must not be kept alive by the track.
  track.config = { codec: "H264", sps: sps.map((n) => n.slice()), pps: pps.map((n) => n.slice()) };
}

function sameNals(a: readonly Uint8Array[], b: readonly Uint8Array[]): boolean {
  return a.length === b.length &&
    a.every((nal, i) => nal.length === b[i].length && nal.every((byte, j) => byte === b[i][j]));
}

/** One native ffmpeg for the encoder's life, pictures streamed to its stdin. */
class StreamingVideoEncoder implements VideoEncoder {
  #options: VideoEncoderOptions;
  #job: LiveJob;
  #run: Run;
  #reading: Promise<void>;
  #closed = false;
  #dropped = 0;

  constructor(options: VideoEncoderOptions) {
    this.#options = options;
    const args = videoEncoderArgs(options.settings, options.engine.kind);
    const { width, height } = options.settings;
    const maxPendingWrites = Math.max(
      3,
      Math.min(maxPendingEncoderWrites, Math.floor(pendingEncoderBytes / i420Bytes(width, height))),
    );
    this.#job = options.engine.start!({ ...args, maxPendingWrites });
    this.#run = new Run(options);
    this.#reading = this.#read(
      encodedPictureReader(options.settings.codec, options.settings.fps),
    );
  }

  get dropped(): number {
    return this.#dropped;
  }

  push(picture: RawVideoFrame, release?: () => void): boolean {
    if (this.#closed) return false;
    if (!fits(picture, this.#options) || !this.#job.write(picture.data, release)) {
      this.#dropped++;
      return false;
    }
    this.#run.add(picture.pts);
    return true;
  }

  async close(): Promise<void> {
    this.#closed = true;
    await this.#job.close();
    await this.#reading;
  }

  async #read(reader: EncodedPictureReader): Promise<void> {
    const { log, settings } = this.#options;
    try {
      for await (const chunk of this.#job.output) {
        if (this.#closed) break;
        for (const picture of reader.push(chunk)) {
          if (this.#closed) break;
          this.#run.emit(picture);
        }
      }
    } catch (err) {
      if (!this.#closed) log.warn("video encoder output failed", { codec: settings.codec, err });
    }
    if (!this.#closed) {
      log.warn("video encoder ended early", { codec: settings.codec, errors: this.#job.errors });
      // An output that cannot be read any more (bad bytes) must not leave ffmpeg running.
      await this.#job.close();
    }
  }
}

/** Pictures gathered into chunks, each encoded by one run of an engine that cannot stream. */
class ChunkedVideoEncoder implements VideoEncoder {
  #options: VideoEncoderOptions;
  #args: ReturnType<typeof videoEncoderArgs>;
  #chunkFrames: number;
  #chunk: RawVideoFrame[] = [];
  /** Chunks handed to the run chain and not finished: the one running and those queued. */
  #pendingChunks = 0;
  #runs: Promise<void> = Promise.resolve();
  #closed = false;
  /** Pictures refused, and those of runs that failed (accepted but never encoded). */
  #dropped = 0;

  constructor(options: VideoEncoderOptions) {
    this.#options = options;
    const { settings } = options;
    this.#args = videoEncoderArgs(settings, options.engine.kind);
    // Whole GOPs, about a second of them: each run costs a Worker and an instance, so
    // shorter runs fall behind (a GOP of 3 at 15 fps was 5 runs a second); a run starts
    // with a keyframe, so whole GOPs keep keyframes on their interval. A GOP longer than
    // `maxChunkMs` is cut (its keyframes then come every `maxChunkMs`).
    const gop = Math.max(1, Math.round(settings.keyFrameInterval));
    const second = Math.max(1, Math.round(settings.fps));
    this.#chunkFrames = Math.min(
      gop * Math.max(1, Math.floor(second / gop)),
      Math.max(1, Math.round(settings.fps * maxChunkMs / 1000)),
    );
  }

  get dropped(): number {
    return this.#dropped;
  }

  push(picture: RawVideoFrame): boolean {
    if (this.#closed) return false;
    if (!fits(picture, this.#options)) {
      this.#dropped++;
      return false;
    }
    // A new chunk starts only if it could be queued: pictures are refused while a run is
    // going and another chunk waits, so no queue grows behind a slow engine.
    if (this.#chunk.length === 0 && this.#pendingChunks > maxQueuedChunks) {
      this.#dropped++;
      return false;
    }
    this.#chunk.push(picture);
    if (this.#chunk.length >= this.#chunkFrames) {
      const chunk = this.#chunk;
      this.#chunk = [];
      this.#pendingChunks++;
      this.#runs = this.#runs.then(() => this.#encode(chunk)).finally(() => {
        this.#pendingChunks--;
      });
    }
    return true;
  }

  async close(): Promise<void> {
    this.#closed = true;
    this.#chunk = [];
    // A run cannot be stopped alone (the engine only stops all): wait for the one going.
    await this.#runs;
  }

  async #encode(chunk: RawVideoFrame[]): Promise<void> {
    if (this.#closed) return;
    const { engine, settings, log } = this.#options;
    const frameBytes = chunk[0].data.length;
    const input = new Uint8Array(frameBytes * chunk.length);
    chunk.forEach((picture, i) => input.set(picture.data, i * frameBytes));
    const run = new Run(this.#options);
    for (const picture of chunk) run.add(picture.pts);
    try {
      const output = await engine.run({
        ...this.#args,
        input,
        timeoutMs: chunkRunTimeoutMs,
        live: true,
      });
      if (this.#closed) return;
      const reader = encodedPictureReader(settings.codec, settings.fps);
      for (const picture of [...reader.push(output), ...reader.flush()]) {
        if (this.#closed) return;
        run.emit(picture);
      }
      if (run.waiting > 0) {
        log.warn("video encoder run gave fewer frames than pictures", { missing: run.waiting });
      }
    } catch (err) {
      if (this.#closed) return;
      this.#dropped += run.waiting;
      log.warn("video encoder run failed", { codec: settings.codec, err });
    }
  }
}
