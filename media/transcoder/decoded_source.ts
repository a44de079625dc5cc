/**
 * A source Stream decoded once for every rendition made of it: one reader of the source, one
 * video decoder, and the decoded pictures (and the source's compressed audio) fanned out to
 * every subscriber. The hub keeps one per source Stream; the last subscriber to leave closes
 * it, decoder process or Worker included.
 */
import type { Logger } from "../../core/log.ts";
import type { CodecEngine } from "../engine/engine.ts";
import type { MediaFrame, Track } from "../frame.ts";
import type { Stream, StreamReader } from "../stream.ts";
import { createVideoDecoder } from "./video_decoder.ts";
import type { RawVideoFrame, VideoDecoder } from "./video_codec.ts";

/** Frames the source's reader may queue: about 2 s of 30 fps video with its audio. */
const sourceQueueFrames = 160;

/** What a subscriber of a decoded source receives. */
export interface SourceListener {
  /** A decoded picture, in presentation order, pts in 90 kHz on the source's timeline. */
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
  /** Leaves; the last subscriber to leave stops the decoder. */
  release(): void;
}

/** One source Stream decoded for all its subscribers. */
class DecodedSource {
  readonly listeners = new Set<SourceListener>();
  /** The listeners that take pictures; the others take audio only. */
  readonly #pictureListeners = new Set<SourceListener>();
  #engine: CodecEngine;
  #log: Logger;
  #source: Stream;
  readonly video: Track | undefined;
  readonly audio: Track | undefined;
  #reader: StreamReader;
  #decoder: VideoDecoder | undefined;
  #reading: Promise<void>;
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
  add(listener: SourceListener, pictures: boolean): void {
    this.listeners.add(listener);
    if (!pictures || !this.video) return;
    this.#pictureListeners.add(listener);
    if (this.#decoder || this.#closed) return;
    this.#decoder = createVideoDecoder({
      engine: this.#engine,
      track: this.video,
      log: this.#log,
      onPicture: (picture) => {
        const listeners = this.#pictureListeners;
        if (listeners.size > 1) picture = shared(picture);
        for (const listener of listeners) listener.onPicture(picture);
      },
    });
    if (this.#started) this.#source.requestKeyframe();
  }

  /** Removes a subscriber; true when it was one. */
  remove(listener: SourceListener): boolean {
    this.#pictureListeners.delete(listener);
    return this.listeners.delete(listener);
  }

  /** Input frames not decoded so far. */
  get droppedFrames(): number {
    return this.#reader.dropped + (this.#decoder?.dropped ?? 0);
  }

  async #read(): Promise<void> {
    const videoId = this.video?.id;
    const audioId = this.audio?.id;
    for await (const frame of this.#reader) {
      this.#started = true;
      if (frame.trackId === videoId) this.#decoder?.push(frame);
      else if (frame.trackId === audioId) {
        for (const listener of this.listeners) listener.onAudio(frame);
      }
    }
  }

  /** Stops reading and decoding; every subscriber hears `onEnd`. */
  async close(): Promise<void> {
    if (this.#closed) return;
    this.#closed = true;
    this.#reader.close();
    await this.#decoder?.close();
    for (const listener of this.listeners) listener.onEnd();
    this.listeners.clear();
    this.#pictureListeners.clear();
  }

  /** Settles once reading has stopped and the decoder is closed. */
  get done(): Promise<void> {
    return this.#reading;
  }
}

/**
 * The picture in a SharedArrayBuffer: copied once here, then every rendition's kernel Worker
 * reads it in place, where each would otherwise copy it for its own Worker.
 */
function shared(picture: RawVideoFrame): RawVideoFrame {
  const data = new Uint8Array(new SharedArrayBuffer(picture.data.length));
  data.set(picture.data);
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
   * to take pictures (`pictures` false: the source's audio only, no decoding). An ended
   * source calls `onEnd` at once.
   */
  subscribe(source: Stream, listener: SourceListener, pictures = true): SourceSubscription {
    if (source.ended) {
      queueMicrotask(() => listener.onEnd());
      return { video: source.videoTrack, audio: undefined, release: () => {} };
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
    decoded.add(listener, pictures);
    const owner = decoded;
    return {
      video: owner.video,
      audio: owner.audio,
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
