/**
 * M3U8 playlist writers: media playlists (RFC 8216 §4.3, with the low-latency tags of
 * draft-pantos-hls-rfc8216bis: EXT-X-PART, EXT-X-PRELOAD-HINT, EXT-X-SERVER-CONTROL) and
 * master playlists (EXT-X-STREAM-INF).
 */

/** A partial segment (LL-HLS) of a media playlist. */
export interface PlaylistPart {
  uri: string;
  durationSec: number;
  /** The part starts with a keyframe (`INDEPENDENT=YES`). */
  independent: boolean;
}

/** A media segment of a media playlist; the segment in progress has parts and no `uri`. */
export interface PlaylistSegment {
  /** Undefined for the segment in progress, listed by its parts only. */
  uri?: string;
  durationSec: number;
  /** Wall clock of the segment's first frame, in ms since the epoch. */
  programDateTimeMs?: number;
  /** The segment follows a discontinuity (`#EXT-X-DISCONTINUITY`). */
  discontinuity?: boolean;
  /** Partial segments to list before the segment (LL-HLS). */
  parts?: readonly PlaylistPart[];
}

/** What a media playlist says. */
export interface MediaPlaylist {
  /** Lower bound of `#EXT-X-TARGETDURATION`, in seconds; raised to the longest segment. */
  targetDurationSec: number;
  /** Media sequence number of the first segment listed. */
  mediaSequence: number;
  /** Discontinuities dropped from the playlist so far (`#EXT-X-DISCONTINUITY-SEQUENCE`). */
  discontinuitySequence: number;
  /** URI of the fMP4 initialization segment (`#EXT-X-MAP`), when segments are fMP4. */
  mapUri?: string;
  segments: readonly PlaylistSegment[];
  /** LL-HLS part target duration in seconds; makes the low-latency tags. */
  partTargetSec?: number;
  /** URI of the next part (`#EXT-X-PRELOAD-HINT`). */
  preloadHintUri?: string;
  /** No more segments will come (`#EXT-X-ENDLIST`). */
  ended: boolean;
}

/** Seconds as a decimal with millisecond precision, trailing zeros kept ("2.000"). */
function seconds(sec: number): string {
  return sec.toFixed(3);
}

/** Seconds with millisecond precision and no trailing zeros ("0.5"). */
function shortSeconds(sec: number): string {
  return String(Number(sec.toFixed(3)));
}

/** Durations computed from clock ticks are off by float noise; 2.0000000001 s is 2 s. */
const durationEpsilonSec = 1e-6;

/** The text of a media playlist. */
export function mediaPlaylist(p: MediaPlaylist): string {
  const lowLatency = p.partTargetSec !== undefined && p.partTargetSec > 0;
  let target = Math.ceil(p.targetDurationSec - durationEpsilonSec);
  for (const s of p.segments) {
    if (s.uri !== undefined) {
      target = Math.max(target, Math.ceil(s.durationSec - durationEpsilonSec));
    }
  }
  const lines = ["#EXTM3U", `#EXT-X-VERSION:${p.mapUri !== undefined || lowLatency ? 7 : 3}`];
  lines.push(`#EXT-X-TARGETDURATION:${Math.max(1, target)}`);
  if (lowLatency) {
    const part = p.partTargetSec!;
    lines.push(
      `#EXT-X-SERVER-CONTROL:CAN-BLOCK-RELOAD=YES,PART-HOLD-BACK=${shortSeconds(3 * part)}`,
      `#EXT-X-PART-INF:PART-TARGET=${shortSeconds(part)}`,
    );
  }
  lines.push(`#EXT-X-MEDIA-SEQUENCE:${p.mediaSequence}`);
  if (p.discontinuitySequence > 0) {
    lines.push(`#EXT-X-DISCONTINUITY-SEQUENCE:${p.discontinuitySequence}`);
  }
  if (p.mapUri !== undefined) lines.push(`#EXT-X-MAP:URI="${p.mapUri}"`);
  for (const s of p.segments) {
    if (s.uri === undefined && !s.parts?.length) continue;
    if (s.discontinuity) lines.push("#EXT-X-DISCONTINUITY");
    if (s.programDateTimeMs !== undefined) {
      lines.push(`#EXT-X-PROGRAM-DATE-TIME:${new Date(s.programDateTimeMs).toISOString()}`);
    }
    for (const part of s.parts ?? []) {
      lines.push(
        `#EXT-X-PART:DURATION=${seconds(part.durationSec)},URI="${part.uri}"` +
          (part.independent ? ",INDEPENDENT=YES" : ""),
      );
    }
    if (s.uri !== undefined) lines.push(`#EXTINF:${seconds(s.durationSec)},`, s.uri);
  }
  if (p.preloadHintUri !== undefined && !p.ended) {
    lines.push(`#EXT-X-PRELOAD-HINT:TYPE=PART,URI="${p.preloadHintUri}"`);
  }
  if (p.ended) lines.push("#EXT-X-ENDLIST");
  return lines.join("\n") + "\n";
}

/** One variant of a master playlist. */
export interface MasterPlaylistVariant {
  /** URI of the variant's media playlist, relative to the master playlist. */
  uri: string;
  info: {
    bandwidth: number;
    averageBandwidth: number;
    codecs: string;
    width?: number;
    height?: number;
    frameRate?: number;
  };
}

/**
 * The text of a master playlist: one `#EXT-X-STREAM-INF` per variant, in the order given
 * (players start with the first one listed, so the caller puts its preferred variant first).
 */
export function masterPlaylist(variants: readonly MasterPlaylistVariant[]): string {
  const lines = ["#EXTM3U", "#EXT-X-VERSION:3"];
  for (const { uri, info } of variants) {
    const attrs = [
      `BANDWIDTH=${Math.max(1, Math.round(info.bandwidth))}`,
      `AVERAGE-BANDWIDTH=${Math.max(1, Math.round(info.averageBandwidth))}`,
    ];
    if (info.codecs) attrs.push(`CODECS="${info.codecs}"`);
    if (info.width && info.height) attrs.push(`RESOLUTION=${info.width}x${info.height}`);
    if (info.frameRate) attrs.push(`FRAME-RATE=${info.frameRate.toFixed(3)}`);
    lines.push(`#EXT-X-STREAM-INF:${attrs.join(",")}`, uri);
  }
  return lines.join("\n") + "\n";
}
