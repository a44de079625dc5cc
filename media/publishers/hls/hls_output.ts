/**
 * The HLS output of one stream: one variant per rendition (the source as it is, ABR
 * profiles, audio renditions), each a reader of its Stream feeding one segmenter, plus the
 * output's viewers. A variant with an audio group carries video only and plays with that
 * group's audio renditions (audio only, `#EXT-X-MEDIA`); their segmenters then share a
 * timeline, so the audio's segments line up with the video's.
 * When the source ends the segmenters end (`#EXT-X-ENDLIST`); a new publisher of the name
 * attached within the keep time continues every variant after a discontinuity.
 */
import type { Logger } from "../../../core/log.ts";
import type { MediaFrame, Track } from "../../frame.ts";
import type { Stream, StreamReader } from "../../stream.ts";
import {
  masterPlaylist,
  type MasterPlaylistAudio,
  type MasterPlaylistVariant,
  renditionReports,
} from "../../formats/hls/playlist.ts";
import type {
  HlsContainer,
  HlsSegmenter,
  HlsSegmenterOptions,
  HlsVariantInfo,
} from "./hls_segmenter_api.ts";
import { HlsTimeline } from "./hls_timeline.ts";
import { HlsViewers } from "./hls_viewers.ts";

/** Pause between looks at the variants while a request waits for their first segment, in ms. */
const readyPollMs = 50;
/**
 * Complete segments a variant has before its first playlist is given out: a player starts
 * that far from the live edge (hls.js, given one segment, started 2 s from it and stalled;
 * with LL-HLS it looped on the first parts). Two with parts, three without (RFC 8216 6.3.3).
 */
export const startSegments = { plain: 3, lowLatency: 2 };

/** What a variant is made of (planned by the registry from its source and configuration). */
export interface HlsVariantPlan {
  /** `source` or the profile name; the directory of its URLs. */
  name: string;
  /** The frames to package (the source, its audio converted, or a rendition). */
  stream: Stream;
  container: HlsContainer;
  /** The configured profile, for a rendition. */
  profile?: { width: number; height: number; fps: number; bitrateKbps: number; codec: string };
  /**
   * What its segments carry of the stream: absent, every track (muxed); `video` with
   * `audioGroup`, its video only, played with that group's audio renditions; `audio`, an
   * audio rendition of `audioGroup` (`#EXT-X-MEDIA`).
   */
  media?: "video" | "audio";
  /** GROUP-ID of the audio renditions a video variant plays with, or an audio rendition is in. */
  audioGroup?: string;
  /** An audio rendition's configured bitrate, in kbit/s (absent: the source's or default). */
  audioBitrateKbps?: number;
}

/** What segmenters are made with, apart from their tracks and container. */
export interface HlsOutputOptions {
  targetDurationSec: number;
  partDurationMs: number;
  windowSegments: number;
  createSegmenter: (options: HlsSegmenterOptions) => HlsSegmenter;
  log: Logger;
}

/** One variant: its current stream's reader feeding its segmenter. */
export class HlsVariant {
  readonly name: string;
  readonly container: HlsContainer;
  readonly profile: HlsVariantPlan["profile"];
  readonly media: HlsVariantPlan["media"];
  readonly audioGroup: string | undefined;
  readonly audioBitrateKbps: number | undefined;
  #segmenter: HlsSegmenter;
  #timeline: HlsTimeline | undefined;
  #options: HlsOutputOptions;
  #stream: Stream;
  #tracks: readonly Track[];
  #reader: StreamReader | undefined;
  #closed = false;
  #log: Logger;
  /** The latest playlist text found to have the segments a player starts with. */
  #startablePlaylist: string | undefined;

  constructor(plan: HlsVariantPlan, options: HlsOutputOptions, timeline?: HlsTimeline) {
    this.name = plan.name;
    this.container = plan.container;
    this.profile = plan.profile;
    this.media = plan.media;
    this.audioGroup = plan.audioGroup;
    this.audioBitrateKbps = plan.audioBitrateKbps;
    this.#timeline = timeline;
    this.#options = options;
    this.#stream = plan.stream;
    this.#tracks = this.#carried(plan.stream);
    this.#log = options.log.child({ variant: plan.name });
    this.#segmenter = this.#newSegmenter();
    this.#read(plan.stream);
  }

  /** True once the variant has the segments a player starts with, or has ended. */
  get startable(): boolean {
    const segmenter = this.#segmenter;
    if (segmenter.ended) return true;
    const needed = this.#options.partDurationMs > 0
      ? startSegments.lowLatency
      : startSegments.plain;
    const playlist = segmenter.playlist();
    // Asked on every playlist request: the text found startable is remembered, not recounted.
    if (playlist === this.#startablePlaylist) return true;
    if ((playlist.match(/#EXTINF:/g)?.length ?? 0) < needed) return false;
    this.#startablePlaylist = playlist;
    return true;
  }

  /** The segmenter of the variant's segments and playlist. */
  get segmenter(): HlsSegmenter {
    return this.#segmenter;
  }

  /** The stream read now (the latest publisher's). */
  get stream(): Stream {
    return this.#stream;
  }

  /** Continues with the stream of a new publisher of the name, after a discontinuity. */
  resume(stream: Stream): void {
    if (this.#closed) return;
    this.#reader?.close();
    this.#stream = stream;
    const tracks = this.#carried(stream);
    if (sameTracks(this.#tracks, tracks)) {
      // Reopened if it had ended: numbering continues after a discontinuity.
      this.#segmenter.discontinuity();
    } else {
      // Other codecs or sizes need another init segment and codec string: a new segmenter,
      // its numbering from 0 again.
      this.#segmenter.end();
      this.#tracks = tracks;
      this.#segmenter = this.#newSegmenter();
    }
    this.#read(stream);
  }

  /** Stops reading; the segmenter ends. */
  close(): void {
    this.#closed = true;
    this.#reader?.close();
    if (!this.#segmenter.ended) this.#segmenter.end();
  }

  /** The tracks of `stream` the variant's segments carry. */
  #carried(stream: Stream): readonly Track[] {
    const media = this.media;
    return media ? stream.tracks.filter((t) => t.kind === media) : stream.tracks;
  }

  #newSegmenter(): HlsSegmenter {
    const options = this.#options;
    return options.createSegmenter({
      tracks: this.#tracks,
      container: this.container,
      targetDurationSec: options.targetDurationSec,
      partDurationMs: options.partDurationMs,
      windowSegments: options.windowSegments,
      timeline: this.#timeline,
    });
  }

  #read(stream: Stream): void {
    const reader = stream.reader(undefined, "hls");
    this.#reader = reader;
    const segmenter = this.#segmenter;
    const trackIds = trackMap(stream.tracks, this.#tracks);
    const video = stream.videoTrack;
    const keyframeDue = video ? this.#options.targetDurationSec * video.clockRate : Infinity;
    let lastKeyframePts: number | undefined;
    void (async () => {
      try {
        for (;;) {
          const frame = await reader.next();
          if (frame === undefined) break;
          const trackId = trackIds[frame.trackId];
          if (trackId === undefined) continue;
          if (frame.trackId === video?.id) {
            // Segments end at keyframes: a source that sends them only when asked (a WebRTC
            // publisher) is asked once a target duration has passed without one.
            if (frame.keyframe || lastKeyframePts === undefined) lastKeyframePts = frame.pts;
            else if (frame.pts - lastKeyframePts >= keyframeDue) stream.requestKeyframe();
          }
          if (frame.keyframe) {
            // A publisher that came back gives its parameter sets (RTMP: after the stream
            // is registered); the segmenter's tracks follow them.
            const config = stream.tracks[frame.trackId].config;
            const track = this.#tracks.find((t) => t.id === trackId);
            if (config && track) track.config = config;
          }
          segmenter.push(
            trackId === frame.trackId ? frame : { ...frame, trackId } satisfies MediaFrame,
          );
        }
      } catch (err) {
        this.#log.warn("segmenter refused a frame; variant ended", { err });
      } finally {
        reader.close();
        // A reader replaced by `resume` ends without ending the variant.
        if (this.#reader === reader && !segmenter.ended) segmenter.end();
      }
    })();
  }
}

/**
 * Ids of the segmenter's tracks by the ids of a stream's tracks, matched by kind: a new
 * publisher of the name may order its tracks differently.
 */
function trackMap(from: readonly Track[], to: readonly Track[]): (number | undefined)[] {
  return from.map((track) => to.find((t) => t.kind === track.kind && t.codec === track.codec)?.id);
}

/** The HLS output of one stream name. */
export class HlsOutput {
  readonly id = crypto.randomUUID();
  readonly name: string;
  readonly createdDate = Date.now();
  readonly viewers = new HlsViewers();
  /** Started by `/hls/startup`: runs until terminated or its stream has ended, not idle-stopped. */
  persistent: boolean;
  /** Requests waiting for a segment or a blocking playlist reload. */
  waiting = 0;
  #options: HlsOutputOptions;
  #variants = new Map<string, HlsVariant>();
  /** Shared by the segmenters when audio is served apart. */
  #timeline: HlsTimeline | undefined;
  #source: Stream;
  #endedAtMs: number | undefined;
  #closed = false;

  constructor(
    name: string,
    source: Stream,
    plans: HlsVariantPlan[],
    persistent: boolean,
    options: HlsOutputOptions,
  ) {
    this.name = name;
    this.persistent = persistent;
    this.#options = options;
    this.#source = source;
    this.#timeline = plans.some((p) => p.media) ? new HlsTimeline() : undefined;
    try {
      for (const plan of plans) {
        this.#variants.set(plan.name, new HlsVariant(plan, options, this.#timeline));
      }
    } catch (err) {
      // A segmenter refused its tracks: the variants made so far stop reading.
      this.close();
      throw err;
    }
    this.#watch(source);
  }

  /** The stream packaged now. */
  get source(): Stream {
    return this.#source;
  }

  /** When the source ended, in ms since the epoch; undefined while it runs. */
  get endedAtMs(): number | undefined {
    return this.#endedAtMs;
  }

  /** True once stopped: its URLs answer 404. */
  get closed(): boolean {
    return this.#closed;
  }

  /** The variants, the preferred (source) first. */
  get variants(): HlsVariant[] {
    return [...this.#variants.values()];
  }

  /** The variant of `name`, if any. */
  variant(name: string): HlsVariant | undefined {
    return this.#variants.get(name);
  }

  /**
   * Continues with a new publisher of the name: variants it still has resume after a
   * discontinuity, new ones start.
   */
  resume(source: Stream, plans: HlsVariantPlan[]): void {
    if (this.#closed) return;
    this.#source = source;
    this.#endedAtMs = undefined;
    this.#timeline?.nextEpoch();
    for (const plan of plans) {
      const variant = this.#variants.get(plan.name);
      if (variant) variant.resume(plan.stream);
      else this.#variants.set(plan.name, new HlsVariant(plan, this.#options, this.#timeline));
    }
    this.#watch(source);
  }

  /**
   * The master playlist: the variants and audio renditions that have a complete segment; a
   * video variant of an audio group once the group has one, its BANDWIDTH and CODECS with
   * the group's largest rendition added (RFC 8216 4.3.4.2).
   */
  masterPlaylist(): string {
    const uri = (v: HlsVariant) => `${encodeURIComponent(v.name)}/index.m3u8`;
    const audio: MasterPlaylistAudio[] = [];
    const groups = new Map<string, HlsVariantInfo>();
    for (const v of this.variants) {
      const info = v.segmenter.variant;
      if (v.media !== "audio" || !info || v.audioGroup === undefined) continue;
      const group = groups.get(v.audioGroup);
      audio.push({ group: v.audioGroup, name: v.name, uri: uri(v), isDefault: !group });
      groups.set(v.audioGroup, {
        bandwidth: Math.max(group?.bandwidth ?? 0, info.bandwidth),
        averageBandwidth: Math.max(group?.averageBandwidth ?? 0, info.averageBandwidth),
        codecs: [...new Set([group?.codecs, info.codecs].filter((c) => c))].join(","),
      });
    }
    const variants: MasterPlaylistVariant[] = [];
    for (const v of this.variants) {
      const info = v.segmenter.variant;
      if (v.media === "audio" || !info) continue;
      if (v.media !== "video" || v.audioGroup === undefined) {
        variants.push({ uri: uri(v), info });
        continue;
      }
      const group = groups.get(v.audioGroup);
      if (!group) continue;
      variants.push({
        uri: uri(v),
        audioGroup: v.audioGroup,
        info: {
          ...info,
          bandwidth: info.bandwidth + group.bandwidth,
          averageBandwidth: info.averageBandwidth + group.averageBandwidth,
          codecs: [info.codecs, group.codecs].filter((c) => c).join(","),
        },
      });
    }
    return masterPlaylist(variants, audio);
  }

  /**
   * The media playlist of `variant` (a delta update with `delta`); with LL-HLS, followed by an
   * EXT-X-RENDITION-REPORT of every other variant, so a player switching variants can ask
   * for the right segment at once (RFC 8216bis 4.4.5.4).
   */
  mediaPlaylist(variant: HlsVariant, delta: boolean): string {
    const text = variant.segmenter.playlist(delta);
    if (!(this.#options.partDurationMs > 0)) return text;
    const reports = this.variants.flatMap((other) => {
      const edge = other.segmenter.edge;
      if (other === variant || !edge) return [];
      const uri = `../${encodeURIComponent(other.name)}/index.m3u8`;
      return [{ uri, lastMsn: edge.msn, lastPart: edge.part }];
    });
    return text + renditionReports(reports);
  }

  /**
   * Resolves once every variant has a complete segment (or has ended), or after `timeoutMs`
   * with what there is; true when at least one variant is ready.
   */
  async waitVariants(timeoutMs: number): Promise<boolean> {
    const deadline = performance.now() + timeoutMs;
    this.waiting++;
    try {
      for (;;) {
        const variants = this.variants;
        const ready = variants.filter((v) => v.startable && v.segmenter.variant).length;
        const settled = variants.every((v) => v.startable);
        if (settled || this.#closed || performance.now() >= deadline) return ready > 0;
        await new Promise((resolve) => setTimeout(resolve, readyPollMs));
      }
    } finally {
      this.waiting--;
    }
  }

  /** Stops every variant. */
  close(): void {
    if (this.#closed) return;
    this.#closed = true;
    for (const variant of this.#variants.values()) variant.close();
  }

  #watch(source: Stream): void {
    void source.done.then(() => {
      if (this.#source === source && !this.#closed) {
        this.#endedAtMs = Date.now();
        this.#options.log.info("hls source ended", { stream: this.name });
      }
    });
  }
}

/**
 * True when two streams' tracks make segments a player can take after a discontinuity in
 * the same variant: codecs, sizes, rates. Decoder configurations are often not known yet
 * when a publisher comes back; `#read` copies them as they come.
 */
function sameTracks(a: readonly Track[], b: readonly Track[]): boolean {
  const key = (tracks: readonly Track[]) =>
    tracks.map((t) => [t.kind, t.codec, t.width, t.height, t.clockRate, t.channels].join("/"))
      .join(";");
  return key(a) === key(b);
}
