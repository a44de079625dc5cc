/**
 * Decode times for MPEG-TS video senders whose PES packets carry a PTS only: the demuxer then
 * gives dts = pts, which goes back and forth with B-frames. Such a sender shows itself by a
 * presentation time going back while none of its frames had a decode time of its own; from
 * the next keyframe on decode times are derived from the presentation times, as for RTP
 * sources (the frames up to it are dropped: their decode times cannot be made to rise).
 */
import { VideoDtsDeriver } from "../codecs/dts_deriver.ts";
import type { MediaFrame, Track } from "../frame.ts";

interface TrackState {
  lastPts: number;
  /** A frame had dts != pts: the sender writes decode times. */
  hasDts: boolean;
  deriver?: VideoDtsDeriver;
  /** The deriver has had its first keyframe. */
  started?: boolean;
}

/** Fills missing decode times of one sender's video tracks. */
export class PesDtsFiller {
  #tracks = new Map<number, TrackState>();

  /** Video tracks whose decode times are derived. */
  get derived(): number {
    return [...this.#tracks.values()].filter((s) => s.deriver).length;
  }

  /**
   * Sets `frame.dts` when its sender gives none; `track` is the frame's (video) track. False
   * when the frame is to be dropped (between the discovery and the next keyframe).
   */
  fill(frame: MediaFrame, track: Track): boolean {
    let state = this.#tracks.get(frame.trackId);
    if (!state) this.#tracks.set(frame.trackId, state = { lastPts: -Infinity, hasDts: false });
    if (frame.dts !== frame.pts) state.hasDts = true;
    else if (!state.hasDts && !state.deriver && frame.pts < state.lastPts) {
      state.deriver = new VideoDtsDeriver(track);
      state.started = false;
    }
    state.lastPts = frame.pts;
    if (!state.deriver) return true;
    if (!state.started && !frame.keyframe) return false;
    state.started = true;
    state.deriver.derive(frame);
    return true;
  }
}
