/**
 * The contract between the HLS segmenter (frames of one rendition in, segments and a media
 * playlist out: segmenter.ts) and the HLS server (URLs, viewers, REST: core/hls_registry.ts,
 * hls_http.ts). One segmenter per variant of an HLS output.
 *
 * URIs in a media playlist are relative to the playlist's own URL:
 * - segments `<msn>.ts` (MPEG-TS) or `<msn>.m4s` (fMP4), msn = media sequence number;
 * - LL-HLS parts `<msn>.<part>.ts` / `<msn>.<part>.m4s`;
 * - the fMP4 initialization segment `init.mp4` (`#EXT-X-MAP`).
 */
import type { MediaFrame, Track } from "../../frame.ts";
import type { HlsTimeline } from "./hls_timeline.ts";

/** Segment container: MPEG-TS (what WCS serves, the default) or fMP4/CMAF. */
export type HlsContainer = "ts" | "fmp4";

/** What a segmenter is built from. */
export interface HlsSegmenterOptions {
  /** The tracks of the frames pushed (ids as in their stream); at most one video, one audio. */
  tracks: readonly Track[];
  container: HlsContainer;
  /** Target segment duration, in seconds: a segment ends at the first video keyframe past it. */
  targetDurationSec: number;
  /** LL-HLS part duration, in milliseconds; 0 makes no parts (plain HLS). */
  partDurationMs: number;
  /** Complete segments kept (in the playlist and in memory); older ones are forgotten. */
  windowSegments: number;
  /**
   * Shared by the segmenters of an output whose audio is served apart: one time origin and
   * wall clock; an audio-only segmenter cuts where the leading video one does.
   */
  timeline?: HlsTimeline;
}

/** What a master playlist says of a variant (RFC 8216 EXT-X-STREAM-INF). */
export interface HlsVariantInfo {
  /** Peak bitrate of the segments so far, in bit/s. */
  bandwidth: number;
  /** Mean bitrate of the segments so far, in bit/s. */
  averageBandwidth: number;
  /** RFC 6381 codecs, e.g. `avc1.42e01f,mp4a.40.2`. */
  codecs: string;
  width?: number;
  height?: number;
  /** Video frames per second. */
  frameRate?: number;
}

/**
 * Measured facts of a segmenter's input (the `/hls/profiles` metrics); rates and gaps are of
 * its video, or of its audio frames when it has no video.
 */
export interface HlsSegmenterMetrics {
  minFPS: number;
  avgFPS: number;
  maxFPS: number;
  /** Input gaps (video frames further apart than a second). */
  countGaps: number;
  /** Changes of the video picture size. */
  resolutionChanges: number;
  /** Frames waiting to be put into a segment or part. */
  queueSize: number;
  /** pts of the first and the latest input frame, in ms. */
  startPts: number;
  currentPts: number;
  keyFrameReceived: boolean;
}

/** Frames of one variant in, segments and its media playlist out. */
export interface HlsSegmenter {
  /** A frame of the variant, in the order its stream's reader gives them. */
  push(frame: MediaFrame): void;
  /**
   * The next segment starts with `#EXT-X-DISCONTINUITY` (its publisher restarted); after
   * `end()` this reopens the segmenter, its numbering continued.
   */
  discontinuity(): void;
  /** Closes the last segment; the playlist gets `#EXT-X-ENDLIST`. */
  end(): void;
  readonly ended: boolean;
  /**
   * The media playlist as it is now (LL-HLS tags when parts are made); with `delta`, the delta
   * update of `_HLS_skip=YES` (the same when nothing can be skipped).
   */
  playlist(delta?: boolean): string;
  /**
   * The last segment listed (the one in progress, once it has a part) and its last part index
   * (LL-HLS): what EXT-X-RENDITION-REPORT says and blocking reload is measured against.
   * Undefined before the first segment or part.
   */
  readonly edge: { msn: number; part?: number } | undefined;
  /** The fMP4 initialization segment (fMP4 only, once the tracks' configs are known). */
  init(): Uint8Array | undefined;
  /** Segment `msn`, or undefined when it is not complete yet or no longer in the window. */
  segment(msn: number): Uint8Array | undefined;
  /** Part `part` of segment `msn` (LL-HLS), or undefined when absent. */
  part(msn: number, part: number): Uint8Array | undefined;
  /**
   * Settles true once segment `msn` (part `part` of it, when given) is complete, false after
   * `timeoutMs` or at the end: what blocking playlist reload (`_HLS_msn`, `_HLS_part`) waits
   * for.
   */
  ready(msn: number, part: number | undefined, timeoutMs: number): Promise<boolean>;
  /** The variant's master playlist facts, once a segment is complete. */
  readonly variant: HlsVariantInfo | undefined;
  readonly metrics: HlsSegmenterMetrics;
}
