/**
 * A source Stream decoded once for every rendition made of it: one reader of the source, one
 * video decoder, and the decoded pictures (and the source's compressed audio) fanned out to
 * every subscriber. The hub keeps one per source Stream; the last subscriber to leave closes
 * it, decoder process or Worker included.
 *
 * Pictures come at the smallest size that serves every subscriber: each says the box its
 * pictures must fill (a rendition its output size, a mixer its tile) or that it needs the
 * source's size, and the decoder scales into the union of the boxes (never up). Moving
 * 720p pictures through the server for 360p outputs cost a fifth of a core.
 *
 * When the size needed changes (a subscriber needing more joins, or the largest leaves), a
 * decoder at the new size starts beside the running one, from the next keyframe, and each
 * subscriber moves to it once it has caught up with the pictures that subscriber had: no
 * subscriber misses a picture or sees one twice, and none waits for a keyframe. Restarting
 * the one decoder instead would cost its subscribers the pictures held in ffmpeg (parser
 * and reorder delay) and a keyframe interval of nothing. The old decoder stops when its last
 * subscriber has moved, so two decode only for the few frames of the handover.
 */
import type { Logger } from "../../core/log.ts";
import { pictureBuffers } from "../mixer/buffer_pool.ts";
import type { CodecEngine } from "../engine/engine.ts";
import type { MediaFrame, Track } from "../frame.ts";
import type { Stream, StreamReader } from "../stream.ts";
import { type FusedOutput, FusedRenditions } from "./fused_renditions.ts";
import { sourceGapMs } from "./rendition.ts";
import { createVideoDecoder } from "./video_decoder.ts";
import type { RawVideoFrame, VideoDecoder } from "./video_codec.ts";
import type { PictureSize } from "./video_decoder_input.ts";

/** Frames the source's reader may queue: about 2 s of 30 fps video with its audio. */
const sourceQueueFrames = 160;
/**
 * Pictures a new decoder gives before subscribers of the old one move to it even if the
 * old one has not reached its first picture (it fell behind): about 2 s at 30 fps.
 */
const maxHandOverPictures = 60;

/**
 * The pictures a subscriber needs: none (its audio only), the source's size, pictures
 * filling at most this box (aspect kept; the subscriber scales them further), or no
 * pictures but the source encoded by the source's fused ffmpeg (`FusedNeed`).
 */
export type PictureNeed = "none" | "source" | PictureSize | FusedNeed;

/**
 * A plain H.264 rendition made by the one ffmpeg that decodes the source for all such
 * renditions (see fused_renditions.ts); native engine only.
 */
export interface FusedNeed {
  fused: FusedOutput;
}

/** What a subscriber of a decoded source receives. */
export interface SourceListener {
  /**
   * A decoded picture, in presentation order, pts in 90 kHz on the source's timeline; at
   * least as large as the subscriber's box asks (unless the source is smaller), possibly
   * larger, and its size may change from one picture to the next. Its bytes are read-only;
   * in an ArrayBuffer (not shared) they are the subscriber's alone, who may hand the buffer
   * over to a composer (`VideoComposer.push`), which recycles it for the decoder.
   */
  onPicture(picture: RawVideoFrame): void;
  /** A compressed audio frame of the source, as the source has it. */
  onAudio(frame: MediaFrame): void;
  /** The source has ended (or the hub closed); nothing follows. */
  onEnd(): void;
}

/** A subscription to a decoded source; `release` ends it. */
export interface SourceSubscription {
  /** The source's video track, if any. */
  readonly video: Track | undefined;
  /** The source's first audio track, if any. */
  readonly audio: Track | undefined;
  /** Changes the pictures this subscriber needs (a mixer tile that grew or shrank). */
  need(need: PictureNeed): void;
  /** Leaves; the last subscriber to leave stops the decoder. */
  release(): void;
}

/** A subscriber that takes pictures. */
interface Viewer {
  listener: SourceListener;
  /** The box its pictures must fill; undefined: the source's size. */
  box: PictureSize | undefined;
  /** pts of the last picture it was given. */
  lastPts: number;
  /** The decoder whose pictures it gets; undefined until placed. */
  feed: SizedDecoder | undefined;
}

/** One decoder of the source, scaling into one box, and the viewers it feeds. */
interface SizedDecoder {
  box: PictureSize | undefined;
  decoder: VideoDecoder;
  viewers: Set<Viewer>;
  /** pts of its first picture, undefined before. */
  firstPts: number | undefined;
  /** Pictures it gave since it became the target. */
  sinceTarget: number;
  /**
   * True when it started beside a running decoder: the frames it dropped waiting for its
   * first picture were decoded by the other, so they are no loss.
   */
  beside: boolean;
  /** Its dropped count at its first picture. */
  droppedAtFirst: number | undefined;
}

/** One source Stream decoded for all its subscribers. */
class DecodedSource {
  readonly listeners = new Set<SourceListener>();
  /** The listeners that take pictures; the others take audio only. */
  readonly #viewers = new Map<SourceListener, Viewer>();
  /** Running decoders: the target (at the size now needed) and those being left. */
  #decoders: SizedDecoder[] = [];
  #target: SizedDecoder | undefined;
  /** Frames lost by decoders already stopped. */
  #retiredDrops = 0;
  /** Decoders being stopped; close waits for them so no process outlives the source. */
  #stopping = new Set<Promise<void>>();
  #engine: CodecEngine;
  #log: Logger;
  #source: Stream;
  readonly video: Track | undefined;
  readonly audio: Track | undefined;
  #reader: StreamReader;
  #reading: Promise<void>;
  /** The fused renditions of the source, once one asked. */
  #fused: FusedRenditions | undefined;
  /** The fused rendition of each subscriber that has one. */
  #fusedOf = new Map<SourceListener, FusedOutput>();
  /** True once a frame was read: a decoder starting later waits for a keyframe. */
  #started = false;
  #closed = false;

  constructor(source: Stream, engine: CodecEngine, log: Logger, onClosed: () => void) {
    this.video = source.videoTrack;
    this.audio = source.tracks.find((t) => t.kind === "audio");
    this.#engine = engine;
    this.#log = log;
    this.#source = source;
    this.#reader = source.reader(sourceQueueFrames, "transcoder");
    this.#reading = this.#read().finally(async () => {
      await this.close();
      onClosed();
    });
  }

  /**
   * Adds a subscriber; the video decoder starts with the first that takes pictures (an
   * audio-only mixer costs no decoding), from the source's next keyframe.
   */
  add(listener: SourceListener, need: PictureNeed): void {
    this.listeners.add(listener);
    this.setNeed(listener, need);
  }

  /** Changes what a subscriber needs; the decoder follows. */
  setNeed(listener: SourceListener, asked: PictureNeed): void {
    if (!this.listeners.has(listener) || this.#closed) return;
    const fused = typeof asked === "object" && "fused" in asked ? asked.fused : undefined;
    const need: "none" | "source" | PictureSize = fused ? "none" : asked as typeof need;
    const had = this.#fusedOf.get(listener);
    if (had && had !== fused) {
      this.#fusedOf.delete(listener);
      this.#fused?.remove(had);
    }
    if (fused) {
      if (this.video && this.#engine.start && had !== fused) {
        this.#fusedOf.set(listener, fused);
        this.#fusedRenditions().add(fused);
      }
    }
    const viewer = this.#viewers.get(listener);
    if (need === "none" || !this.video) {
      if (viewer) this.#drop(viewer);
    } else if (viewer) {
      viewer.box = need === "source" ? undefined : need;
    } else {
      const box = need === "source" ? undefined : need;
      this.#viewers.set(listener, { listener, box, lastPts: -Infinity, feed: undefined });
    }
    this.#retarget();
  }

  /** The fused renditions of the source, made at the first that asks. */
  #fusedRenditions(): FusedRenditions {
    this.#fused ??= new FusedRenditions({
      engine: this.#engine,
      track: this.video!,
      log: this.#log.child({ component: "fused" }),
      requestKeyframe: () => this.#source.requestKeyframe(),
      sourceGapMs,
    });
    return this.#fused;
  }

  /** Removes a subscriber; true when it was one. */
  remove(listener: SourceListener): boolean {
    const fused = this.#fusedOf.get(listener);
    if (fused) {
      this.#fusedOf.delete(listener);
      this.#fused?.remove(fused);
    }
    const viewer = this.#viewers.get(listener);
    if (viewer) {
      this.#drop(viewer);
      this.#retarget();
    }
    return this.listeners.delete(listener);
  }

  /** Input frames not decoded so far. */
  get droppedFrames(): number {
    let dropped = this.#reader.dropped + this.#retiredDrops;
    for (const sized of this.#decoders) dropped += lost(sized);
    return dropped;
  }

  /** The box every viewer's pictures fit in; undefined: the source's size. */
  #neededBox(): PictureSize | undefined {
    // Engines that decode a chunk at a time give the source's size whatever the box.
    if (!this.#engine.start) return undefined;
    let width = 0;
    let height = 0;
    for (const { box } of this.#viewers.values()) {
      if (!box) return undefined;
      width = Math.max(width, box.width);
      height = Math.max(height, box.height);
    }
    // A box the source fits in whole asks for no scaling (the same decoder as "source").
    const video = this.video;
    if (video?.width && video.height && width >= video.width && height >= video.height) {
      return undefined;
    }
    return { width, height };
  }

  /**
   * Makes the decoder at the size now needed the target (starting it when none runs at that
   * size), places new viewers on it, and stops decoders nobody is fed by.
   */
  #retarget(): void {
    if (this.#closed) return;
    if (this.#viewers.size === 0) {
      this.#target = undefined;
      this.#stopIdle();
      return;
    }
    const box = this.#neededBox();
    let target = this.#target;
    if (!target || !sameBox(target.box, box)) {
      target = this.#decoders.find((sized) => sameBox(sized.box, box)) ?? this.#start(box);
      target.sinceTarget = 0;
      this.#target = target;
      this.#log.debug("decoding at", { box: box ?? "source" });
    }
    for (const viewer of this.#viewers.values()) {
      if (viewer.feed) continue;
      viewer.feed = target;
      target.viewers.add(viewer);
    }
    this.#stopIdle();
  }

  #start(box: PictureSize | undefined): SizedDecoder {
    const sized: SizedDecoder = {
      box,
      viewers: new Set(),
      firstPts: undefined,
      sinceTarget: 0,
      beside: this.#decoders.length > 0,
      droppedAtFirst: undefined,
      decoder: undefined!,
    };
    sized.decoder = createVideoDecoder({
      engine: this.#engine,
      track: this.video!,
      log: this.#log,
      box,
      onPicture: (picture) => this.#onPicture(sized, picture),
    });
    this.#decoders.push(sized);
    if (this.#started) this.#source.requestKeyframe();
    return sized;
  }

  #drop(viewer: Viewer): void {
    viewer.feed?.viewers.delete(viewer);
    this.#viewers.delete(viewer.listener);
  }

  /** Stops the decoders that are not the target and feed nobody. */
  #stopIdle(): void {
    const idle = this.#decoders.filter((s) => s !== this.#target && s.viewers.size === 0);
    if (idle.length === 0) return;
    this.#decoders = this.#decoders.filter((s) => !idle.includes(s));
    for (const sized of idle) {
      this.#retiredDrops += lost(sized);
      const stopping = sized.decoder.close().catch((err) => {
        this.#log.warn("decoder close failed", { err });
      });
      this.#stopping.add(stopping);
      stopping.finally(() => this.#stopping.delete(stopping));
    }
  }

  #onPicture(sized: SizedDecoder, picture: RawVideoFrame): void {
    if (this.#closed) return;
    if (sized.firstPts === undefined) {
      sized.firstPts = picture.pts;
      sized.droppedAtFirst = sized.decoder.dropped;
    }
    if (sized === this.#target) {
      sized.sinceTarget++;
      this.#handOver(sized, picture.pts);
    }
    const viewers = [...sized.viewers].filter((viewer) => picture.pts > viewer.lastPts);
    if (viewers.length > 1) picture = shared(picture);
    for (const viewer of viewers) {
      viewer.lastPts = picture.pts;
      viewer.listener.onPicture(picture);
    }
  }

  /**
   * Moves to the target the viewers of other decoders that its picture at `pts` continues:
   * it follows their last picture, and the target has given every picture since then (its
   * first is not after their last). A viewer that had no picture moves at once; after
   * `maxHandOverPictures` one whose old decoder lags behind the target's start moves too.
   */
  #handOver(target: SizedDecoder, pts: number): void {
    let moved = false;
    for (const sized of this.#decoders) {
      if (sized === target) continue;
      for (const viewer of sized.viewers) {
        const continues = pts > viewer.lastPts &&
          (viewer.lastPts >= target.firstPts! || target.sinceTarget > maxHandOverPictures);
        if (viewer.lastPts !== -Infinity && !continues) continue;
        sized.viewers.delete(viewer);
        target.viewers.add(viewer);
        viewer.feed = target;
        moved = true;
      }
    }
    if (moved) this.#stopIdle();
  }

  async #read(): Promise<void> {
    const videoId = this.video?.id;
    const audioId = this.audio?.id;
    for await (const frame of this.#reader) {
      this.#started = true;
      if (frame.trackId === videoId) {
        for (const sized of this.#decoders) sized.decoder.push(frame);
        this.#fused?.push(frame);
      } else if (frame.trackId === audioId) {
        for (const listener of this.listeners) listener.onAudio(frame);
      }
    }
  }

  /** Stops reading and decoding; every subscriber hears `onEnd`. */
  async close(): Promise<void> {
    if (this.#closed) return;
    this.#closed = true;
    this.#reader.close();
    const decoders = this.#decoders;
    this.#decoders = [];
    this.#target = undefined;
    await Promise.all([
      ...decoders.map((s) => s.decoder.close()),
      ...this.#stopping,
      this.#fused?.close(),
    ]);
    this.#fusedOf.clear();
    for (const listener of this.listeners) listener.onEnd();
    this.listeners.clear();
    this.#viewers.clear();
  }

  /** Settles once reading has stopped and the decoder is closed. */
  get done(): Promise<void> {
    return this.#reading;
  }
}

/** Input frames a decoder lost (not those a decoder started beside another waited out). */
function lost(sized: SizedDecoder): number {
  const dropped = sized.decoder.dropped;
  return sized.beside ? dropped - (sized.droppedAtFirst ?? dropped) : dropped;
}

function sameBox(a: PictureSize | undefined, b: PictureSize | undefined): boolean {
  return a === b || (a !== undefined && b !== undefined && a.width === b.width &&
    a.height === b.height);
}

/**
 * The picture in a SharedArrayBuffer: copied once here, then every rendition's kernel Worker
 * reads it in place, where each would otherwise copy it for its own Worker.
 */
function shared(picture: RawVideoFrame): RawVideoFrame {
  const data = new Uint8Array(new SharedArrayBuffer(picture.data.length));
  data.set(picture.data);
  // Nobody else has the decoder's buffer: back to the pool for its next picture.
  const { buffer, byteOffset, byteLength } = picture.data;
  if (buffer instanceof ArrayBuffer && byteOffset === 0 && byteLength === buffer.byteLength) {
    pictureBuffers.give(buffer);
  }
  return { ...picture, data };
}

/** The decoded sources of a server: one decoder per source Stream, however many use it. */
export class DecoderHub {
  #sources = new Map<Stream, DecodedSource>();
  #engine: CodecEngine;
  #log: Logger;

  constructor(engine: CodecEngine, log: Logger) {
    this.#engine = engine;
    this.#log = log.child({ component: "decoder" });
  }

  /** Number of sources being decoded (one decoder each). */
  get decoders(): number {
    return this.#sources.size;
  }

  /** Input frames of `source` not decoded so far, or 0 when it is not being decoded. */
  droppedFrames(source: Stream): number {
    return this.#sources.get(source)?.droppedFrames ?? 0;
  }

  /**
   * Subscribes `listener` to the decoded `source`, starting its decoder when it is the first
   * to take pictures (`need` "none": the source's audio only, no decoding), or re-sizing the
   * decoder when it needs larger pictures than it makes. An ended source calls `onEnd` at
   * once.
   */
  subscribe(
    source: Stream,
    listener: SourceListener,
    need: PictureNeed = "source",
  ): SourceSubscription {
    if (source.ended) {
      queueMicrotask(() => listener.onEnd());
      return { video: source.videoTrack, audio: undefined, need: () => {}, release: () => {} };
    }
    let decoded = this.#sources.get(source);
    if (!decoded) {
      const log = this.#log.child({ stream: source.name });
      decoded = new DecodedSource(source, this.#engine, log, () => {
        if (this.#sources.get(source) === decoded) this.#sources.delete(source);
      });
      this.#sources.set(source, decoded);
      log.info("decoding started");
    }
    decoded.add(listener, need);
    const owner = decoded;
    return {
      video: owner.video,
      audio: owner.audio,
      need: (need) => owner.setNeed(listener, need),
      release: () => {
        if (!owner.remove(listener) || owner.listeners.size > 0) return;
        if (this.#sources.get(source) === owner) this.#sources.delete(source);
        owner.close().catch((err) => this.#log.warn("decoder close failed", { err }));
      },
    };
  }

  /** Closes every decoder (server stop). */
  async close(): Promise<void> {
    const sources = [...this.#sources.values()];
    this.#sources.clear();
    await Promise.all(sources.map(async (s) => {
      await s.close();
      await s.done;
    }));
  }
}
