/**
 * The HLS segmenter: the frames of one variant in, MPEG-TS or fMP4 segments (and LL-HLS
 * parts) and the media playlist out, all in memory (hls_segmenter_api.ts is the contract).
 *
 * Timeline: output timestamps start at 0 on the first keyframe and continue across
 * discontinuities (a restarted publisher's clock is shifted to follow the previous segment),
 * so players never see time go back. Each segment's and part's bytes are built once, when it
 * closes; a complete segment's parts are then views into the segment's bytes.
 */

import { bodyReleased } from "./hls_body_release.ts";
import { BadRequestError } from "../../../core/errors.ts";
import type { MediaFrame, Track } from "../../frame.ts";
import { findH264ParameterSets, parseH264Sps } from "../../codecs/h264.ts";
import { findH265ParameterSets, parseH265Sps } from "../../codecs/h265.ts";
import { TsMuxer } from "../../formats/mpegts/muxer.ts";
import { Fmp4Writer } from "../../formats/mp4/fmp4_writer.ts";
import { mediaPlaylist, type PlaylistSegment } from "../../formats/hls/playlist.ts";
import { avcCodecString, codecString, hevcCodecString } from "../../formats/hls/codec_string.ts";
import { concatBytes } from "../../../signaling/websocket/bytes.ts";
import type { HlsTimeline, HlsTimelineAnchor } from "./hls_timeline.ts";
import type {
  HlsSegmenter,
  HlsSegmenterMetrics,
  HlsSegmenterOptions,
  HlsVariantInfo,
} from "./hls_segmenter_api.ts";

/** A track's codec cannot be carried in the asked container (H.265 or Opus in MPEG-TS). */
export class HlsCodecError extends BadRequestError {
  constructor(message: string) {
    super("codec", message);
  }
}

/**
 * A segment is cut without a keyframe once it is this many target durations long, so memory
 * stays bounded when a source sends no keyframe (the cut is counted in `forcedCuts`); a jump
 * of the source clock by more than this, or audio going on this long (plus one target) after
 * video stopped, is treated as a discontinuity.
 */
const forcedCutTargets = 3;
/** Frames of a variant's primary track (video, else audio) further apart than this are a gap (metrics). */
const gapSec = 1;
/** Span of one fps measurement window, in seconds. */
const fpsWindowSec = 1;
/** Parts stay listed this many target durations from the live edge (RFC 8216bis 4.4.4.9). */
const partListedTargets = 3;
/**
 * CAN-SKIP-UNTIL of delta updates, in target durations (the least RFC 8216bis 4.4.3.8
 * allows); advertised only when the window is longer, so a delta can skip something.
 */
export const skipUntilTargets = 6;
/** Durations computed from clock ticks carry float noise. */
const epsilonSec = 1e-6;
/** Frame duration assumed until two video frames were seen, in seconds. */
const defaultFrameSec = 1 / 25;
/** The fMP4 writer emits a fragment only when asked (one per part or segment). */
const noAutoFragmentMs = Number.POSITIVE_INFINITY;

interface Part {
  bytes: Uint8Array;
  durationSec: number;
  independent: boolean;
}

interface Segment {
  msn: number;
  /** Output time of the first frame, in seconds. */
  startSec: number;
  programDateMs: number;
  discontinuity: boolean;
  /** Complete parts (LL-HLS); bytes of every closed piece otherwise (one). */
  parts: Part[];
  /** Set when the segment is complete. */
  bytes?: Uint8Array;
  durationSec: number;
  videoFrames: number;
}

interface Waiter {
  msn: number;
  part: number | undefined;
  resolve: (ok: boolean) => void;
  timer: ReturnType<typeof setTimeout> | undefined;
}

/** The segmenter with a count of the segments cut without a keyframe. */
export interface MemoryHlsSegmenter extends HlsSegmenter {
  /** Segments cut without a keyframe because none came for 3 target durations. */
  readonly forcedCuts: number;
}

/** A segmenter for the tracks and container of `options`; throws HlsCodecError when they do not fit. */
export function createHlsSegmenter(options: HlsSegmenterOptions): MemoryHlsSegmenter {
  return new Segmenter(options);
}

class Segmenter implements MemoryHlsSegmenter {
  #targetSec: number;
  #partSec: number;
  #window: number;
  #ext: string;
  #video?: Track;
  #audio?: Track;
  #primary: Track;
  /** Shared with the output's other segmenters when its audio is served apart. */
  #timeline?: HlsTimeline;
  /** An audio-only segmenter on a timeline: starts and cuts where the leading video does. */
  #follower: boolean;
  /** The next segment takes the timeline's anchor (first start, a new publisher). */
  #anchorPending = true;
  /** A follower's audio waiting for the leading video to pass its time. */
  #held: MediaFrame[] = [];
  #ts?: TsMuxer;
  #fmp4?: Fmp4Writer;
  #init?: Uint8Array;
  #segments: Segment[] = [];
  #current?: Segment;
  #nextMsn = 0;
  #discontinuitySequence = 0;
  #pendingDiscontinuity = false;
  /** MPEG-TS bytes of the part (or whole segment) in progress. */
  #chunks: Uint8Array[] = [];
  #partStartSec = 0;
  #partIndependent = false;
  #queued = 0;
  /** Output time = input time + offset, in seconds. */
  #offsetSec: number | undefined;
  #lastPrimarySec = 0;
  #frameSec = defaultFrameSec;
  /** Latest output dts per track id, in its clock, to drop frames that go back in time. */
  #lastOutDts = new Map<number, number>();
  #anchorWallMs = 0;
  #anchorSec = 0;
  #waiters = new Set<Waiter>();
  #ended = false;
  #playlist?: string;
  #deltaPlaylist?: string;
  #variant?: HlsVariantInfo;
  #peakBandwidth = 0;
  #forcedCuts = 0;
  // Input facts (metrics and variant).
  #videoSps?: Uint8Array;
  #width?: number;
  #height?: number;
  #resolutionChanges = 0;
  #keyframeReceived = false;
  #startPtsMs: number | undefined;
  #currentPtsMs = 0;
  #gaps = 0;
  #firstMeasuredSec: number | undefined;
  #lastMeasuredSec: number | undefined;
  #measuredFrames = 0;
  #fpsWindowStartSec: number | undefined;
  #fpsWindowFrames = 0;
  #minFps = Infinity;
  #maxFps = 0;

  constructor(o: HlsSegmenterOptions) {
    this.#targetSec = o.targetDurationSec;
    this.#partSec = o.partDurationMs / 1000;
    this.#window = Math.max(1, Math.floor(o.windowSegments));
    this.#ext = o.container === "ts" ? "ts" : "m4s";
    if (!(this.#targetSec > 0)) throw new BadRequestError("targetDurationSec", "must be > 0");
    if (!(this.#partSec >= 0)) throw new BadRequestError("partDurationMs", "must be >= 0");
    this.#video = o.tracks.find((t) => t.kind === "video");
    this.#audio = o.tracks.find((t) => t.kind === "audio");
    const primary = this.#video ?? this.#audio;
    if (!primary) throw new HlsCodecError("an HLS variant needs a video or an audio track");
    this.#primary = primary;
    this.#timeline = o.timeline;
    this.#follower = o.timeline !== undefined && !this.#video;
    const video = this.#video?.codec;
    const audio = this.#audio?.codec;
    if (video !== undefined && video !== "H264" && video !== "H265") {
      throw new HlsCodecError(`video codec ${video} is not served over HLS`);
    }
    if (audio !== undefined && audio !== "AAC" && audio !== "OPUS") {
      throw new HlsCodecError(`audio codec ${audio} is not served over HLS`);
    }
    const tracks = [this.#video, this.#audio].filter((t): t is Track => t !== undefined);
    if (o.container === "ts") {
      if (video === "H265") throw new HlsCodecError("H.265 is served in fMP4 segments only");
      if (audio === "OPUS") throw new HlsCodecError("Opus is served in fMP4 segments only");
      this.#ts = new TsMuxer({ tracks });
    } else {
      this.#fmp4 = new Fmp4Writer({ tracks, fragmentDurationMs: noAutoFragmentMs });
    }
    const config = this.#video?.config;
    if (config?.codec === "H264" || config?.codec === "H265") this.#noteSps(config.sps[0]);
  }

  get ended(): boolean {
    return this.#ended;
  }

  get forcedCuts(): number {
    return this.#forcedCuts;
  }

  get #lowLatency(): boolean {
    return this.#partSec > 0;
  }

  push(frame: MediaFrame): void {
    if (this.#ended) return;
    if (this.#follower) {
      if (frame.trackId !== this.#audio!.id) return;
      this.#held.push(frame);
      this.#releaseHeld(false);
      return;
    }
    this.#take(frame);
  }

  /**
   * Takes a follower's held audio once the leading video has passed its time (so its cuts
   * there are known), or once held for `followerHoldTargets`, or all of it (`all`: the end
   * or a new publisher, when audio starting after the video's last frame is dropped, so the
   * rendition ends with the variants instead of making a longer segment).
   */
  #releaseHeld(all: boolean): void {
    const timeline = this.#timeline!;
    const clock = this.#audio!.clockRate;
    const anchor = timeline.anchor;
    const lead = timeline.leadSec;
    const newestSec = (this.#held.at(-1)?.dts ?? 0) / clock;
    while (this.#held.length > 0) {
      const inSec = this.#held[0].dts / clock;
      const passed = anchor !== undefined && lead !== undefined &&
        inSec + anchor.offsetSec + this.#frameSec / 2 <= lead;
      if (!all && !passed && newestSec - inSec < followerHoldTargets * this.#targetSec) break;
      const frame = this.#held.shift()!;
      const tail = all && anchor !== undefined && lead !== undefined &&
        inSec + anchor.offsetSec > lead;
      if (!tail) this.#take(frame);
    }
  }

  #take(frame: MediaFrame): void {
    const track = frame.trackId === this.#video?.id
      ? this.#video
      : frame.trackId === this.#audio?.id
      ? this.#audio
      : undefined;
    if (!track) return;
    this.#measure(frame, track);
    const primary = track === this.#primary;
    const clock = track.clockRate;
    if (primary && this.#current && this.#offsetSec !== undefined) {
      // A source clock that jumps (restart, wrap) would make a huge or negative segment.
      const sec = frame.dts / clock + this.#offsetSec;
      if (sec < this.#lastPrimarySec - gapSec || sec > this.#lastPrimarySec + this.#forcedSec) {
        this.#discontinue();
      }
    }
    if (!this.#current) {
      if (!primary || (track.kind === "video" && !frame.keyframe)) return;
      const inSec = frame.dts / clock;
      const discontinuity = this.#pendingDiscontinuity;
      const proposedSec = this.#offsetSec === undefined
        ? -inSec
        : discontinuity
        ? this.#lastPrimarySec + this.#frameSec - inSec
        : this.#offsetSec;
      let anchor: HlsTimelineAnchor | undefined;
      if (this.#timeline && this.#anchorPending) {
        anchor = this.#follower ? this.#followerStart(inSec) : this.#timeline.anchorOr({
          offsetSec: proposedSec,
          wallMs: Date.now(),
          anchorSec: inSec + proposedSec,
        });
        if (!anchor) return;
        this.#anchorPending = false;
      }
      this.#offsetSec = anchor?.offsetSec ?? proposedSec;
      this.#pendingDiscontinuity = false;
      this.#startSegment(inSec + this.#offsetSec, discontinuity, anchor);
    }
    const shift = Math.round(this.#offsetSec! * clock);
    const dts = frame.dts + shift;
    const last = this.#lastOutDts.get(track.id);
    if (!primary && last !== undefined && dts <= last) return;
    this.#lastOutDts.set(track.id, dts);
    const out: MediaFrame = { ...frame, pts: frame.pts + shift, dts };
    if (!primary) {
      // Audio going on while video stopped would grow the segment without bound: the segment
      // ends, and the variant waits for a keyframe (a discontinuity) as after a restart.
      if (dts / clock - this.#current!.startSec > this.#forcedSec + this.#targetSec) {
        return this.#discontinue();
      }
      return this.#write(out, track);
    }

    const sec = dts / clock;
    if (track === this.#video) this.#timeline?.advance(this, sec);
    const current = this.#current!;
    const segmentSec = sec - current.startSec;
    const keyframe = track.kind === "audio" || frame.keyframe;
    // Video cuts at the first keyframe at or past the target; audio before overflowing it,
    // or, following a timeline, at the frame nearest to the leading video's next cut.
    const due = track.kind === "video"
      ? segmentSec >= this.#targetSec - epsilonSec
      : this.#follower
      ? this.#followerDue(sec, segmentSec)
      : segmentSec + this.#frameSec > this.#targetSec + epsilonSec;
    const forced = !keyframe && segmentSec >= this.#forcedSec;
    const partDue = this.#lowLatency && sec > this.#partStartSec &&
      sec + this.#frameSec - this.#partStartSec > this.#partSec + epsilonSec;
    if (sec > this.#lastPrimarySec && sec - this.#lastPrimarySec < gapSec) {
      this.#frameSec = sec - this.#lastPrimarySec;
    }
    this.#lastPrimarySec = sec;
    if ((due && keyframe) || forced) {
      if (forced) this.#forcedCuts++;
      this.#cut(out, track, sec, true);
    } else if (partDue) {
      this.#cut(out, track, sec, false);
    } else {
      this.#write(out, track);
    }
  }

  get #forcedSec(): number {
    return forcedCutTargets * this.#targetSec;
  }

  discontinuity(): void {
    // The previous publisher's held audio belongs before the discontinuity.
    if (this.#follower) this.#releaseHeld(true);
    this.#anchorPending = true;
    this.#discontinue();
  }

  /**
   * Closes the segment in progress; the next one starts after `#EXT-X-DISCONTINUITY` (on the
   * timeline's anchor only after `discontinuity()`: a clock jump of one track is its own).
   */
  #discontinue(): void {
    // After the end it reopens: a publisher back under the same name continues the numbering,
    // so players and caches never see a media sequence number used twice.
    this.#ended = false;
    this.#changed();
    if (this.#current) this.#finishSegment();
    if (this.#nextMsn > 0) this.#pendingDiscontinuity = true;
  }

  end(): void {
    if (this.#ended) return;
    if (this.#follower) this.#releaseHeld(true);
    if (this.#current) this.#finishSegment();
    this.#ended = true;
    this.#timeline?.release(this);
    this.#changed();
    for (const w of this.#waiters) {
      clearTimeout(w.timer);
      w.resolve(false);
    }
    this.#waiters.clear();
  }

  playlist(delta = false): string {
    if (delta && this.#canSkip) {
      this.#deltaPlaylist ??= this.#makePlaylist(true);
      return this.#deltaPlaylist;
    }
    this.#playlist ??= this.#makePlaylist(false);
    return this.#playlist;
  }

  get edge(): { msn: number; part?: number } | undefined {
    const current = this.#current;
    if (this.#lowLatency && current && current.parts.length > 0) {
      return { msn: current.msn, part: current.parts.length - 1 };
    }
    const last = this.#segments.at(-1);
    if (!last) return undefined;
    return { msn: last.msn, part: this.#lowLatency ? last.parts.length - 1 : undefined };
  }

  /** Delta updates can skip segments: LL-HLS, with a window longer than CAN-SKIP-UNTIL. */
  get #canSkip(): boolean {
    return this.#lowLatency && this.#window > skipUntilTargets;
  }

  /** The playlists change: made again when next asked for. */
  #changed(): void {
    this.#playlist = undefined;
    this.#deltaPlaylist = undefined;
  }

  init(): Uint8Array | undefined {
    return this.#init;
  }

  segment(msn: number): Uint8Array | undefined {
    return this.#complete(msn)?.bytes;
  }

  part(msn: number, part: number): Uint8Array | undefined {
    const segment = this.#complete(msn) ?? (this.#current?.msn === msn ? this.#current : undefined);
    return segment?.parts[part]?.bytes;
  }

  ready(msn: number, part: number | undefined, timeoutMs: number): Promise<boolean> {
    const p = this.#lowLatency ? part : undefined;
    if (this.#isReady(msn, p)) return Promise.resolve(true);
    if (this.#ended) return Promise.resolve(false);
    return new Promise((resolve) => {
      const waiter: Waiter = { msn, part: p, resolve, timer: undefined };
      waiter.timer = setTimeout(() => {
        this.#waiters.delete(waiter);
        resolve(false);
      }, timeoutMs);
      this.#waiters.add(waiter);
    });
  }

  get variant(): HlsVariantInfo | undefined {
    return this.#variant;
  }

  get metrics(): HlsSegmenterMetrics {
    const span = (this.#lastMeasuredSec ?? 0) - (this.#firstMeasuredSec ?? 0);
    const avg = span > 0 ? (this.#measuredFrames - 1) / span : 0;
    return {
      minFPS: round2(Number.isFinite(this.#minFps) ? this.#minFps : 0),
      avgFPS: round2(avg),
      maxFPS: round2(this.#maxFps),
      countGaps: this.#gaps,
      resolutionChanges: this.#resolutionChanges,
      queueSize: this.#queued,
      startPts: this.#startPtsMs ?? 0,
      currentPts: this.#currentPtsMs,
      keyFrameReceived: this.#keyframeReceived,
    };
  }

  #complete(msn: number): Segment | undefined {
    const first = this.#segments[0]?.msn;
    return first === undefined ? undefined : this.#segments[msn - first];
  }

  #isReady(msn: number, part: number | undefined): boolean {
    const first = this.#segments[0]?.msn;
    if (first !== undefined && msn < first) return true;
    const segment = this.#complete(msn);
    if (segment) {
      if (part === undefined || part < segment.parts.length) return true;
      // RFC 8216bis 6.2.5.2: a part index past the last part names part 0 of the next segment.
      return this.#isReady(msn + 1, 0);
    }
    return part !== undefined && this.#current?.msn === msn && part < this.#current.parts.length;
  }

  #notify(): void {
    this.#changed();
    for (const w of this.#waiters) {
      if (!this.#isReady(w.msn, w.part)) continue;
      clearTimeout(w.timer);
      this.#waiters.delete(w);
      w.resolve(true);
    }
  }

  #startSegment(sec: number, discontinuity: boolean, anchor?: HlsTimelineAnchor): void {
    if (anchor) {
      this.#anchorWallMs = anchor.wallMs;
      this.#anchorSec = anchor.anchorSec;
    } else if (discontinuity || this.#nextMsn === 0) {
      this.#anchorWallMs = Date.now();
      this.#anchorSec = sec;
    }
    if (this.#video) this.#timeline?.cut(this, sec, this.#nextMsn);
    this.#current = {
      msn: this.#nextMsn++,
      startSec: sec,
      programDateMs: Math.round(this.#anchorWallMs + (sec - this.#anchorSec) * 1000),
      discontinuity,
      parts: [],
      durationSec: 0,
      videoFrames: 0,
    };
    this.#partStartSec = sec;
    this.#partIndependent = true;
    this.#changed();
    // Every segment starts with PAT and PMT, so it decodes alone (a forced cut, audio only).
    this.#ts?.requestPsi();
  }

  #write(frame: MediaFrame, track: Track): void {
    if (this.#ts) this.#chunks.push(this.#ts.mux(frame));
    else this.#fmp4!.push(frame);
    this.#queued++;
    if (track.kind === "video") this.#current!.videoFrames++;
  }

  /** Closes the part (and the segment, when `segment`) before `frame`, which starts the next. */
  #cut(frame: MediaFrame, track: Track, sec: number, segment: boolean): void {
    // The fMP4 writer knows a sample's duration once the next one of its track is pushed.
    if (this.#fmp4) this.#fmp4.push(frame);
    this.#closePart(sec, false);
    if (segment) {
      this.#closeSegment(sec);
      this.#startSegment(sec, false);
    }
    this.#partStartSec = sec;
    this.#partIndependent = track.kind === "audio" || frame.keyframe;
    if (this.#ts) this.#chunks.push(this.#ts.mux(frame));
    this.#queued = 1;
    if (track.kind === "video") this.#current!.videoFrames++;
  }

  /** Closes the segment in progress with every frame pushed (end or discontinuity). */
  #finishSegment(): void {
    const endSec = this.#lastPrimarySec + this.#frameSec;
    this.#closePart(endSec, true);
    this.#closeSegment(endSec);
    this.#queued = 0;
  }

  #closePart(endSec: number, final: boolean): void {
    let bytes: Uint8Array;
    if (this.#ts) {
      bytes = concatBytes(this.#chunks);
      this.#chunks = [];
    } else {
      bytes = this.#takeFragment(final ? this.#fmp4!.finish() : this.#fmp4!.flush());
    }
    if (bytes.length === 0) return;
    this.#current!.parts.push({
      bytes,
      durationSec: endSec - this.#partStartSec,
      independent: this.#partIndependent,
    });
    if (this.#lowLatency) this.#notify();
  }

  /** The fragment of a writer output, the init segment (first output) kept apart. */
  #takeFragment(out: Uint8Array | undefined): Uint8Array {
    if (!out) return new Uint8Array(0);
    if (this.#init) return out;
    let at = 0;
    const view = new DataView(out.buffer, out.byteOffset, out.byteLength);
    while (at + 8 <= out.length && view.getUint32(at + 4) !== moofType) at += view.getUint32(at);
    this.#init = out.slice(0, at);
    return out.subarray(at);
  }

  #closeSegment(endSec: number): void {
    const segment = this.#current!;
    this.#current = undefined;
    segment.durationSec = endSec - segment.startSec;
    segment.bytes = segment.parts.length === 1
      ? segment.parts[0].bytes
      : concatBytes(segment.parts.map((p) => p.bytes));
    if (this.#lowLatency) {
      // Parts become views of the segment's bytes, so each byte is held once.
      let at = 0;
      for (const part of segment.parts) {
        if (part.bytes !== segment.bytes) bodyReleased(part.bytes);
        part.bytes = segment.bytes.subarray(at, at + part.bytes.length);
        at += part.bytes.length;
      }
    } else {
      segment.parts = [];
    }
    if (segment.bytes.length === 0) return;
    this.#segments.push(segment);
    while (this.#segments.length > this.#window) {
      const gone = this.#segments.shift()!;
      if (gone.discontinuity) this.#discontinuitySequence++;
      // Out of the window: no longer served (a 404), so copies kept for sending can go.
      bodyReleased(gone.bytes!);
      for (const part of gone.parts) bodyReleased(part.bytes);
    }
    this.#updateVariant(segment);
    this.#notify();
  }

  #updateVariant(latest: Segment): void {
    if (latest.durationSec > epsilonSec) {
      this.#peakBandwidth = Math.max(
        this.#peakBandwidth,
        latest.bytes!.length * 8 / latest.durationSec,
      );
    }
    let bytes = 0;
    let sec = 0;
    let frames = 0;
    for (const s of this.#segments) {
      bytes += s.bytes!.length;
      sec += s.durationSec;
      frames += s.videoFrames;
    }
    const codecs: string[] = [];
    if (this.#video) {
      const sps = this.#videoSps;
      const video = sps
        ? (this.#video.codec === "H264" ? avcCodecString(sps) : hevcCodecString(sps))
        : codecString(this.#video.config);
      if (video) codecs.push(video);
    }
    const audio = this.#audio && codecString(this.#audio.config);
    if (audio) codecs.push(audio);
    this.#variant = {
      bandwidth: Math.round(this.#peakBandwidth),
      averageBandwidth: Math.round(sec > 0 ? bytes * 8 / sec : this.#peakBandwidth),
      codecs: codecs.join(","),
      width: this.#width ?? this.#video?.width,
      height: this.#height ?? this.#video?.height,
      frameRate: this.#video && sec > 0 ? round2(frames / sec) : undefined,
    };
  }

  /**
   * The anchor a follower starts on: once the leading video has started a segment at or
   * before the frame at `inSec` (the nearest frame to that cut starts), numbered as that
   * segment; undefined while the frame is earlier.
   */
  #followerStart(inSec: number): HlsTimelineAnchor | undefined {
    const anchor = this.#timeline!.anchor;
    if (!anchor) return undefined;
    const cut = this.#timeline!.cutAtOrBefore(inSec + anchor.offsetSec + this.#frameSec / 2);
    if (!cut) return undefined;
    if (this.#nextMsn === 0) this.#nextMsn = cut.msn;
    return anchor;
  }

  /**
   * A follower's segment ends at the frame nearest to the leading video's next cut, taking
   * that segment's number; without one for 3 target durations (no video), it ends anyway.
   */
  #followerDue(sec: number, segmentSec: number): boolean {
    const next = this.#timeline!.cutAfter(this.#current!.startSec + this.#frameSec / 2);
    if (next && sec + this.#frameSec / 2 >= next.sec) {
      this.#nextMsn = Math.max(this.#nextMsn, next.msn);
      return true;
    }
    return segmentSec >= this.#forcedSec;
  }

  #makePlaylist(delta: boolean): string {
    const ext = this.#ext;
    const listParts = (s: Segment) =>
      s.parts.map((p, i) => ({
        uri: `${s.msn}.${i}.${ext}`,
        durationSec: p.durationSec,
        independent: p.independent,
      }));
    const current = this.#current;
    // The oldest complete segment whose parts are listed: those near the live edge.
    let partsFrom = this.#segments.length;
    let fromEdgeSec = current?.parts.reduce((sum, p) => sum + p.durationSec, 0) ?? 0;
    while (
      this.#lowLatency && partsFrom > 0 && fromEdgeSec < partListedTargets * this.#targetSec
    ) {
      fromEdgeSec += this.#segments[--partsFrom].durationSec;
    }
    const segments: PlaylistSegment[] = this.#segments.map((s, i) => ({
      uri: `${s.msn}.${ext}`,
      durationSec: s.durationSec,
      programDateTimeMs: s.programDateMs,
      discontinuity: s.discontinuity,
      parts: i >= partsFrom ? listParts(s) : undefined,
    }));
    if (this.#lowLatency && current) {
      segments.push({
        durationSec: 0,
        programDateTimeMs: current.programDateMs,
        discontinuity: current.discontinuity,
        parts: listParts(current),
      });
    }
    return mediaPlaylist({
      targetDurationSec: this.#targetSec,
      // A follower ends its segments at the audio frame nearest the video's cut.
      targetSlackSec: this.#follower ? this.#frameSec : undefined,
      mediaSequence: this.#segments[0]?.msn ?? current?.msn ?? this.#nextMsn,
      discontinuitySequence: this.#discontinuitySequence,
      mapUri: this.#fmp4 ? "init.mp4" : undefined,
      segments,
      partTargetSec: this.#lowLatency ? this.#partSec : undefined,
      preloadHintUri: this.#lowLatency && current
        ? `${current.msn}.${current.parts.length}.${ext}`
        : undefined,
      ended: this.#ended,
      skipUntilSec: this.#canSkip ? skipUntilTargets * this.#targetSec : undefined,
      delta,
    });
  }

  /** Input facts: pts range, fps windows, gaps, picture size from in-band SPS. */
  #measure(frame: MediaFrame, track: Track): void {
    const ptsMs = Math.round(frame.pts * 1000 / track.clockRate);
    this.#startPtsMs ??= ptsMs;
    this.#currentPtsMs = ptsMs;
    if (track.kind === "audio" && !this.#video) this.#keyframeReceived = true;
    if (track.kind === "video" && frame.keyframe) {
      this.#keyframeReceived = true;
      const sets = track.codec === "H264"
        ? findH264ParameterSets(frame.data)
        : findH265ParameterSets(frame.data);
      if (sets.sps.length) this.#noteSps(sets.sps[0]);
    }
    // Rates and gaps are the primary track's: video, or the audio of an audio-only variant.
    if (track !== this.#primary) return;
    const sec = frame.dts / track.clockRate;
    const last = this.#lastMeasuredSec;
    if (last !== undefined && Math.abs(sec - last) > gapSec) {
      this.#gaps++;
      this.#fpsWindowStartSec = undefined;
    }
    this.#firstMeasuredSec ??= sec;
    this.#lastMeasuredSec = sec;
    this.#measuredFrames++;
    if (this.#fpsWindowStartSec === undefined) {
      this.#fpsWindowStartSec = sec;
      this.#fpsWindowFrames = 0;
    } else if (sec - this.#fpsWindowStartSec >= fpsWindowSec) {
      const fps = this.#fpsWindowFrames / (sec - this.#fpsWindowStartSec);
      this.#minFps = Math.min(this.#minFps, fps);
      this.#maxFps = Math.max(this.#maxFps, fps);
      this.#fpsWindowStartSec = sec;
      this.#fpsWindowFrames = 0;
    }
    this.#fpsWindowFrames++;
  }

  /** Keeps the latest SPS and counts picture size changes. */
  #noteSps(sps: Uint8Array | undefined): void {
    if (!sps || sameBytes(sps, this.#videoSps)) return;
    this.#videoSps = sps;
    let size: { width: number; height: number };
    try {
      size = this.#video!.codec === "H264" ? parseH264Sps(sps) : parseH265Sps(sps);
    } catch {
      return; // A damaged SPS changes nothing we report.
    }
    if (
      this.#width !== undefined && (size.width !== this.#width || size.height !== this.#height)
    ) {
      this.#resolutionChanges++;
    }
    this.#width = size.width;
    this.#height = size.height;
  }
}

/**
 * Longest a follower holds its audio for the leading video to pass its time (and so to know
 * where it cuts), in target durations; past it the audio goes on without knowing.
 */
const followerHoldTargets = 1;

/** "moof" as a big-endian u32. */
const moofType = 0x6d6f6f66;

function sameBytes(a: Uint8Array, b: Uint8Array | undefined): boolean {
  if (!b || a.length !== b.length) return false;
  for (let i = 0; i < a.length; i++) if (a[i] !== b[i]) return false;
  return true;
}

function round2(n: number): number {
  return Math.round(n * 100) / 100;
}
