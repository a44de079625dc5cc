/**
 * A transcoder node's encodings of CDN profiles: `<source><profile>` (e.g. `cam-240p`) is the
 * origin stream `source`, pulled once, encoded with the profile's settings by the transcoding
 * pipeline. Each encoding ends `graceMs` after its last reader (an edge's relay) left, and the
 * source pull after its last encoding.
 */
import type { Logger } from "../log.ts";
import type { StreamRegistry } from "../stream_registry.ts";
import { Stream } from "../../media/stream.ts";
import { Transcoder } from "../../media/transcoder/transcoder.ts";
import type { RenditionProfile } from "../../media/transcoder/rendition.ts";
import type { DecoderHub } from "../../media/transcoder/decoded_source.ts";
import type { CodecEngine } from "../../media/engine/engine.ts";
import type { AudioTarget } from "../../media/engine/audio_conversion.ts";
import { randomToken } from "../ids.ts";

/** How often an encoding looks for readers, in ms. */
const readerCheckMs = 1000;
/** How long an encoding may take to give its output stream, in ms. */
const outputWaitMs = 10_000;

/** A CDN profile (`/cdn/profile/*`, WCS's cdn_profiles.yml). */
export interface CdnProfile {
  audio?: { codec?: string; rate?: number; channels?: number; bitrate?: number };
  video?: {
    codec?: string;
    width?: number;
    height?: number;
    /** kbit/s. */
    bitrate?: number;
    gop?: number;
    fps?: number;
    quality?: number;
    codecImpl?: string;
    preset?: string;
  };
}

const audioCodecs: Record<string, AudioTarget> = {
  opus: "OPUS",
  "mpeg4-generic": "AAC",
  aac: "AAC",
  pcmu: "PCMU",
  ulaw: "PCMU",
  pcma: "PCMA",
  alaw: "PCMA",
};

/** The rendition of a CDN profile; audio bitrates are in bps there, kbit/s here. */
export function renditionOf(profile: CdnProfile): RenditionProfile {
  const video = profile.video ?? {};
  const audio = profile.audio;
  const audioCodec = audio?.codec ? audioCodecs[audio.codec.toLowerCase()] : undefined;
  return {
    width: video.width ?? 0,
    height: video.height ?? 0,
    fps: video.fps ?? 0,
    keyFrameInterval: video.gop ?? 0,
    videoCodec: video.codec?.toLowerCase() === "vp8" ? "VP8" : "H264",
    bitrateKbps: video.bitrate ?? 0,
    audio: audioCodec
      ? {
        codec: audioCodec,
        sampleRate: audio?.rate ?? 0,
        bitrateKbps: Math.round((audio?.bitrate ?? 0) / 1000),
      }
      : undefined,
  };
}

/** What encodings need. */
export interface ProfileTranscodesOptions {
  streams: StreamRegistry;
  decoders: DecoderHub;
  engine: CodecEngine;
  log: Logger;
  /** How long an encoding outlives its last reader, in ms. */
  graceMs: number;
  /** Brings the source stream `name` here (pulled from its origin); undefined when none has it. */
  openSource: (name: string) => Promise<Stream | undefined>;
  /** Told when an encoding starts or ends (the node's load changed). */
  onChange?: () => void;
}

interface Encoding {
  transcoder: Transcoder;
  timer: ReturnType<typeof setInterval>;
  idleSinceMs?: number;
}

/** The encodings of one transcoder node, by output name. */
export class ProfileTranscodes {
  #options: ProfileTranscodesOptions;
  #running = new Map<string, Encoding>();
  #starting = new Map<string, Promise<Stream | undefined>>();

  constructor(options: ProfileTranscodesOptions) {
    this.#options = options;
  }

  /** Number of running encodings. */
  get size(): number {
    return this.#running.size;
  }

  /**
   * The encoding of `profile` of `source`, started unless it runs; undefined when no origin
   * offers `source`.
   */
  open(source: string, profile: string, settings: CdnProfile): Promise<Stream | undefined> {
    const name = `${source}${profile}`;
    const output = this.#running.get(name)?.transcoder.output;
    if (output && !output.ended) return Promise.resolve(output);
    let starting = this.#starting.get(name);
    if (!starting) {
      starting = this.#start(name, source, settings).finally(() => this.#starting.delete(name));
      this.#starting.set(name, starting);
    }
    return starting;
  }

  async #start(name: string, source: string, settings: CdnProfile): Promise<Stream | undefined> {
    const { streams, decoders, engine, log, graceMs } = this.#options;
    const input = await this.#options.openSource(source);
    if (!input) return undefined;
    const encoding: Encoding = {
      transcoder: new Transcoder({
        name,
        sourceName: source,
        mediaSessionId: randomToken(32),
        profile: renditionOf(settings),
        streams,
        hub: decoders,
        engine,
        log: log.child({ stream: name }),
        onEnded: (reason) => {
          clearInterval(encoding.timer);
          if (this.#running.get(name) === encoding) this.#running.delete(name);
          this.#options.onChange?.();
          log.info("cdn profile encoding ended", { stream: name, reason });
        },
      }),
      timer: setInterval(() => {
        const output = encoding.transcoder.output;
        if (!output || output.readerCount > 0) {
          encoding.idleSinceMs = undefined;
          return;
        }
        encoding.idleSinceMs ??= Date.now();
        if (Date.now() - encoding.idleSinceMs >= graceMs) {
          void encoding.transcoder.stop("no viewers");
        }
      }, readerCheckMs),
    };
    this.#running.set(name, encoding);
    this.#options.onChange?.();
    const deadline = Date.now() + outputWaitMs;
    while (!encoding.transcoder.output && encoding.transcoder.state !== "ENDED") {
      if (Date.now() > deadline) {
        await encoding.transcoder.stop("no output");
        return undefined;
      }
      await new Promise((resolve) => setTimeout(resolve, 50));
    }
    const output = encoding.transcoder.output;
    return output instanceof Stream && !output.ended ? output : undefined;
  }

  /** Ends every encoding. */
  async closeAll(reason: string): Promise<void> {
    await Promise.allSettled([...this.#starting.values()]);
    await Promise.all([...this.#running.values()].map((e) => e.transcoder.stop(reason)));
  }
}
