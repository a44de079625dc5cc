/**
 * The streaming video decoder of engines that can stream (native ffmpeg): one ffmpeg for the
 * life of the decoder, compressed frames on its stdin, raw I420 pictures on its stdout.
 *
 * rawvideo carries no timestamps. ffmpeg outputs one picture per decodable frame it was
 * given, in presentation order, so the pts of the frames written wait in an ascending list
 * and each picture takes the smallest. Every frame not written (dropped, or skipped until a
 * keyframe) stays out of that list, so the two stay in step.
 */
import type { LiveJob } from "../engine/engine.ts";
import type { MediaFrame } from "../frame.ts";
import type { RawVideoFrame, VideoDecoder, VideoDecoderOptions } from "./video_codec.ts";
import {
  type DecoderInput,
  decoderInput,
  decoderOutputArgs,
  decoderProbeArgs,
  i420Bytes,
  insertSorted,
  isDisposable,
  isLeadingPicture,
  keyframeSize,
  type PictureSize,
  skipsLeadingPictures,
} from "./video_decoder_input.ts";

/**
 * Compressed frames that may wait for ffmpeg's stdin (about 1 s at 30 fps); beyond it frames
 * are dropped, so a decoder that falls behind costs its own pictures, not server memory.
 */
export const maxPendingDecoderWrites = 30;
/**
 * Pictures owed by one ffmpeg beyond which it is taken as out of step (it lost pictures, so
 * the pts no longer match) and restarted at the next keyframe. Well above what its pipes,
 * parser and reorder buffer can hold.
 */
const maxOwedPictures = 256;

/** One ffmpeg process and the pictures it owes. */
interface DecoderRun {
  job: LiveJob;
  input: DecoderInput;
  size: PictureSize;
  /** pts of the frames written whose pictures have not come out yet, ascending. */
  owed: number[];
  /** False once its output ended (ffmpeg exited). */
  alive: boolean;
  /** True once it gave a picture no frame was owed for: its pts cannot be trusted. */
  outOfStep: boolean;
  reading: Promise<void>;
}

/** A video decoder on one long-running ffmpeg (restarted when the picture size changes). */
export class StreamingVideoDecoder implements VideoDecoder {
  #options: VideoDecoderOptions;
  #run: DecoderRun | undefined;
  /** Runs being stopped; close waits for them so no process outlives the decoder. */
  #stopping = new Set<Promise<void>>();
  /** True until the next keyframe: frames cannot be decoded (start, or a lost reference). */
  #awaitingKeyframe = true;
  /** True after a CRA that starts a run: its RASL pictures are not output by ffmpeg. */
  #skipLeading = false;
  #closed = false;
  #warnedNoSize = false;
  dropped = 0;

  constructor(options: VideoDecoderOptions) {
    this.#options = options;
  }

  push(frame: MediaFrame): void {
    if (this.#closed) return;
    const codec = this.#options.track.codec;
    if (frame.keyframe && !this.#startAt(frame)) {
      this.dropped++;
      return;
    }
    const run = this.#run;
    if (this.#awaitingKeyframe || !run) {
      this.dropped++;
      return;
    }
    if (this.#skipLeading && isLeadingPicture(codec, frame.data)) {
      this.dropped++;
      return;
    }
    if (!run.job.write(run.input.encode(frame))) {
      this.dropped++;
      // Frames referring to a lost one would decode to garbage: wait for the next keyframe.
      if (!isDisposable(codec, frame.data)) this.#awaitingKeyframe = true;
      return;
    }
    insertSorted(run.owed, frame.pts);
  }

  async close(): Promise<void> {
    this.#closed = true;
    const run = this.#run;
    this.#run = undefined;
    if (run) this.#stop(run);
    await Promise.all(this.#stopping);
  }

  /**
   * Prepares decoding at a keyframe: starts a new ffmpeg when there is none, the last one
   * exited, it is out of step, or the picture size changed. False when the keyframe cannot
   * be decoded (its size is unknown, or ffmpeg cannot start).
   */
  #startAt(keyframe: MediaFrame): boolean {
    const { track, log } = this.#options;
    const size = keyframeSize(track, keyframe);
    if (!size) {
      if (!this.#warnedNoSize) log.warn("video keyframe of unknown picture size: not decoded");
      this.#warnedNoSize = true;
      this.#awaitingKeyframe = true;
      return false;
    }
    const run = this.#run;
    const outOfStep = run !== undefined && (run.outOfStep || run.owed.length > maxOwedPictures);
    if (
      run && run.alive && !outOfStep &&
      run.size.width === size.width && run.size.height === size.height
    ) {
      // The run decoded what came before this keyframe, unless frames were lost on the way.
      this.#skipLeading = skipsLeadingPictures(
        track.codec,
        keyframe.data,
        this.#awaitingKeyframe,
      );
      this.#awaitingKeyframe = false;
      return true;
    }
    if (run) {
      if (outOfStep) log.warn("video decoder out of step: restarted");
      // The old ffmpeg holds the last few pictures of the previous size (parser and reorder
      // delay): they are dropped, not drained, since stdin cannot be ended on its own and
      // the new pictures should not wait for it.
      this.dropped += run.owed.length;
      this.#stop(run);
    }
    this.#run = undefined;
    try {
      this.#run = this.#start(size);
    } catch (err) {
      log.warn("video decoder cannot start", { err });
      this.#awaitingKeyframe = true;
      return false;
    }
    this.#awaitingKeyframe = false;
    this.#skipLeading = skipsLeadingPictures(track.codec, keyframe.data, true);
    return true;
  }

  #start(size: PictureSize): DecoderRun {
    const { engine, track } = this.#options;
    const input = decoderInput(track, size);
    const job = engine.start!({
      inputArgs: [...decoderProbeArgs, ...input.args],
      // Every picture written out at once (the rawvideo muxer's buffer holds a tail).
      outputArgs: [...decoderOutputArgs, "-flush_packets", "1"],
      maxPendingWrites: maxPendingDecoderWrites,
    });
    const run: DecoderRun = {
      job,
      input,
      size,
      owed: [],
      alive: true,
      outOfStep: false,
      reading: Promise.resolve(),
    };
    run.reading = this.#read(run);
    return run;
  }

  #stop(run: DecoderRun): void {
    const stopping = run.job.close().then(() => run.reading);
    this.#stopping.add(stopping);
    stopping.finally(() => this.#stopping.delete(stopping));
  }

  /** Cuts ffmpeg's output into pictures of the run's size and emits them. */
  async #read(run: DecoderRun): Promise<void> {
    const pictureBytes = i420Bytes(run.size);
    let picture: Uint8Array | undefined;
    let filled = 0;
    try {
      for await (const chunk of run.job.output) {
        let at = 0;
        while (at < chunk.length) {
          if (filled === 0 && chunk.length - at >= pictureBytes) {
            // A whole picture in the chunk: no copy.
            this.#emit(run, chunk.subarray(at, at + pictureBytes));
            at += pictureBytes;
            continue;
          }
          picture ??= new Uint8Array(pictureBytes);
          const take = Math.min(pictureBytes - filled, chunk.length - at);
          picture.set(chunk.subarray(at, at + take), filled);
          filled += take;
          at += take;
          if (filled === pictureBytes) {
            this.#emit(run, picture);
            picture = undefined;
            filled = 0;
          }
        }
      }
    } catch (err) {
      if (this.#run === run) this.#options.log.warn("video decoder output failed", { err });
    }
    run.alive = false;
    if (this.#run === run && !this.#closed) {
      this.#options.log.warn("video decoder ended early", { errors: run.job.errors });
      // The next keyframe starts a new ffmpeg.
      this.#awaitingKeyframe = true;
    }
  }

  #emit(run: DecoderRun, data: Uint8Array): void {
    if (this.#closed || this.#run !== run) return;
    const pts = run.owed.shift();
    // More pictures than frames written: ffmpeg is out of step; the next keyframe restarts it.
    if (pts === undefined) {
      run.outOfStep = true;
      return;
    }
    const picture: RawVideoFrame = { width: run.size.width, height: run.size.height, data, pts };
    this.#options.onPicture(picture);
  }
}
