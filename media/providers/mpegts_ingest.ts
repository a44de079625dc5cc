/**
 * MPEG-TS ingest: the TS bytes a transport delivers become a Stream (mediaProvider "MPEGTS")
 * through the TS demuxer. The Stream is made once the codecs of the program are known (tracks
 * are fixed for a stream's life), with the frames of the probe held meanwhile. MP3 audio is
 * converted to AAC here, once, as RTMP ingest does. Timestamps are the sender's, decode times
 * from the PES (B-frames keep theirs), re-based when they jump. A sender that takes over the
 * port (restarted encoder, SRT reconnect) continues the same stream when its codecs are the
 * same, and a new stream of the same name otherwise. No data for `timeoutMs` ends it all.
 */
import type { Logger } from "../../core/log.ts";
import { codecArgs, targetTrack } from "../engine/audio_conversion.ts";
import type { CodecEngine } from "../engine/engine.ts";
import { LiveTranscode } from "../engine/live_transcode.ts";
import { TsDemuxer } from "../formats/mpegts/demuxer.ts";
import { codecKind, type MediaFrame, type Track } from "../frame.ts";
import { Stream } from "../stream.ts";
import type { StreamDirectory } from "../stream_record.ts";
import type { MpegtsPeer, MpegtsTransport } from "./mpegts_transport.ts";
import { TimelineRebaser } from "./mpegts_timeline.ts";
import { PesDtsFiller } from "./mpegts_dts.ts";

/** Value of `mediaProvider` in the records of streams received as MPEG-TS. */
export const mpegtsMediaProvider = "MPEGTS";

/** Status of a receiver: waiting for its first data, or receiving. */
export type MpegtsStatus = "CONNECTED" | "PROCESSED_LOCAL";

/**
 * Longest the codecs of a sender's program may take to be known once its data flows, in ms;
 * then the stream is made with the tracks known (a PMT stream that never carries a frame).
 */
export const codecProbeMs = 3_000;
/** Most frames held while the codecs are probed; older ones are dropped. */
const heldMaxFrames = 600;
/** Longest between two checks of the no-data timeout, in ms. */
const idleCheckMaxMs = 1_000;

/** What one receiver needs. */
export interface MpegtsIngestOptions {
  readonly name: string;
  readonly mediaSessionId: string;
  readonly transport: MpegtsTransport;
  readonly streams: StreamDirectory;
  /** Converts MP3 audio to AAC. */
  readonly engine: CodecEngine;
  readonly log: Logger;
  /** No data for this long ends the receiver and its stream, in ms. */
  readonly timeoutMs: number;
  /** Timestamp jumps larger than this are re-based, in seconds. */
  readonly maxTimestampDiffSec: number;
}

/** How the tracks of the current sender's program feed the stream. */
interface Mapping {
  /** Stream track index by demuxer track id. */
  readonly index: Map<number, number>;
  /** The demuxer tracks last copied onto the stream's tracks, by demuxer track id. */
  readonly seen: Map<number, Track>;
}

/** Receives one allocated port's MPEG-TS into a stream. */
export class MpegtsIngest {
  readonly name: string;
  readonly mediaSessionId: string;
  readonly transport: MpegtsTransport;
  #options: MpegtsIngestOptions;
  #log: Logger;
  #status: MpegtsStatus = "CONNECTED";
  #demuxer = new TsDemuxer();
  #mapping: Mapping | undefined;
  #held: MediaFrame[] = [];
  #firstDataMs = 0;
  #lastDataMs = performance.now();
  #peers = 0;
  #bytes = 0;
  #rebaser: TimelineRebaser;
  /** Decode times of the current sender's video, when its PES carry none. */
  #dts = new PesDtsFiller();
  #stream: Stream | undefined;
  /** Source tracks (as demuxed) of the stream, in stream order. */
  #sourceTracks: Track[] = [];
  #mp3: LiveTranscode | undefined;
  #timer: ReturnType<typeof setInterval>;
  #stopped: Promise<void> | undefined;
  #done = Promise.withResolvers<string>();

  constructor(options: MpegtsIngestOptions) {
    this.#options = options;
    this.name = options.name;
    this.mediaSessionId = options.mediaSessionId;
    this.transport = options.transport;
    this.#log = options.log.child({ stream: options.name, port: options.transport.port });
    this.#rebaser = new TimelineRebaser(options.maxTimestampDiffSec);
    this.#timer = setInterval(
      () => this.#tick(),
      Math.min(idleCheckMaxMs, Math.max(50, options.timeoutMs / 4)),
    );
    options.transport.start({
      data: (bytes) => this.#data(bytes),
      peer: (peer) => this.#peer(peer),
      refused: (peer, reason) =>
        this.#log.warn("mpegts sender refused", { address: peer.address, reason }),
    });
  }

  /** CONNECTED until the first data arrives, then PROCESSED_LOCAL. */
  get status(): MpegtsStatus {
    return this.#status;
  }

  /** The stream, once the codecs of the first sender are known. */
  get stream(): Stream | undefined {
    return this.#stream;
  }

  /** True when the program (its PMT) or the stream has audio. */
  get hasAudio(): boolean {
    return this.#hasKind("audio");
  }

  /** True when the program (its PMT) or the stream has video. */
  get hasVideo(): boolean {
    return this.#hasKind("video");
  }

  /** Settles with the reason once the receiver has ended (timeout, terminate, error). */
  get done(): Promise<string> {
    return this.#done.promise;
  }

  /** Figures of the receiver, for logs and tests. */
  stats() {
    return {
      bytes: this.#bytes,
      peers: this.#peers,
      refused: this.transport.refused,
      droppedPes: this.#demuxer.droppedPes,
      rebases: this.#rebaser.rebases,
      derivedDtsTracks: this.#dts.derived,
    };
  }

  /** Closes the socket, ends the stream and the MP3 conversion. Idempotent. */
  stop(reason: string): Promise<void> {
    this.#stopped ??= (async () => {
      clearInterval(this.#timer);
      this.#endStream(reason);
      await this.transport.close();
      this.#log.info("mpegts receiver ended", { reason, ...this.stats() });
      this.#done.resolve(reason);
    })();
    return this.#stopped;
  }

  #hasKind(kind: "audio" | "video"): boolean {
    if (this.#stream) return this.#stream.tracks.some((t) => t.kind === kind);
    return this.#demuxer.programCodecs.some((codec) => codecKind(codec) === kind);
  }

  #tick(): void {
    const now = performance.now();
    if (now - this.#lastDataMs > this.#options.timeoutMs) {
      this.stop(`no data for ${this.#options.timeoutMs} ms`);
    } else if (!this.#mapping && this.#firstDataMs > 0 && now - this.#firstDataMs > codecProbeMs) {
      this.#ready(true);
    }
  }

  #peer(peer: MpegtsPeer): void {
    this.#peers++;
    this.#log.info("mpegts sender", { address: peer.address, port: peer.port });
    if (this.#peers === 1) return;
    // A new sender's TS starts afresh: its program is probed again.
    this.#demuxer = new TsDemuxer();
    this.#dts = new PesDtsFiller();
    this.#mapping = undefined;
    this.#held = [];
    this.#firstDataMs = 0;
  }

  #data(bytes: Uint8Array): void {
    if (this.#stopped) return;
    const now = performance.now();
    this.#lastDataMs = now;
    if (this.#firstDataMs === 0) this.#firstDataMs = now;
    this.#status = "PROCESSED_LOCAL";
    this.#bytes += bytes.length;
    const frames = this.#demuxer.push(bytes);
    if (this.#mapping) {
      for (const frame of frames) this.#deliver(frame);
      return;
    }
    this.#held.push(...frames);
    if (this.#held.length > heldMaxFrames) this.#held.splice(0, this.#held.length - heldMaxFrames);
    const codecs = this.#demuxer.programCodecs;
    if (codecs.length > 0 && this.#demuxer.tracks.length === codecs.length) this.#ready(false);
  }

  /** The codecs of the sender's program are known (or `probed` long enough): map them. */
  #ready(probed: boolean): void {
    const tracks = [...this.#demuxer.tracks].sort((a, b) => a.id - b.id);
    if (tracks.length === 0) {
      if (probed) this.stop("the MPEG-TS carries no codec the server knows");
      return;
    }
    const same = this.#stream !== undefined && tracks.length === this.#sourceTracks.length &&
      tracks.every((t, i) =>
        t.codec === this.#sourceTracks[i].codec && t.clockRate === this.#sourceTracks[i].clockRate
      );
    if (!same) {
      if (this.#stream) this.#endStream("the sender's codecs changed");
      if (!this.#startStream(tracks)) return;
    }
    this.#mapping = {
      index: new Map(tracks.map((t, i) => [t.id, i])),
      seen: new Map(tracks.map((t) => [t.id, t])),
    };
    const held = this.#held;
    this.#held = [];
    for (const frame of held) this.#deliver(frame);
  }

  /** Makes and registers the stream of `tracks`; false (and the receiver ends) when refused. */
  #startStream(source: Track[]): boolean {
    const { name, mediaSessionId, streams, engine } = this.#options;
    const mp3 = source.find((t) => t.codec === "MP3");
    const tracks = source.map((t, i): Track =>
      t === mp3 ? { ...targetTrack(t, "AAC", engine), id: i } : { ...t, id: i }
    );
    const stream = new Stream({
      name,
      mediaSessionId,
      tracks,
      mediaProvider: mpegtsMediaProvider,
      stopProvider: (info) => this.stop(info),
    });
    try {
      streams.add(stream);
    } catch (err) {
      this.#log.warn("mpegts stream refused", { err });
      this.stop(`stream refused: ${(err as Error).message}`);
      return false;
    }
    this.#stream = stream;
    this.#sourceTracks = source;
    if (mp3) {
      const aac = tracks[source.indexOf(mp3)];
      this.#mp3 = new LiveTranscode({
        engine,
        input: { ...mp3, id: aac.id },
        output: aac,
        codecArgs: codecArgs(aac),
        onFrame: (frame) => stream.push(frame),
        log: this.#log,
      });
    }
    this.#log.info("mpegts stream published", {
      codecs: source.map((t) => t.codec).join(","),
      ...(mp3 ? { converted: "MP3 to AAC" } : {}),
    });
    return true;
  }

  #endStream(reason: string): void {
    const stream = this.#stream;
    if (!stream) return;
    this.#stream = undefined;
    this.#mp3?.close().catch(() => {});
    this.#mp3 = undefined;
    this.#options.streams.remove(stream);
    stream.end();
    this.#log.info("mpegts stream ended", { reason });
  }

  #deliver(frame: MediaFrame): void {
    const stream = this.#stream;
    const mapping = this.#mapping!;
    const index = mapping.index.get(frame.trackId);
    if (!stream || index === undefined) return;
    const demuxed = this.#demuxer.tracks.find((t) => t.id === frame.trackId);
    if (demuxed && demuxed !== mapping.seen.get(frame.trackId)) {
      // New parameter sets (a resolution change): readers take them from the track.
      mapping.seen.set(frame.trackId, demuxed);
      if (demuxed.codec !== "MP3") {
        const track = stream.tracks[index];
        track.config = demuxed.config;
        track.width = demuxed.width;
        track.height = demuxed.height;
      }
    }
    const source = this.#sourceTracks[index];
    const own = { ...frame, trackId: index };
    if (source.kind === "video" && !this.#dts.fill(own, stream.tracks[index])) return;
    const out = this.#rebaser.apply(own, source.clockRate);
    if (source.codec === "MP3") this.#mp3?.push(out);
    else stream.push(out);
  }
}
