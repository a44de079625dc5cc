/**
 * Places the RTP timestamps of a stream's tracks on one timeline, in each track's clock.
 *
 * A session (one PLAY) anchors each track where it starts: at the RTP-Info rtptime, which
 * names the same instant for every track, else at the packet's arrival. Once every track
 * has a sender report, the tracks are realigned on the sender's NTP clock (RFC 3550 §6.4.1)
 * relative to the reference track (the first video track), if they were off by more than
 * `syncToleranceMs`. A new session after a reconnect starts where the wall clock is, so the
 * timeline of the stream only moves forward.
 */
import type { Track } from "../frame.ts";
import type { SenderReport } from "./rtcp.ts";

/** Misalignment between tracks that sender reports correct, in milliseconds. */
export const syncToleranceMs = 20;

const twoTo32 = 0x1_0000_0000;

interface TrackState {
  clockRate: number;
  /** Last unwrapped RTP timestamp, or undefined before the first packet. */
  last: number | undefined;
  /** pts = unwrapped RTP timestamp + offset. */
  offset: number;
  /** RTP-Info rtptime of this session, if the server gave one. */
  rtpInfo: number | undefined;
  /** Latest sender report: NTP ms and the unwrapped RTP timestamp of that instant. */
  report: { ntpMs: number; rtp: number } | undefined;
}

/** The timeline of one stream across its sessions. */
export class RtpTimeline {
  /** Times the sender reports moved a track by more than the tolerance. */
  corrections = 0;
  #tracks: TrackState[];
  #reference: number;
  #originMs: number | undefined;
  #sessionStartMs: number | undefined;
  #aligned = false;

  /** `tracks`: the stream's tracks, indexed by id. */
  constructor(tracks: readonly Track[]) {
    this.#tracks = tracks.map((t) => ({
      clockRate: t.clockRate,
      last: undefined,
      offset: 0,
      rtpInfo: undefined,
      report: undefined,
    }));
    const video = tracks.findIndex((t) => t.kind === "video");
    this.#reference = video >= 0 ? video : 0;
  }

  /** Starts a session; `rtpInfo[i]` is track i's RTP-Info rtptime, when given. */
  startSession(rtpInfo: readonly (number | undefined)[]): void {
    this.#sessionStartMs = undefined;
    this.#aligned = false;
    this.#tracks.forEach((t, i) => {
      t.last = undefined;
      t.report = undefined;
      t.rtpInfo = rtpInfo[i];
    });
  }

  /** The timeline position of an RTP timestamp of track `id`, in the track's clock. */
  pts(id: number, rtpTimestamp: number): number {
    const t = this.#tracks[id];
    if (t.last === undefined) {
      t.last = rtpTimestamp;
      this.#anchor(t, rtpTimestamp);
    } else {
      t.last = unwrap(t.last, rtpTimestamp);
    }
    return t.last + t.offset;
  }

  /** Takes a sender report of track `id`. */
  senderReport(id: number, report: SenderReport): void {
    const t = this.#tracks[id];
    if (t.last === undefined) return;
    t.report = { ntpMs: report.ntpMs, rtp: unwrap(t.last, report.rtpTimestamp) };
    if (!this.#aligned && this.#tracks.every((s) => s.report !== undefined)) this.#align();
  }

  #anchor(t: TrackState, rtp: number): void {
    const now = performance.now();
    this.#originMs ??= now;
    this.#sessionStartMs ??= now;
    const sessionTicks = (this.#sessionStartMs - this.#originMs) * t.clockRate / 1000;
    if (t.rtpInfo !== undefined) {
      t.offset = Math.round(sessionTicks - unwrap(rtp, t.rtpInfo));
    } else {
      const arrivalTicks = (now - this.#sessionStartMs) * t.clockRate / 1000;
      t.offset = Math.round(sessionTicks + arrivalTicks - rtp);
    }
  }

  #align(): void {
    this.#aligned = true;
    const ref = this.#tracks[this.#reference];
    const refReport = ref.report!;
    for (const t of this.#tracks) {
      if (t === ref) continue;
      const report = t.report!;
      // Reference timeline position, in seconds, of this track's report instant.
      const refSec = (refReport.rtp + (report.ntpMs - refReport.ntpMs) * ref.clockRate / 1000 +
        ref.offset) / ref.clockRate;
      const offset = Math.round(refSec * t.clockRate - report.rtp);
      if (Math.abs(offset - t.offset) * 1000 / t.clockRate > syncToleranceMs) {
        t.offset = offset;
        this.corrections++;
      }
    }
  }
}

/** The 32-bit timestamp `ts` unwrapped to the value nearest `near`. */
function unwrap(near: number, ts: number): number {
  const diff = ((ts - near) % twoTo32 + twoTo32 + twoTo32 / 2) % twoTo32 - twoTo32 / 2;
  return near + diff;
}
