/**
 * The streaming video decoder of engines that can stream (native ffmpeg): one ffmpeg for the
 * life of the decoder, compressed frames on its stdin, raw I420 pictures on its stdout.
 *
 * rawvideo carries no timestamps. ffmpeg outputs one picture per decodable frame it was
 * given, in presentation order, so the pts of the frames written wait in an ascending list
 * and each picture takes the smallest. Every frame not written (dropped, or skipped until a
 * keyframe) stays out of that list, so the two stay in step.
 *
 * A keyframe of another picture size (WebRTC publishers change resolution under load) goes
 * to the same ffmpeg, which outputs the new size from there (`-autoscale 0`): every picture
 * of the old size comes out first, so the list is cut in segments, one per size, and the
 * pictures of one segment are read before those of the next. Nothing is lost at the change;
 * restarting ffmpeg instead would drop the pictures still in its parser and reorder buffer
 * (5 at least, and all of a slow start's).
 *
 * With a box, ffmpeg scales each picture down into it (`decoderScaleArgs`): consumers that
 * make smaller pictures of it then get a quarter of the bytes of a 720p source through the
 * pipe and the server for a 360p output, and the kernels have little left to scale.
 */
import { findH264ParameterSets } from "../codecs/h264.ts";
import { pictureBuffers } from "../mixer/buffer_pool.ts";
import { findH265ParameterSets } from "../codecs/h265.ts";
import type { LiveJob } from "../engine/engine.ts";
import type { CodecConfig, MediaFrame, Track } from "../frame.ts";
import type { RawVideoFrame, VideoDecoder, VideoDecoderOptions } from "./video_codec.ts";
import {
  type DecoderInput,
  decoderInput,
  decoderOutputArgs,
  decoderProbeArgs,
  decoderScaleArgs,
  i420Bytes,
  insertSorted,
  isDisposable,
  isLeadingPicture,
  keyframeSize,
  type PictureSize,
  scaledSize,
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
/** Bytes read at a time while no picture is owed (its size is not known yet), or discarded. */
const idleReadBytes = 1;
const discardReadBytes = 64 * 1024;

/** Pictures of one size owed by ffmpeg. */
interface Segment {
  /** The size of the source's pictures, as its keyframe said. */
  source: PictureSize;
  /** The size ffmpeg writes them at (scaled into the decoder's box). */
  size: PictureSize;
  /** pts of the frames written whose pictures have not come out yet, ascending. */
  pts: number[];
}

/** One ffmpeg process and the pictures it owes. */
interface DecoderRun {
  job: LiveJob;
  input: DecoderInput;
  /** The track's configuration when it started (the muxer repeats its parameter sets). */
  config: CodecConfig | undefined;
  /** Owed pictures by size, in output order: the first segment's come out first. */
  segments: Segment[];
  /** Pictures owed in all segments. */
  owed: number;
  /** False once its output ended (ffmpeg exited). */
  alive: boolean;
  /** True once it gave a picture no frame was owed for: its pts cannot be trusted. */
  outOfStep: boolean;
  reading: Promise<void>;
}

/** A video decoder on one long-running ffmpeg (restarted only when it fails). */
export class StreamingVideoDecoder implements VideoDecoder {
  #options: VideoDecoderOptions;
  #run: DecoderRun | undefined;
  /** Runs being stopped; close waits for them so no process outlives the decoder. */
  #stopping = new Set<Promise<void>>();
  /** True until the next keyframe: frames cannot be decoded (start, or a lost reference). */
  #awaitingKeyframe = true;
  /** True after a CRA decoded first: its RASL pictures are not output by ffmpeg. */
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
    let bytes: Uint8Array;
    try {
      bytes = run.input.encode(frame);
    } catch (err) {
      // A damaged access unit (NAL lengths beyond its end): lost like a refused write.
      this.#options.log.debug("video frame not decodable", { err });
      bytes = new Uint8Array(0);
    }
    if (bytes.length === 0 || !run.job.write(bytes)) {
      this.dropped++;
      // Frames referring to a lost one would decode to garbage: wait for the next keyframe.
      if (!isDisposable(codec, frame.data)) this.#awaitingKeyframe = true;
      return;
    }
    insertSorted(run.segments[run.segments.length - 1].pts, frame.pts);
    run.owed++;
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
   * exited or is out of step, or the track's parameter sets changed and the keyframe lacks
   * its own. False when the keyframe cannot be decoded (its size is unknown, or ffmpeg
   * cannot start).
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
    const resumed = this.#awaitingKeyframe;
    const run = this.#run;
    const outOfStep = run !== undefined && (run.outOfStep || run.owed > maxOwedPictures);
    if (
      run && run.alive && !outOfStep &&
      (track.config === run.config || carriesParameterSets(track, keyframe))
    ) {
      const last = run.segments[run.segments.length - 1];
      const resized = last.source.width !== size.width || last.source.height !== size.height;
      const segment = { source: size, size: scaledSize(size, this.#options.box) };
      if (resized && last.pts.length === 0) Object.assign(last, segment);
      else if (resized) run.segments.push({ ...segment, pts: [] });
      // A new size starts a new sequence: ffmpeg decodes it as from scratch.
      this.#skipLeading = skipsLeadingPictures(track.codec, keyframe.data, resumed || resized);
      this.#awaitingKeyframe = false;
      return true;
    }
    if (run) {
      if (outOfStep) log.warn("video decoder out of step: restarted");
      // The old ffmpeg still holds a few pictures (parser and reorder delay): dropped, since
      // its stdin cannot be ended on its own to drain them.
      this.dropped += run.owed;
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
      // Every picture written out at once (the rawvideo muxer's buffer holds a tail), each
      // at its decoded (or scaled) size. `-avioflags direct`: one write() per picture rather
      // than one per 32 KiB of ffmpeg's output buffer (11 for a 640x360 picture, each waking
      // the server's reader). 4 decoders of 640x360 at 30 fps writing to a pipe took 10-15%
      // less CPU alone; inside bench/mixer.ts the difference is within the runs' noise.
      outputArgs: [
        ...decoderScaleArgs(this.#options.box),
        ...decoderOutputArgs,
        ...["-flush_packets", "1", "-autoscale", "0", "-avioflags", "direct"],
      ],
      maxPendingWrites: maxPendingDecoderWrites,
    });
    const run: DecoderRun = {
      job,
      input,
      config: track.config,
      segments: [{ source: size, size: scaledSize(size, this.#options.box), pts: [] }],
      owed: 0,
      alive: true,
      outOfStep: false,
      reading: Promise.resolve(),
    };
    run.reading = this.#read(run);
    return run;
  }

  #stop(run: DecoderRun): void {
    const stopping = run.job.close().catch(() => {}).then(() => run.reading);
    this.#stopping.add(stopping);
    stopping.finally(() => this.#stopping.delete(stopping));
  }

  /** Reads ffmpeg's output as pictures of the owed sizes and emits them. */
  async #read(run: DecoderRun): Promise<void> {
    const output = run.job.output;
    try {
      // A byte stream (the native engine's pipe) is read straight into each picture's own
      // buffer: no chunk is allocated and copied (half the server's CPU at 720p30).
      const reader = output instanceof ReadableStream ? byobReader(output) : undefined;
      await (reader ? this.#readInto(run, reader) : this.#readChunks(run, output));
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

  async #readInto(run: DecoderRun, reader: ReadableStreamBYOBReader): Promise<void> {
    let picture: Uint8Array | undefined;
    let filled = 0;
    try {
      for (;;) {
        // Once out of step, output is thrown away until the next keyframe restarts ffmpeg.
        if (!run.outOfStep) picture ??= this.#newPicture(run);
        // With no picture owed, a byte is read: ffmpeg's exit shows, and a frame written
        // meanwhile tells the picture's size.
        const target = picture?.subarray(filled) ??
          new Uint8Array(run.outOfStep ? discardReadBytes : idleReadBytes);
        const { value, done } = await reader.read(target);
        if (done || !value) return;
        if (!picture) {
          if (run.outOfStep) continue;
          picture = this.#newPicture(run);
          if (!picture) {
            run.outOfStep = true;
            continue;
          }
          picture.set(value);
          filled = value.length;
        } else {
          filled += value.length;
          // The read took over the buffer (`picture` is now empty): the buffer it returned is
          // the one to keep filling.
          picture = new Uint8Array(value.buffer);
        }
        if (filled === picture.length) {
          this.#emit(run, picture);
          picture = undefined;
          filled = 0;
        }
      }
    } finally {
      reader.releaseLock();
    }
  }

  /** Cuts output chunks of any size into pictures (a whole picture in a chunk is not copied). */
  async #readChunks(run: DecoderRun, output: AsyncIterable<Uint8Array>): Promise<void> {
    let picture: Uint8Array | undefined;
    let filled = 0;
    for await (const chunk of output) {
      // Once out of step, output is thrown away until the next keyframe restarts ffmpeg.
      if (run.outOfStep) continue;
      let at = 0;
      while (at < chunk.length) {
        const bytes = picture?.length ?? this.#nextSize(run);
        if (bytes === undefined) {
          run.outOfStep = true;
          break;
        }
        if (filled === 0 && chunk.length - at >= bytes) {
          this.#emit(run, chunk.subarray(at, at + bytes));
          at += bytes;
          continue;
        }
        picture ??= new Uint8Array(bytes);
        const take = Math.min(bytes - filled, chunk.length - at);
        picture.set(chunk.subarray(at, at + take), filled);
        filled += take;
        at += take;
        if (filled === bytes) {
          this.#emit(run, picture);
          picture = undefined;
          filled = 0;
        }
      }
    }
  }

  /** Bytes of the next picture ffmpeg owes, undefined when it owes none. */
  #nextSize(run: DecoderRun): number | undefined {
    while (run.segments.length > 1 && run.segments[0].pts.length === 0) run.segments.shift();
    const segment = run.segments[0];
    return segment.pts.length > 0 ? i420Bytes(segment.size) : undefined;
  }

  /**
   * A buffer for the next picture ffmpeg owes (from the pictures' pool, which composers
   * refill), undefined when it owes none.
   */
  #newPicture(run: DecoderRun): Uint8Array | undefined {
    const bytes = this.#nextSize(run);
    return bytes === undefined ? undefined : new Uint8Array(pictureBuffers.take(bytes));
  }

  /** Emits the picture owed first (its segment was made current by `#nextSize`). */
  #emit(run: DecoderRun, data: Uint8Array): void {
    const segment = run.segments[0];
    const pts = segment.pts.shift()!;
    run.owed--;
    if (this.#closed || this.#run !== run || run.outOfStep) return;
    const picture: RawVideoFrame = { ...segment.size, data, pts };
    this.#options.onPicture(picture);
  }
}

/** True when a keyframe carries its own parameter sets (VP8 keyframes always do). */
function carriesParameterSets(track: Track, keyframe: MediaFrame): boolean {
  switch (track.codec) {
    case "H264":
      return findH264ParameterSets(keyframe.data).sps.length > 0;
    case "H265":
      return findH265ParameterSets(keyframe.data).sps.length > 0;
    default:
      return true;
  }
}

/** A reader into caller-given buffers, when `stream` is a byte stream. */
function byobReader(stream: ReadableStream<Uint8Array>): ReadableStreamBYOBReader | undefined {
  try {
    return stream.getReader({ mode: "byob" });
  } catch {
    return undefined;
  }
}
