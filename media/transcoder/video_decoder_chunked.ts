/**
 * The chunked video decoder of engines that only take whole inputs (ffmpeg.wasm): the frames
 * of a GOP are gathered and decoded in one run to raw I420 pictures, which take the GOP's pts
 * in ascending order (ffmpeg outputs every frame of a whole input, in presentation order).
 *
 * A GOP longer than `maxChunkMs` is decoded in steps, each run from its keyframe to the
 * latest frame (later frames need the earlier ones as references). A step emits only the
 * pictures no later frame can precede: pts up to the dts of its last frame, since every
 * later frame has a larger dts, and pts are never below dts. That keeps pictures in order
 * with B-frames across the cut.
 */
import type { MediaFrame } from "../frame.ts";
import type { VideoDecoder, VideoDecoderOptions } from "./video_codec.ts";
import {
  decoderInput,
  decoderOutputArgs,
  decoderProbeArgs,
  i420Bytes,
  isLeadingPicture,
  keyframeSize,
  type PictureSize,
  skipsLeadingPictures,
} from "./video_decoder_input.ts";

/** Frames gathered before a run when no keyframe has ended the GOP yet, in milliseconds. */
export const maxChunkMs = 2000;
/**
 * Longest GOP decoded, in milliseconds: each step decodes the GOP from its keyframe, so the
 * cost of a GOP grows with the square of its length; beyond this frames are dropped until
 * the next keyframe.
 */
export const maxGopMs = 10_000;
/** Longest one run may take, in milliseconds (a 10 s GOP of 720p on a loaded machine). */
const chunkRunTimeoutMs = 30_000;
/** Runs that may wait for the engine; beyond it whole GOPs are dropped (engine behind). */
const maxQueuedRuns = 3;

/** The frames of one GOP and what was emitted of them. */
interface Gop {
  size: PictureSize;
  /** Frames in decode order, from the keyframe. */
  frames: MediaFrame[];
  /** Frames the latest scheduled run covers. */
  scheduled: number;
  /** Pictures emitted, and the pts of the last one. */
  emitted: number;
  emittedUpTo: number;
  /** True after a run failed: the rest of the GOP is dropped. */
  failed: boolean;
  /** True when its keyframe makes decoders skip the RASL pictures after it (H.265 CRA). */
  skipLeading: boolean;
}

/** A video decoder running one engine job per GOP (or per `maxChunkMs` of a long one). */
export class ChunkedVideoDecoder implements VideoDecoder {
  #options: VideoDecoderOptions;
  #gop: Gop | undefined;
  #runs: Promise<void> = Promise.resolve();
  #queued = 0;
  #closed = false;
  #warnedNoSize = false;
  dropped = 0;

  constructor(options: VideoDecoderOptions) {
    this.#options = options;
  }

  push(frame: MediaFrame): void {
    if (this.#closed) return;
    const { track, log } = this.#options;
    if (frame.keyframe) {
      if (this.#gop) this.#schedule(this.#gop, true);
      this.#gop = undefined;
      const size = keyframeSize(track, frame);
      if (!size && !this.#warnedNoSize) {
        log.warn("video keyframe of unknown picture size: not decoded");
        this.#warnedNoSize = true;
      }
      // The engine is behind: this GOP is skipped whole.
      if (size && this.#queued < maxQueuedRuns) {
        this.#gop = {
          size,
          frames: [],
          scheduled: 0,
          emitted: 0,
          emittedUpTo: -Infinity,
          failed: false,
          skipLeading: skipsLeadingPictures(track.codec, frame.data, true),
        };
      }
    }
    const gop = this.#gop;
    if (!gop || gop.failed || (gop.skipLeading && isLeadingPicture(track.codec, frame.data))) {
      this.dropped++;
      return;
    }
    const first = gop.frames[0] ?? frame;
    if ((frame.dts - first.dts) * 1000 / track.clockRate >= maxGopMs) {
      this.#schedule(gop, true);
      this.#gop = undefined;
      this.dropped++;
      return;
    }
    gop.frames.push(frame);
    const sinceRun = gop.frames[gop.scheduled] ?? frame;
    if (
      (frame.dts - sinceRun.dts) * 1000 / track.clockRate >= maxChunkMs &&
      this.#queued < maxQueuedRuns
    ) {
      this.#schedule(gop, false);
    }
  }

  async close(): Promise<void> {
    this.#closed = true;
    this.#gop = undefined;
    // A run in flight cannot be cancelled alone (the engine is shared): it is waited for,
    // its Worker ends with it, and what it decoded is not emitted.
    await this.#runs;
  }

  /** Queues a run of the GOP's frames so far; `final` when no frame will be added. */
  #schedule(gop: Gop, final: boolean): void {
    const frames = gop.frames.slice();
    if (frames.length === 0) return;
    gop.scheduled = frames.length;
    this.#queued++;
    this.#runs = this.#runs.then(async () => {
      try {
        await this.#decode(gop, frames, final);
      } catch (err) {
        // The engine failed or timed out, or a frame was damaged: the GOP is lost, not the
        // decoder.
        if (!this.#closed) this.#options.log.warn("video chunk decoding failed", { err });
        this.#fail(gop);
      } finally {
        this.#queued--;
      }
    });
  }

  async #decode(gop: Gop, frames: MediaFrame[], final: boolean): Promise<void> {
    if (this.#closed || gop.failed || gop.emitted === frames.length) return;
    const { engine, track, log, onPicture } = this.#options;
    const input = decoderInput(track, gop.size);
    const parts = frames.map((f) => input.encode(f));
    const bytes = new Uint8Array(parts.reduce((n, p) => n + p.length, 0));
    let offset = 0;
    for (const part of parts) {
      bytes.set(part, offset);
      offset += part.length;
    }
    const output = await engine.run({
      inputArgs: [...decoderProbeArgs, ...input.args],
      input: bytes,
      outputArgs: decoderOutputArgs,
      timeoutMs: chunkRunTimeoutMs,
      live: true,
    });
    if (this.#closed) return;
    const pictureBytes = i420Bytes(gop.size);
    if (output.length !== frames.length * pictureBytes) {
      // Pictures missing (or extra): which pts each has is unknown, so none is emitted.
      log.warn("video chunk decoded to another number of pictures than frames", {
        frames: frames.length,
        pictures: output.length / pictureBytes,
      });
      this.#fail(gop);
      return;
    }
    const sortedPts = frames.map((f) => f.pts).sort((a, b) => a - b);
    const finalUpTo = final ? Infinity : frames[frames.length - 1].dts;
    for (let i = 0; i < sortedPts.length; i++) {
      const pts = sortedPts[i];
      if (pts <= gop.emittedUpTo) continue;
      if (pts > finalUpTo || this.#closed) break;
      gop.emitted++;
      gop.emittedUpTo = pts;
      const data = output.subarray(i * pictureBytes, (i + 1) * pictureBytes);
      onPicture({ width: gop.size.width, height: gop.size.height, data, pts });
    }
  }

  /** Drops what is left of a GOP whose run failed. */
  #fail(gop: Gop): void {
    if (gop.failed) return;
    gop.failed = true;
    this.dropped += gop.frames.length - gop.emitted;
  }
}
