/**
 * The HLS output of one stream: one variant per rendition (the source as it is, ABR
 * profiles), each a reader of its Stream feeding one segmenter, plus the output's viewers.
 * When the source ends the segmenters end (`#EXT-X-ENDLIST`); a new publisher of the name
 * attached within the keep time continues every variant after a discontinuity.
 */
import type { Logger } from "../../../core/log.ts";
import type { MediaFrame, Track } from "../../frame.ts";
import type { Stream, StreamReader } from "../../stream.ts";
import { masterPlaylist, renditionReports } from "../../formats/hls/playlist.ts";
import type { HlsContainer, HlsSegmenter, HlsSegmenterOptions } from "./hls_segmenter_api.ts";
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
  #segmenter: HlsSegmenter;
  #options: HlsOutputOptions;
  #stream: Stream;
  #tracks: readonly Track[];
  #reader: StreamReader | undefined;
  #closed = false;
  #log: Logger;

  constructor(plan: HlsVariantPlan, options: HlsOutputOptions) {
    this.name = plan.name;
    this.container = plan.container;
    this.profile = plan.profile;
    this.#options = options;
    this.#stream = plan.stream;
    this.#tracks = plan.stream.tracks;
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
    return (segmenter.playlist().match(/#EXTINF:/g)?.length ?? 0) >= needed;
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
    if (sameTracks(this.#tracks, stream.tracks)) {
      // Reopened if it had ended: numbering continues after a discontinuity.
      this.#segmenter.discontinuity();
    } else {
      // Other codecs or sizes need another init segment and codec string: a new segmenter,
      // its numbering from 0 again.
      this.#segmenter.end();
      this.#tracks = stream.tracks;
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

  #newSegmenter(): HlsSegmenter {
    const options = this.#options;
    return options.createSegmenter({
      tracks: this.#tracks,
      container: this.container,
      targetDurationSec: options.targetDurationSec,
      partDurationMs: options.partDurationMs,
      windowSegments: options.windowSegments,
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
            if (config) this.#tracks[trackId].config = config;
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
    try {
      for (const plan of plans) this.#variants.set(plan.name, new HlsVariant(plan, options));
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
    for (const plan of plans) {
      const variant = this.#variants.get(plan.name);
      if (variant) variant.resume(plan.stream);
      else this.#variants.set(plan.name, new HlsVariant(plan, this.#options));
    }
    this.#watch(source);
  }

  /** The master playlist: the variants that have a complete segment. */
  masterPlaylist(): string {
    const ready = this.variants.flatMap((v) => {
      const info = v.segmenter.variant;
      return info ? [{ uri: `${encodeURIComponent(v.name)}/index.m3u8`, info }] : [];
    });
    return masterPlaylist(ready);
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
