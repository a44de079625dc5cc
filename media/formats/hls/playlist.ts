/**
 * M3U8 playlist writers: media playlists (RFC 8216 §4.3, with the low-latency tags of
 * draft-pantos-hls-rfc8216bis: EXT-X-PART, EXT-X-PRELOAD-HINT, EXT-X-SERVER-CONTROL,
 * EXT-X-SKIP of delta updates, EXT-X-RENDITION-REPORT) and master playlists (EXT-X-STREAM-INF).
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
  /**
   * A segment longer than the target by at most this many seconds (under half a second)
   * leaves it as it is: RFC 8216 4.3.3.1 compares durations rounded to the nearest integer.
   * An audio rendition ending at the frame nearest a video cut uses it, so its target stays
   * the video's. Absent: 0 (any longer segment raises the target).
   */
  targetSlackSec?: number;
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
  /**
   * `CAN-SKIP-UNTIL` of EXT-X-SERVER-CONTROL (LL-HLS): the server answers delta updates,
   * skipping segments at least this many seconds from the end; at least 6 target durations.
   */
  skipUntilSec?: number;
  /** Write a delta update (`_HLS_skip=YES`): the oldest segments before `skipUntilSec` skipped. */
  delta?: boolean;
}

/** What EXT-X-RENDITION-REPORT says of another rendition (RFC 8216bis 4.4.5.4). */
export interface RenditionReport {
  /** URI of the rendition's media playlist, relative to the playlist the report is in. */
  uri: string;
  /** Media sequence number of the rendition's last (partial) segment. */
  lastMsn: number;
  /** Index of the last part of that segment, when it has parts. */
  lastPart?: number;
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
  const slackSec = Math.min(p.targetSlackSec ?? 0, 0.49) + durationEpsilonSec;
  for (const s of p.segments) {
    if (s.uri !== undefined) target = Math.max(target, Math.ceil(s.durationSec - slackSec));
  }
  const skipped = p.delta && p.skipUntilSec !== undefined
    ? skippable(p.segments, p.skipUntilSec)
    : 0;
  // EXT-X-SKIP needs version 9 (RFC 8216bis 8).
  const version = skipped > 0 ? 9 : p.mapUri !== undefined || lowLatency ? 7 : 3;
  const lines = ["#EXTM3U", `#EXT-X-VERSION:${version}`];
  lines.push(`#EXT-X-TARGETDURATION:${Math.max(1, target)}`);
  if (lowLatency) {
    const part = p.partTargetSec!;
    const skip = p.skipUntilSec === undefined
      ? ""
      : `CAN-SKIP-UNTIL=${shortSeconds(p.skipUntilSec)},`;
    lines.push(
      `#EXT-X-SERVER-CONTROL:CAN-BLOCK-RELOAD=YES,${skip}PART-HOLD-BACK=${shortSeconds(3 * part)}`,
      `#EXT-X-PART-INF:PART-TARGET=${shortSeconds(part)}`,
    );
  }
  lines.push(`#EXT-X-MEDIA-SEQUENCE:${p.mediaSequence}`);
  if (p.discontinuitySequence > 0) {
    lines.push(`#EXT-X-DISCONTINUITY-SEQUENCE:${p.discontinuitySequence}`);
  }
  if (p.mapUri !== undefined) lines.push(`#EXT-X-MAP:URI="${p.mapUri}"`);
  if (skipped > 0) lines.push(`#EXT-X-SKIP:SKIPPED-SEGMENTS=${skipped}`);
  for (const s of p.segments.slice(skipped)) {
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

/**
 * How many leading complete segments a delta update skips: those ending at least
 * `skipUntilSec` before the end of the playlist (RFC 8216bis 6.2.5.1).
 */
function skippable(segments: readonly PlaylistSegment[], skipUntilSec: number): number {
  let totalSec = 0;
  for (const s of segments) {
    totalSec += s.uri !== undefined
      ? s.durationSec
      : (s.parts ?? []).reduce((sum, part) => sum + part.durationSec, 0);
  }
  let endSec = 0;
  let n = 0;
  for (const s of segments) {
    if (s.uri === undefined) break;
    endSec += s.durationSec;
    if (totalSec - endSec < skipUntilSec - durationEpsilonSec) break;
    n++;
  }
  return n;
}

/** EXT-X-RENDITION-REPORT lines, each ending with a newline, to append to a media playlist. */
export function renditionReports(reports: readonly RenditionReport[]): string {
  let text = "";
  for (const r of reports) {
    text += `#EXT-X-RENDITION-REPORT:URI="${r.uri}",LAST-MSN=${r.lastMsn}` +
      (r.lastPart === undefined ? "" : `,LAST-PART=${r.lastPart}`) + "\n";
  }
  return text;
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
  /** GROUP-ID of the audio renditions played with it (`AUDIO`); its segments are video only. */
  audioGroup?: string;
}

/** An audio rendition of a master playlist (`#EXT-X-MEDIA:TYPE=AUDIO`, RFC 8216 4.3.4.1). */
export interface MasterPlaylistAudio {
  /** GROUP-ID the rendition belongs to. */
  group: string;
  /** NAME, unique within the group. */
  name: string;
  /** URI of the rendition's media playlist, relative to the master playlist. */
  uri: string;
  /** DEFAULT=YES: the group's rendition a player picks without a user's choice. */
  isDefault: boolean;
}

/**
 * The text of a master playlist: an `#EXT-X-MEDIA` per audio rendition, then one
 * `#EXT-X-STREAM-INF` per variant, in the order given (players start with the first one
 * listed, so the caller puts its preferred variant first). The caller gives a variant with
 * an `audioGroup` the BANDWIDTH and CODECS of it and its group's renditions together
 * (RFC 8216 4.3.4.2).
 */
export function masterPlaylist(
  variants: readonly MasterPlaylistVariant[],
  audio: readonly MasterPlaylistAudio[] = [],
): string {
  const lines = ["#EXTM3U", "#EXT-X-VERSION:3"];
  for (const r of audio) {
    const isDefault = r.isDefault ? "YES" : "NO";
    lines.push(
      `#EXT-X-MEDIA:TYPE=AUDIO,GROUP-ID="${r.group}",NAME="${r.name}",DEFAULT=${isDefault},` +
        `AUTOSELECT=YES,URI="${r.uri}"`,
    );
  }
  for (const { uri, info, audioGroup } of variants) {
    const attrs = [
      `BANDWIDTH=${Math.max(1, Math.round(info.bandwidth))}`,
      `AVERAGE-BANDWIDTH=${Math.max(1, Math.round(info.averageBandwidth))}`,
    ];
    if (info.codecs) attrs.push(`CODECS="${info.codecs}"`);
    if (info.width && info.height) attrs.push(`RESOLUTION=${info.width}x${info.height}`);
    if (info.frameRate) attrs.push(`FRAME-RATE=${info.frameRate.toFixed(3)}`);
    if (audioGroup !== undefined) attrs.push(`AUDIO="${audioGroup}"`);
    lines.push(`#EXT-X-STREAM-INF:${attrs.join(",")}`, uri);
  }
  return lines.join("\n") + "\n";
}
