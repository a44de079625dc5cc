/**
 * The transcoders of the `/transcoder` and `/transcoder2` groups, by uri. A transcoder
 * started before its source is published waits for it (status WAITING); it ends when its
 * source ends, on terminate, or at server stop, and its entry goes with it.
 */
import type { CodecEngine } from "../media/engine/engine.ts";
import type { DecoderHub } from "../media/transcoder/decoded_source.ts";
import {
  type AudioProfile,
  maxOutputSide,
  type RenditionProfile,
} from "../media/transcoder/rendition.ts";
import { Transcoder } from "../media/transcoder/transcoder.ts";
import type { EncodedVideoCodec } from "../media/transcoder/video_codec.ts";
import {
  BadRequestError,
  ConflictError,
  NotFoundError,
  ServiceUnavailableError,
} from "./errors.ts";
import type { Cap } from "./limits.ts";
import type { WatermarkCache } from "./watermark_cache.ts";
import type { Logger } from "./log.ts";
import type { Transcoder2Record, TranscoderRecord } from "./records.ts";
import type { StreamRegistry } from "./stream_registry.ts";

/** The two generations of the API; each is also the scheme of its uris. */
export type TranscoderScheme = "transcoder" | "transcoder2";

/** Encoder settings of a startup request (the union of both generations). */
export interface EncoderRequest {
  width?: number;
  height?: number;
  keyFrameInterval?: number;
  fps?: number;
  watermark?: string;
  bitrate?: number;
  audioRate?: number;
  audioBitrate?: number;
  audioCodec?: string;
  videoCodec?: string;
  videoRate?: number;
}

/** A startup request. */
export interface TranscoderStartup {
  uri: string;
  remoteStreamName: string;
  localStreamName: string;
  encoder: EncoderRequest;
}

/** Video codecs by the names requests may use (case does not matter). */
const videoCodecs: Record<string, EncodedVideoCodec> = { h264: "H264", vp8: "VP8" };
/** Audio codecs by the names requests may use (case does not matter). */
const audioCodecs: Record<string, AudioProfile["codec"]> = {
  opus: "OPUS",
  aac: "AAC",
  pcmu: "PCMU",
  pcma: "PCMA",
};
/** Highest output frame rate, in frames per second. */
const maxFps = 120;
/** Highest keyframe interval, in frames. */
const maxKeyFrameInterval = 1200;
/**
 * Bitrates are taken in kbit/s, as WCS's examples give them, or in bit/s when at least these
 * (no video is coded at 100 Mbit/s, no audio at 1 Mbit/s).
 */
const minVideoBps = 100_000;
const minAudioBps = 1_000;
/** Highest audio sample rate, in Hz. */
const maxAudioRate = 96_000;

interface Entry {
  scheme: TranscoderScheme;
  uri: string;
  remoteStreamName: string;
  localStreamName: string;
  mediaSessionId: string;
  encoder: EncoderRequest;
  transcoder: Transcoder;
}

/** The transcoders of a server. */
export class TranscoderRegistry {
  #entries = new Map<string, Entry>();
  #streams: StreamRegistry;
  #hub: DecoderHub;
  #engine: CodecEngine;
  #log: Logger;
  #cap: Cap;
  #watermarks: WatermarkCache;

  /** @param cap the `transcoders` cap; a transcoder holds a slot from startup to its end. */
  constructor(
    streams: StreamRegistry,
    hub: DecoderHub,
    engine: CodecEngine,
    watermarks: WatermarkCache,
    log: Logger,
    cap: Cap,
  ) {
    this.#streams = streams;
    this.#hub = hub;
    this.#engine = engine;
    this.#log = log.child({ component: "transcoder" });
    this.#cap = cap;
    this.#watermarks = watermarks;
  }

  /**
   * Starts a transcoder of `remoteStreamName` into `localStreamName`; it waits for its source
   * when that is not published yet. Bad settings are a 400 naming the field, a uri or output
   * name in use a 409, a missing watermark file a 404.
   */
  async startup(scheme: TranscoderScheme, request: TranscoderStartup): Promise<void> {
    const { uri, remoteStreamName, localStreamName, encoder } = request;
    if (localStreamName === remoteStreamName) {
      throw new BadRequestError("localStreamName", "must differ from remoteStreamName");
    }
    const profile = profileOf(scheme, encoder);
    this.#checkFree(uri, localStreamName);
    const watermark = encoder.watermark
      ? await this.#watermarks.place(encoder.watermark, 0, 0, "encoder.watermark")
      : undefined;
    // Checked again: another startup may have taken the uri while the watermark loaded.
    this.#checkFree(uri, localStreamName);
    if (!this.#cap.tryAcquire()) throw new ServiceUnavailableError(this.#cap.refusal());
    const mediaSessionId = crypto.randomUUID();
    const transcoder: Transcoder = new Transcoder({
      name: localStreamName,
      sourceName: remoteStreamName,
      mediaSessionId,
      profile,
      watermark,
      streams: this.#streams,
      hub: this.#hub,
      engine: this.#engine,
      log: this.#log.child({ uri, stream: localStreamName }),
      // Called after an await at the earliest, so the entry below is in place by then.
      onEnded: () => {
        if (this.#entries.get(uri)?.transcoder === transcoder) this.#entries.delete(uri);
        this.#cap.release();
      },
    });
    this.#entries.set(uri, {
      scheme,
      uri,
      remoteStreamName,
      localStreamName,
      mediaSessionId,
      encoder: { ...encoder },
      transcoder,
    });
    this.#log.info("transcoder started", { uri, source: remoteStreamName, localStreamName });
  }

  /** The records of one generation's transcoders. */
  list(scheme: "transcoder"): TranscoderRecord[];
  list(scheme: "transcoder2"): Transcoder2Record[];
  list(scheme: TranscoderScheme): (TranscoderRecord | Transcoder2Record)[] {
    return [...this.#entries.values()].filter((e) => e.scheme === scheme).map((e) => {
      const output = e.transcoder.output;
      const rendition = e.transcoder.rendition;
      const record = {
        localMediaSessionId: e.mediaSessionId,
        localStreamName: e.localStreamName,
        remoteStreamName: e.remoteStreamName,
        uri: e.uri,
        status: e.transcoder.state,
        hasAudio: output?.tracks.some((t) => t.kind === "audio") ?? false,
        hasVideo: output?.tracks.some((t) => t.kind === "video") ?? false,
        record: output?.recording !== undefined,
        encoder: { ...e.encoder },
        droppedFrames: rendition?.stats.droppedFrames ?? 0,
      };
      if (scheme === "transcoder2" && output) {
        const rates = output.record();
        record.encoder.videoRate = Math.max(0, rates.bitrate - rates.audioBitrate);
      }
      return record;
    });
  }

  /** Ends the transcoder of `uri` and its output stream. */
  async terminate(scheme: TranscoderScheme, uri: string): Promise<void> {
    await this.#entry(scheme, uri).transcoder.stop("Stopped by rest terminate");
  }

  /**
   * Stamps the PNG `watermark` of the media folder at (x, y) on the output of `uri` from its
   * next frame; an empty name removes the watermark.
   */
  async setWatermark(
    scheme: TranscoderScheme,
    uri: string,
    watermark: string,
    x: number,
    y: number,
  ): Promise<void> {
    const entry = this.#entry(scheme, uri);
    const placed = watermark === ""
      ? undefined
      : await this.#watermarks.place(watermark, x, y, "watermark");
    entry.transcoder.setWatermark(placed);
    entry.encoder.watermark = watermark === "" ? undefined : watermark;
  }

  /** Ends every transcoder (server stop). */
  async closeAll(): Promise<void> {
    await Promise.all([...this.#entries.values()].map((e) => e.transcoder.stop("server stop")));
  }

  #entry(scheme: TranscoderScheme, uri: string): Entry {
    const entry = this.#entries.get(uri);
    if (!entry || entry.scheme !== scheme) throw new NotFoundError(`transcoder ${uri} not found`);
    return entry;
  }

  #checkFree(uri: string, localStreamName: string): void {
    if (this.#entries.has(uri)) throw new ConflictError(`transcoder ${uri} exists`);
    const taken = [...this.#entries.values()].some((e) => e.localStreamName === localStreamName);
    if (taken || this.#streams.published(localStreamName)) {
      throw new ConflictError(`stream ${localStreamName} is already published`);
    }
  }
}

/** The rendition profile of a request; a bad value is a 400 naming its field. */
function profileOf(scheme: TranscoderScheme, encoder: EncoderRequest): RenditionProfile {
  const { width = 0, height = 0, fps = 0, keyFrameInterval = 0 } = encoder;
  for (const [side, value] of [["width", width], ["height", height]] as const) {
    if (value % 2 !== 0) throw new BadRequestError(`encoder.${side}`, `${value} is odd`);
    if (value > maxOutputSide) {
      throw new BadRequestError(`encoder.${side}`, `${value} is over ${maxOutputSide}`);
    }
  }
  if (fps > maxFps) throw new BadRequestError("encoder.fps", `${fps} is over ${maxFps}`);
  if (keyFrameInterval > maxKeyFrameInterval) {
    throw new BadRequestError(
      "encoder.keyFrameInterval",
      `${keyFrameInterval} is over ${maxKeyFrameInterval}`,
    );
  }
  const profile: RenditionProfile = {
    width,
    height,
    fps,
    keyFrameInterval,
    videoCodec: "H264",
    bitrateKbps: 0,
  };
  if (scheme === "transcoder") return profile;
  if (encoder.videoCodec !== undefined && encoder.videoCodec !== "") {
    const codec = videoCodecs[encoder.videoCodec.toLowerCase()];
    if (!codec) throw unsupported("encoder.videoCodec", encoder.videoCodec, videoCodecs);
    profile.videoCodec = codec;
  }
  profile.bitrateKbps = kbps(encoder.bitrate ?? 0, minVideoBps);
  const audioRate = encoder.audioRate ?? 0;
  if (audioRate > maxAudioRate) {
    throw new BadRequestError("encoder.audioRate", `${audioRate} is over ${maxAudioRate}`);
  }
  if (encoder.audioCodec !== undefined && encoder.audioCodec !== "") {
    const codec = audioCodecs[encoder.audioCodec.toLowerCase()];
    if (!codec) throw unsupported("encoder.audioCodec", encoder.audioCodec, audioCodecs);
    profile.audio = {
      codec,
      sampleRate: audioRate,
      bitrateKbps: kbps(encoder.audioBitrate ?? 0, minAudioBps),
    };
  }
  return profile;
}

/** A request's bitrate in kbit/s: `value` in kbit/s, or in bit/s when at least `minBps`. */
function kbps(value: number, minBps: number): number {
  return value >= minBps ? Math.round(value / 1000) : value;
}

function unsupported(field: string, value: string, known: Record<string, string>): BadRequestError {
  return new BadRequestError(
    field,
    `${JSON.stringify(value)} is not supported; supported: ${Object.values(known).join(", ")}`,
  );
}
