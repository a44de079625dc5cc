/**
 * Decode times for video whose source gives only presentation times (RTP from cameras and
 * WebRTC publishers): with B-frames, decode order differs from output order, and a pts
 * reused as dts makes decode times go back and forth.
 *
 * With a reorder depth D (how many pictures may precede a picture in decode order yet follow
 * it in output order), the n-th frame in decode order is shown no earlier than the (n-D)-th
 * picture in output order, and every picture shown up to that one has arrived by frame n. So
 * the dts of frame n is the (n-D)-th smallest pts of the stream, known when frame n arrives:
 * no frame waits, dts <= pts, and dts rises strictly. The first D frames, before that
 * picture exists, get decode times one frame apart just below the first pts.
 */
import type { Codec, MediaFrame, Track } from "../frame.ts";
import { findH264ParameterSets, h264ReorderDepth, parseH264Sps } from "./h264.ts";
import { findH265ParameterSets, parseH265Sps } from "./h265.ts";
import { ParseError } from "../../core/errors.ts";

/** Frame rate assumed for spacing the first decode times when the SPS gives none. */
export const defaultFrameRate = 30;
/** Frame rates outside this range in an SPS are taken as absent. */
const plausibleFrameRate = { min: 1, max: 300 };

/** Decode times of one run of frames (from a keyframe on) with a fixed reorder depth. */
export class DtsSequence {
  /** Frames whose decode time had to be raised above the rule's (a stream deeper than D). */
  corrections = 0;
  readonly depth: number;
  #frameTicks: number;
  /** Presentation times seen and not yet used as a decode time, ascending. */
  #window: number[] = [];
  #count = 0;
  #firstPts = 0;
  #last: number;

  /**
   * `depth`: reorder depth; `frameTicks`: frame duration used for the first `depth` frames;
   * `after`: decode time the sequence must stay above (the previous sequence's last).
   */
  constructor(depth: number, frameTicks: number, after = -Infinity) {
    this.depth = depth;
    this.#frameTicks = Math.max(1, Math.round(frameTicks));
    this.#last = after;
  }

  /** Last decode time given, or -Infinity before the first. */
  get last(): number {
    return this.#last;
  }

  /** The decode time of the next frame in decode order, whose presentation time is `pts`. */
  next(pts: number): number {
    if (this.#count === 0) this.#firstPts = pts;
    insertSorted(this.#window, pts);
    let dts;
    if (this.#count < this.depth) {
      dts = this.#firstPts - (this.depth - this.#count) * this.#frameTicks;
    } else {
      // The window holds `pts` itself, so its smallest value is never above it.
      dts = this.#window.shift()!;
    }
    this.#count++;
    if (dts <= this.#last) {
      dts = this.#last + 1;
      this.corrections++;
    }
    this.#last = dts;
    return dts;
  }
}

function insertSorted(values: number[], value: number): void {
  let i = values.length;
  while (i > 0 && values[i - 1] > value) i--;
  values.splice(i, 0, value);
}

/** What the SPS says about decode order: reorder depth and frame duration. */
export interface ReorderInfo {
  depth: number;
  /** Frame duration, in ticks of the track's clock. */
  frameTicks: number;
}

/**
 * Reorder depth and frame duration of H.264/H.265 from an SPS NAL unit; depth 0 for other
 * codecs, which never reorder here (VP8).
 */
export function reorderInfo(
  codec: Codec,
  sps: Uint8Array | undefined,
  clockRate: number,
): ReorderInfo {
  let depth = 0;
  let frameRate: number | undefined;
  if (sps && codec === "H264") {
    const info = parseH264Sps(sps);
    depth = h264ReorderDepth(info);
    frameRate = info.frameRate;
  } else if (sps && codec === "H265") {
    depth = parseH265Sps(sps).maxNumReorderPics;
  }
  if (
    frameRate === undefined || frameRate < plausibleFrameRate.min ||
    frameRate > plausibleFrameRate.max
  ) frameRate = defaultFrameRate;
  return { depth, frameTicks: clockRate / frameRate };
}

/** The SPS of a keyframe (in band) or else of the track's configuration. */
function spsOf(track: Track, frame: MediaFrame): Uint8Array | undefined {
  if (frame.codec === "H264") {
    return findH264ParameterSets(frame.data).sps[0] ??
      (track.config?.codec === "H264" ? track.config.sps[0] : undefined);
  }
  if (frame.codec === "H265") {
    return findH265ParameterSets(frame.data).sps[0] ??
      (track.config?.codec === "H265" ? track.config.sps[0] : undefined);
  }
  return undefined;
}

/**
 * Sets the decode times of one video track's frames, fed in decode order with their
 * presentation times. The reorder depth comes from the SPS (in band at keyframes, else the
 * track's configuration) and is read again when a keyframe brings another SPS.
 */
export class VideoDtsDeriver {
  /** SPS that could not be parsed (depth 0 assumed). */
  malformed = 0;
  #track: Track;
  #sequence: DtsSequence | undefined;
  #sps: Uint8Array | undefined;
  #restart = false;
  #corrections = 0;

  constructor(track: Track) {
    this.#track = track;
  }

  /** Reorder depth in use, once a frame has been seen. */
  get depth(): number | undefined {
    return this.#sequence?.depth;
  }

  /** Frames whose decode time was raised because the stream reordered deeper than declared. */
  get corrections(): number {
    return this.#corrections + (this.#sequence?.corrections ?? 0);
  }

  /** Starts a new sequence at the next keyframe (a new session after a reconnect). */
  restart(): void {
    this.#restart = true;
  }

  /** Sets `frame.dts` from its pts. */
  derive(frame: MediaFrame): void {
    if (frame.keyframe || !this.#sequence) {
      const sps = this.#spsOf(frame);
      const changed = sps !== undefined && !sameBytes(sps, this.#sps);
      if (!this.#sequence || changed || (this.#restart && frame.keyframe)) {
        this.#restart = false;
        this.#sps = sps?.slice();
        this.#start(sps);
      }
    }
    frame.dts = this.#sequence!.next(frame.pts);
  }

  #spsOf(frame: MediaFrame): Uint8Array | undefined {
    try {
      return spsOf(this.#track, frame);
    } catch (err) {
      if (!(err instanceof ParseError)) throw err;
      this.malformed++;
      return undefined;
    }
  }

  #start(sps: Uint8Array | undefined): void {
    let info: ReorderInfo;
    try {
      info = reorderInfo(this.#track.codec, sps, this.#track.clockRate);
    } catch (err) {
      if (!(err instanceof ParseError)) throw err;
      this.malformed++;
      info = reorderInfo(this.#track.codec, undefined, this.#track.clockRate);
    }
    const previous = this.#sequence;
    this.#corrections += previous?.corrections ?? 0;
    this.#sequence = new DtsSequence(info.depth, info.frameTicks, previous?.last);
  }
}

function sameBytes(a: Uint8Array, b: Uint8Array | undefined): boolean {
  return b !== undefined && a.length === b.length && a.every((v, i) => v === b[i]);
}
