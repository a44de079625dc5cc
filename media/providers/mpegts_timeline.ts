/**
 * Keeps the timeline of an MPEG-TS ingest continuous: a sender restarted (or a TS spliced)
 * jumps its timestamps, and a jump larger than `maxTimestampDiff` seconds, forward or back, is
 * re-based so the stream goes on from where it was, one frame later. All tracks share the
 * offset, so audio and video stay in sync across the jump.
 */
import type { MediaFrame } from "../frame.ts";

/** Gap put after the last frame when the timeline is re-based, in seconds (a frame at 25 fps). */
const rebaseGapSec = 0.04;

/** Re-bases the frames of one stream. */
export class TimelineRebaser {
  readonly #maxDiffSec: number;
  /** Seconds added to every source timestamp. */
  #offsetSec = 0;
  /** Last output decode time per track, in seconds. */
  #lastSec = new Map<number, number>();
  /** Latest output decode time over all tracks, in seconds. */
  #maxSec = -Infinity;
  #rebases = 0;

  /** @param maxDiffSec largest jump passed through as is, in seconds. */
  constructor(maxDiffSec: number) {
    this.#maxDiffSec = maxDiffSec;
  }

  /** Times the timeline was re-based. */
  get rebases(): number {
    return this.#rebases;
  }

  /** `frame` with its pts and dts moved onto the continuous timeline (in place). */
  apply(frame: MediaFrame, clockRate: number): MediaFrame {
    const sourceSec = frame.dts / clockRate;
    let outSec = sourceSec + this.#offsetSec;
    const reference = this.#lastSec.get(frame.trackId) ?? this.#maxSec;
    if (reference !== -Infinity && Math.abs(outSec - reference) > this.#maxDiffSec) {
      this.#offsetSec = this.#maxSec + rebaseGapSec - sourceSec;
      outSec = sourceSec + this.#offsetSec;
      this.#rebases++;
    }
    const shift = Math.round(this.#offsetSec * clockRate);
    frame.dts += shift;
    frame.pts += shift;
    this.#lastSec.set(frame.trackId, outSec);
    if (outSec > this.#maxSec) this.#maxSec = outSec;
    return frame;
  }
}
