/**
 * Renditions made for players that ask for another size or bitrate than their source's (the
 * Web SDK's play constraints `video: {width, height}` and `maxBitrate`, as in WCS; HLS ABR
 * profiles). Readers asking the same of the same source share one rendition; it starts with its first reader
 * and stops, encoder and kernels included, when the last one leaves. It is not published
 * under a name: only its players read it.
 */
import { ServiceUnavailableError } from "../../core/errors.ts";
import type { Cap } from "../../core/limits.ts";
import type { Logger } from "../../core/log.ts";
import type { AudioTarget } from "../engine/audio_conversion.ts";
import type { CodecEngine } from "../engine/engine.ts";
import { Stream, type StreamReader } from "../stream.ts";
import type { ReaderKind } from "../stream_tally.ts";
import type { DecoderHub, SourceSubscription } from "./decoded_source.ts";
import { maxOutputSide, Rendition, type RenditionProfile } from "./rendition.ts";

/** How long a rendition waits for its first player before it stops, in ms. */
const firstReaderTimeoutMs = 15_000;

/** What a player asks of its stream. */
export interface PlayRequest {
  /** Picture size in pixels; 0 for one side keeps the aspect, 0 for both the source's size. */
  width: number;
  height: number;
  /** Highest video bitrate in kbit/s; 0 for none. */
  maxBitrateKbps: number;
  /** Frames per second; 0 or absent follows the source. */
  fps?: number;
}

/** A rendition of a source as a Stream its players read. */
class RenditionStream extends Stream {
  readonly key: string;
  #source: Stream;
  #rendition: Rendition;
  #hub: DecoderHub;
  #subscription: SourceSubscription | undefined;
  #onEnd: () => void;
  #stopping: Promise<void> | undefined;
  #idleTimer: ReturnType<typeof setTimeout>;

  constructor(
    key: string,
    source: Stream,
    rendition: Rendition,
    hub: DecoderHub,
    onEnd: () => void,
  ) {
    super({
      name: source.name,
      mediaSessionId: crypto.randomUUID(),
      tracks: rendition.tracks,
      mediaProvider: source.mediaProvider,
      stopProvider: () => this.#stop(),
    });
    this.key = key;
    this.#source = source;
    this.#rendition = rendition;
    this.#hub = hub;
    this.#onEnd = onEnd;
    // A player that fails before it reads must not leave the rendition (and its slot) behind.
    this.#idleTimer = setTimeout(() => void this.terminate("no readers"), firstReaderTimeoutMs);
  }

  /** A reader; the first one starts decoding the source. */
  override reader(queueFrames?: number, kind?: ReaderKind): StreamReader {
    clearTimeout(this.#idleTimer);
    if (!this.#subscription && !this.ended) {
      const rendition = this.#rendition;
      this.#subscription = this.#hub.subscribe(this.#source, {
        onPicture: (picture) => rendition.pushPicture(picture),
        onAudio: (frame) => rendition.pushAudio(frame),
        onEnd: () => void this.terminate("source stream ended"),
      }, rendition.pictureNeed);
    }
    return super.reader(queueFrames, kind);
  }

  /** Detaches a reader; the last one stops the rendition. */
  override detach(reader: StreamReader): void {
    super.detach(reader);
    if (this.readerCount === 0 && this.#subscription) void this.terminate("no readers");
  }

  #stop(): Promise<void> {
    this.#stopping ??= (async () => {
      clearTimeout(this.#idleTimer);
      this.#onEnd();
      this.#subscription?.release();
      await this.#rendition.close();
    })();
    return this.#stopping;
  }
}

/** The play renditions of a server. */
export class PlayRenditions {
  #renditions = new Map<string, RenditionStream>();
  #hub: DecoderHub;
  #engine: CodecEngine;
  #log: Logger;
  #cap: Cap;

  /** @param cap the `transcoders` cap: each rendition holds a slot while it runs. */
  constructor(hub: DecoderHub, engine: CodecEngine, log: Logger, cap: Cap) {
    this.#hub = hub;
    this.#engine = engine;
    this.#log = log.child({ component: "play-rendition" });
    this.#cap = cap;
  }

  /** Renditions running. */
  get size(): number {
    return this.#renditions.size;
  }

  /**
   * True when `request` asks for something other than `source` as it is: a size that is not
   * the source's, or a bitrate cap.
   */
  static wanted(source: Stream, request: PlayRequest): boolean {
    const video = source.videoTrack;
    if (!video) return false;
    if (request.maxBitrateKbps > 0) return true;
    const { width, height } = request;
    if (width <= 0 && height <= 0) return false;
    return (width > 0 && width !== video.width) || (height > 0 && height !== video.height);
  }

  /**
   * The stream of `source` encoded as `codec` per `request`, shared with readers that asked
   * the same; its audio becomes `audio` (Opus for WebRTC players, AAC for HLS) when it is
   * not. A rendition beyond the `transcoders` cap is a 503.
   */
  get(
    source: Stream,
    request: PlayRequest,
    codec: RenditionProfile["videoCodec"],
    audio: AudioTarget = "OPUS",
  ): Stream {
    const width = evenSize(request.width);
    const height = evenSize(request.height);
    const fps = request.fps ?? 0;
    const key = `${source.mediaSessionId}/${width}x${height}@${fps}/` +
      `${request.maxBitrateKbps}/${codec}/${audio}`;
    const running = this.#renditions.get(key);
    if (running && !running.ended) return running;
    if (!this.#cap.tryAcquire()) throw new ServiceUnavailableError(this.#cap.refusal());
    const sourceAudio = source.tracks.find((t) => t.kind === "audio");
    const log = this.#log.child({ stream: source.name, rendition: key });
    const rendition = new Rendition({
      engine: this.#engine,
      profile: {
        width,
        height,
        fps,
        keyFrameInterval: 0,
        videoCodec: codec,
        bitrateKbps: request.maxBitrateKbps,
        audio: sourceAudio && sourceAudio.codec !== audio
          ? { codec: audio, sampleRate: 0, bitrateKbps: 0 }
          : undefined,
      },
      sourceVideo: source.videoTrack,
      sourceAudio,
      onFrame: (frame) => stream.push(frame),
      log,
    });
    const stream: RenditionStream = new RenditionStream(key, source, rendition, this.#hub, () => {
      if (this.#renditions.get(key) === stream) this.#renditions.delete(key);
      this.#cap.release();
      log.info("play rendition ended");
    });
    this.#renditions.set(key, stream);
    log.info("play rendition started");
    return stream;
  }

  /** Ends every rendition (server stop). */
  async closeAll(): Promise<void> {
    await Promise.all([...this.#renditions.values()].map((r) => r.terminate("server stop")));
  }
}

/** A requested side made even (encoders need it) and kept within `maxOutputSide`. */
function evenSize(side: number): number {
  if (!(side > 0)) return 0;
  return Math.min(maxOutputSide, Math.max(2, Math.round(side / 2) * 2));
}
