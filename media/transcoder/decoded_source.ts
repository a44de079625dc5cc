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
 *
 * A subscriber that is a plain encoder (a rendition with nothing for the kernels to do) may
 * be linked instead, on engines with `links`, when it is the source's only picture
 * subscriber as decoding starts: the decoder ffmpeg writes its pictures, scaled to the
 * encoder's size, into a FIFO the encoder ffmpeg reads, and the server gets a 6-byte token
 * (the pts) per picture. Once the link no longer fits (another subscriber joins, a
 * watermark is set, the source's rate is not the output's), a decoder for everyone starts,
 * and the link is cut at the source's next keyframe: the linked decoder gets the frames
 * before it, ends its input and writes out every picture it holds, its encoder drains the
 * FIFO, and the subscriber takes the new decoder's pictures (from that keyframe, held
 * meanwhile) from there: none lost, none twice. It is never linked again.
 */
import type { Logger } from "../../core/log.ts";
import { pictureBuffers } from "../mixer/buffer_pool.ts";
import type { CodecEngine } from "../engine/engine.ts";
import type { MediaFrame, Track } from "../frame.ts";
import type { Stream, StreamReader } from "../stream.ts";
import { PictureLink } from "./picture_link.ts";
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
 * Pictures of the new decoder held for a subscriber whose link is being cut, while the
 * linked decoder writes out its last ones (a few frames); beyond, the oldest are dropped.
 */
const maxHeldPictures = 90;

/**
 * The pictures a subscriber needs: none (its audio only), the source's size, or pictures
 * filling at most this box (aspect kept; the subscriber scales them further).
 */
export type PictureNeed = "none" | "source" | PictureSize;

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
  /** Present when the subscriber can take its pictures through a link (see the top). */
  link?: LinkListener;
}

/** A subscriber that can take its pictures straight from the decoder ffmpeg, by a FIFO. */
export interface LinkListener {
  /**
   * The exact size it takes pictures at through a link now; undefined: no link now. Given
   * `sourceFps` (the source's measured frame rate, 0 when not known yet), undefined unless
   * its pictures come one per output frame at that rate.
   */
  linkSize(sourceFps?: number): PictureSize | undefined;
  /** Starts its encoder reading the FIFO at `path`; throws when it cannot. */
  onLinked(path: string): void;
  /** The decoder wrote the picture of `pts` into the FIFO (ascending pts). */
  onLinkedPicture(pts: number): void;
  /**
   * The link has ended: its FIFO ends after the pictures given (or, `lost`, broke: the
   * encoder must be stopped), and the next pictures come through `onPicture`.
   */
  onUnlinked(lost: boolean): void;
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
  /** Its link, when it writes its one viewer's pictures into a FIFO. */
  link?: Link;
}

/** A decoder's link to its one viewer's encoder. */
interface Link {
  viewer: Viewer;
  fifo: PictureLink;
  size: PictureSize;
  /** linked; cutting at the next keyframe; ending (writing out its last pictures); lost. */
  state: "linked" | "cutting" | "ending" | "lost";
}

/** A viewer moving off a link: the new decoder's pictures wait until the link has ended. */
interface Move {
  viewer: Viewer;
  to: SizedDecoder;
  held: RawVideoFrame[];
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
  /** True once a frame was read: a decoder starting later waits for a keyframe. */
  #started = false;
  /** True once a link was made: no other is (a link that broke or was cut stays off). */
  #linkTried = false;
  #move: Move | undefined;
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
  setNeed(listener: SourceListener, need: PictureNeed): void {
    if (!this.listeners.has(listener) || this.#closed) return;
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

  /** Removes a subscriber; true when it was one. */
  remove(listener: SourceListener): boolean {
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
    const link = this.#target?.link;
    if (link?.state === "linked") {
      if (this.#linkHolds(link)) return;
      // Cut at the next keyframe (see #read); everyone takes the new target's pictures.
      link.state = "cutting";
      this.#target = undefined;
      this.#log.debug("link cut at the next keyframe");
    }
    const box = this.#neededBox();
    let target = this.#target;
    if (!target || !sameBox(target.box, box)) {
      target = this.#decoders.find((sized) => !sized.link && sameBox(sized.box, box)) ??
        this.#startLinked() ?? this.#start(box);
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

  /** True while a link still fits: its viewer is the only one and takes the same size. */
  #linkHolds(link: Link): boolean {
    if (this.#viewers.size !== 1 || this.#viewers.get(link.viewer.listener) !== link.viewer) {
      return false;
    }
    const size = link.viewer.listener.link?.linkSize();
    return size !== undefined && sameBox(size, link.size);
  }

  /**
   * A linked decoder for the only viewer when it can take a link and decoding starts now;
   * undefined otherwise (or when the FIFO or its encoder cannot be made).
   */
  #startLinked(): SizedDecoder | undefined {
    if (this.#linkTried || !this.#engine.links || !this.#engine.start) return undefined;
    if (this.#decoders.length > 0 || this.#viewers.size !== 1) return undefined;
    const viewer = [...this.#viewers.values()][0];
    const size = viewer.listener.link?.linkSize(this.#source.record().fps);
    if (!size) return undefined;
    this.#linkTried = true;
    let fifo: PictureLink | undefined;
    try {
      fifo = new PictureLink();
      viewer.listener.link!.onLinked(fifo.path);
    } catch (err) {
      fifo?.remove();
      this.#log.warn("picture link not made: pictures go through the server", { err });
      return undefined;
    }
    const sized: SizedDecoder = {
      box: undefined,
      viewers: new Set(),
      firstPts: undefined,
      sinceTarget: 0,
      beside: false,
      droppedAtFirst: undefined,
      decoder: undefined!,
      link: { viewer, fifo, size, state: "linked" },
    };
    sized.decoder = createVideoDecoder({
      engine: this.#engine,
      track: this.video!,
      log: this.#log,
      link: { path: fifo.path, size },
      onPicture: (picture) => this.#onPicture(sized, picture),
      // Called from within a push: the decoders are not changed under #read's feet.
      onLinkLost: () => queueMicrotask(() => this.#onLinkLost(sized)),
    });
    this.#decoders.push(sized);
    this.#log.debug("decoding into a link", { size });
    if (this.#started) this.#source.requestKeyframe();
    return sized;
  }

  /** The linked decoder broke: stopped, and its viewer takes pictures from a new one. */
  #onLinkLost(sized: SizedDecoder): void {
    const link = sized.link!;
    if (this.#closed || link.state === "lost" || !this.#decoders.includes(sized)) return;
    link.state = "lost";
    this.#decoders = this.#decoders.filter((s) => s !== sized);
    this.#retiredDrops += lost(sized);
    this.#stopDecoder(sized);
    if (this.#target === sized) this.#target = undefined;
    const viewer = link.viewer;
    sized.viewers.delete(viewer);
    viewer.feed = undefined;
    if (this.#move?.viewer === viewer) this.#move = undefined;
    if (this.#viewers.get(viewer.listener) === viewer) viewer.listener.link?.onUnlinked(true);
    this.#retarget();
  }

  /** The link is cut here: the linked decoder writes out its pictures, then its viewer moves. */
  #endLinked(sized: SizedDecoder): void {
    const link = sized.link!;
    link.state = "ending";
    const to = this.#target;
    if (to && sized.viewers.has(link.viewer)) this.#move = { viewer: link.viewer, to, held: [] };
    const ending = sized.decoder.end!().catch((err) => {
      this.#log.warn("linked decoder did not end", { err });
    }).then(() => this.#finishMove(sized));
    this.#stopping.add(ending);
    ending.finally(() => this.#stopping.delete(ending));
  }

  /** The linked decoder has written everything: its viewer takes the held pictures on. */
  #finishMove(sized: SizedDecoder): void {
    if (this.#decoders.includes(sized)) {
      this.#decoders = this.#decoders.filter((s) => s !== sized);
      this.#retiredDrops += lost(sized);
      this.#stopDecoder(sized);
    }
    const move = this.#move;
    if (!move || this.#closed || move.viewer !== sized.link!.viewer) return;
    this.#move = undefined;
    const viewer = move.viewer;
    sized.viewers.delete(viewer);
    if (this.#viewers.get(viewer.listener) !== viewer) return;
    viewer.listener.link?.onUnlinked(false);
    const to = this.#decoders.includes(move.to) ? move.to : this.#target;
    viewer.feed = to;
    to?.viewers.add(viewer);
    for (const picture of move.held) {
      if (picture.pts <= viewer.lastPts) continue;
      viewer.lastPts = picture.pts;
      viewer.listener.onPicture(picture);
    }
    this.#stopIdle();
  }

  /** Stops a decoder that left `#decoders` (its FIFO removed once it is gone). */
  #stopDecoder(sized: SizedDecoder): void {
    const stopping = sized.decoder.close().catch((err) => {
      this.#log.warn("decoder close failed", { err });
    }).finally(() => sized.link?.fifo.remove());
    this.#stopping.add(stopping);
    stopping.finally(() => this.#stopping.delete(stopping));
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
    if (this.#move?.viewer === viewer) this.#move = undefined;
    viewer.feed?.viewers.delete(viewer);
    this.#viewers.delete(viewer.listener);
  }

  /** Stops the decoders that are not the target and feed nobody. */
  #stopIdle(): void {
    // The decoder a viewer moves to off a link keeps running for it.
    const idle = this.#decoders.filter((s) =>
      s !== this.#target && s.viewers.size === 0 && s !== this.#move?.to
    );
    if (idle.length === 0) return;
    this.#decoders = this.#decoders.filter((s) => !idle.includes(s));
    for (const sized of idle) {
      this.#retiredDrops += lost(sized);
      this.#stopDecoder(sized);
    }
  }

  #onPicture(sized: SizedDecoder, picture: RawVideoFrame): void {
    if (this.#closed) return;
    if (sized.link) {
      // A token: every one stands for a picture in the FIFO, so every one is told.
      const { viewer } = sized.link;
      if (sized.viewers.has(viewer)) {
        viewer.lastPts = picture.pts;
        viewer.listener.link?.onLinkedPicture(picture.pts);
      }
      return;
    }
    if (sized.firstPts === undefined) {
      sized.firstPts = picture.pts;
      sized.droppedAtFirst = sized.decoder.dropped;
    }
    if (sized === this.#target) {
      sized.sinceTarget++;
      this.#handOver(sized, picture.pts);
    }
    const viewers = [...sized.viewers].filter((viewer) => picture.pts > viewer.lastPts);
    const move = this.#move?.to === sized ? this.#move : undefined;
    if (viewers.length + (move ? 1 : 0) > 1) picture = shared(picture);
    if (move) {
      move.held.push(picture);
      if (move.held.length > maxHeldPictures) move.held.shift();
    }
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
      // A linked viewer moves when its link has ended (#finishMove).
      if (sized === target || sized.link) continue;
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
        for (const sized of [...this.#decoders]) {
          const state = sized.link?.state;
          if (state === "cutting" && frame.keyframe) this.#endLinked(sized);
          else if (state !== "ending") sized.decoder.push(frame);
        }
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
    this.#move = undefined;
    await Promise.all([
      ...decoders.map((s) => s.decoder.close().finally(() => s.link?.fifo.remove())),
      ...this.#stopping,
    ]);
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
