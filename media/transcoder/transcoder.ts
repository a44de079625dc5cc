/**
 * A transcoder: a source stream, found by name (waited for when it is not published yet),
 * made into a new local stream by a rendition of its decoded pictures. The output Stream is
 * registered like any other, so every reader (WebRTC, RTMP, recorder, snapshot) plays it. It
 * ends when its source ends, on `stop`, or when its output is terminated.
 */
import type { Logger } from "../../core/log.ts";
import type { CodecEngine } from "../engine/engine.ts";
import { Stream } from "../stream.ts";
import type { StreamDirectory } from "../stream_record.ts";
import type { DecoderHub, SourceSubscription } from "./decoded_source.ts";
import { type PlacedWatermark, Rendition, type RenditionProfile } from "./rendition.ts";

/** How often a transcoder waiting for its source looks for it, in ms. */
const sourcePollMs = 200;

/** `mediaProvider` of a transcoder's output stream. */
export const transcoderMediaProvider = "Transcoder";

/** Where a transcoder is in its life. */
export type TranscoderState = "WAITING" | "PROCESSED_LOCAL" | "ENDED";

/** What a transcoder is built from. */
export interface TranscoderOptions {
  /** Name of the output stream. */
  name: string;
  /** Name of the source stream. */
  sourceName: string;
  /** mediaSessionId of the output stream. */
  mediaSessionId: string;
  profile: RenditionProfile;
  watermark?: PlacedWatermark;
  /** Where the source is looked up and the output registered. */
  streams: StreamDirectory;
  hub: DecoderHub;
  engine: CodecEngine;
  log: Logger;
  /** Called once when the transcoder has ended, whatever the reason. */
  onEnded: (reason: string) => void;
}

/** A source stream transcoded into a new local stream. */
export class Transcoder {
  #options: TranscoderOptions;
  #state: TranscoderState = "WAITING";
  #timer: ReturnType<typeof setTimeout> | undefined;
  #output: Stream | undefined;
  #rendition: Rendition | undefined;
  #subscription: SourceSubscription | undefined;
  #watermark: PlacedWatermark | undefined;
  #ending: Promise<void> | undefined;

  /** Starts looking for the source at once. */
  constructor(options: TranscoderOptions) {
    this.#options = options;
    this.#watermark = options.watermark;
    this.#look();
  }

  get state(): TranscoderState {
    return this.#state;
  }

  /** The output stream, once the source was found. */
  get output(): Stream | undefined {
    return this.#output;
  }

  /** The running rendition (its counters), once the source was found. */
  get rendition(): Rendition | undefined {
    return this.#rendition;
  }

  /** Changes the watermark of the output from its next frame; undefined removes it. */
  setWatermark(watermark: PlacedWatermark | undefined): void {
    this.#watermark = watermark;
    if (!this.#rendition) return;
    this.#rendition.setWatermark(watermark);
    // A fused rendition given a watermark now takes pictures instead.
    this.#subscription?.need(this.#rendition.pictureNeed);
  }

  /** Ends the transcoder and its output stream (idempotent). */
  stop(reason: string): Promise<void> {
    this.#ending ??= this.#end(reason);
    return this.#ending;
  }

  #look(): void {
    const { streams, sourceName } = this.#options;
    const source = streams.published(sourceName);
    if (source instanceof Stream && !source.ended) {
      this.#start(source);
      return;
    }
    this.#timer = setTimeout(() => this.#look(), sourcePollMs);
  }

  #start(source: Stream): void {
    const { name, mediaSessionId, profile, hub, engine, streams, log } = this.#options;
    const rendition = new Rendition({
      engine,
      profile,
      sourceVideo: source.videoTrack,
      sourceAudio: source.tracks.find((t) => t.kind === "audio"),
      watermark: this.#watermark,
      onFrame: (frame) => output.push(frame),
      log,
    });
    const output = new Stream({
      name,
      mediaSessionId,
      tracks: rendition.tracks,
      mediaProvider: transcoderMediaProvider,
      stopProvider: (info) => this.stop(info),
      lostVideoFrames: () => rendition.stats.droppedFrames,
    });
    try {
      streams.add(output);
    } catch (err) {
      log.warn("output stream not registered", { err });
      void rendition.close();
      void this.stop((err as Error).message);
      return;
    }
    this.#output = output;
    this.#rendition = rendition;
    this.#state = "PROCESSED_LOCAL";
    log.info("transcoding", { source: source.name });
    this.#subscription = hub.subscribe(source, {
      onPicture: (picture) => rendition.pushPicture(picture),
      onAudio: (frame) => rendition.pushAudio(frame),
      onEnd: () => void this.stop("source stream ended"),
    }, rendition.pictureNeed);
  }

  async #end(reason: string): Promise<void> {
    clearTimeout(this.#timer);
    this.#state = "ENDED";
    this.#subscription?.release();
    await this.#rendition?.close();
    if (this.#output) {
      this.#output.end();
      this.#options.streams.remove(this.#output);
    }
    this.#options.log.info("transcoder ended", { reason });
    this.#options.onEnded(reason);
  }
}
