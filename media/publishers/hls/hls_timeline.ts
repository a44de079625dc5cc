/**
 * The timeline the segmenters of one HLS output share when its audio is served apart
 * (EXT-X-MEDIA audio renditions beside video-only variants): a player plays a video variant's
 * segments with an audio rendition's, so both must put a moment of the source at the same
 * output time and wall clock, and the audio rendition's segments should start where the video
 * ones do, with the same media sequence numbers (RFC 8216 6.2.4: renditions of a group are
 * aligned with their variants).
 *
 * The first segmenter to start in an epoch (the output's run with one publisher) fixes the
 * epoch's offset and wall clock anchor; the others take them. One video segmenter leads:
 * where its segments start are the cuts the audio renditions follow.
 */

/** Where the source's time lands in an epoch's output time. */
export interface HlsTimelineAnchor {
  /** Output time = source time + offsetSec, in seconds. */
  offsetSec: number;
  /** Wall clock of output time `anchorSec`, in ms since the epoch (EXT-X-PROGRAM-DATE-TIME). */
  wallMs: number;
  anchorSec: number;
}

/** Where the leading video variant starts a segment: output time and media sequence number. */
export interface HlsTimelineCut {
  sec: number;
  msn: number;
}

/** Cuts kept: far more than a window of segments, so a late follower still finds its own. */
const maxCuts = 256;

/** The shared timeline of one HLS output's segmenters. */
export class HlsTimeline {
  #epoch = 0;
  #anchors = new Map<number, HlsTimelineAnchor>();
  #cuts: HlsTimelineCut[] = [];
  #leader: object | undefined;
  #leadSec: number | undefined;

  /** The output's run with the current publisher; segmenters started in it share an anchor. */
  get epoch(): number {
    return this.#epoch;
  }

  /** A new publisher of the name: segmenters starting after their discontinuity re-anchor. */
  nextEpoch(): void {
    this.#anchors.delete(this.#epoch);
    this.#epoch++;
    this.#leadSec = undefined;
  }

  /** The current epoch's anchor, if a segmenter started in it. */
  get anchor(): HlsTimelineAnchor | undefined {
    return this.#anchors.get(this.#epoch);
  }

  /** The current epoch's anchor, `proposed` becoming it when no segmenter started yet. */
  anchorOr(proposed: HlsTimelineAnchor): HlsTimelineAnchor {
    let anchor = this.#anchors.get(this.#epoch);
    if (!anchor) this.#anchors.set(this.#epoch, anchor = proposed);
    return anchor;
  }

  /**
   * A video segmenter (`who`) starts segment `msn` at output time `sec`; kept when `who`
   * leads (the first to report, until it lets go).
   */
  cut(who: object, sec: number, msn: number): void {
    this.#leader ??= who;
    if (this.#leader !== who) return;
    this.#cuts.push({ sec, msn });
    if (this.#cuts.length > maxCuts) this.#cuts.shift();
  }

  /** Output time of the latest frame of the leading video: cuts up to it are known. */
  get leadSec(): number | undefined {
    return this.#leadSec;
  }

  /** `who` took a video frame at output time `sec`; kept when it leads. */
  advance(who: object, sec: number): void {
    if (this.#leader === who) this.#leadSec = sec;
  }

  /** `who` ends: another video segmenter may lead. */
  release(who: object): void {
    if (this.#leader === who) this.#leader = undefined;
  }

  /** The latest cut at or before `sec`. */
  cutAtOrBefore(sec: number): HlsTimelineCut | undefined {
    for (let i = this.#cuts.length - 1; i >= 0; i--) {
      if (this.#cuts[i].sec <= sec) return this.#cuts[i];
    }
    return undefined;
  }

  /** The first cut after `sec`. */
  cutAfter(sec: number): HlsTimelineCut | undefined {
    return this.#cuts.find((c) => c.sec > sec);
  }
}
