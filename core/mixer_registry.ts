/**
 * The mixers of the `/mixer` group, by uri (`mixer://<name>`), and auto-mixing: with
 * `mixer.autoMixing` on, a stream published as `<login>#<room>` joins the mixer `<room>`,
 * which is made on the first join and ended when its last input leaves.
 */
import type { Config } from "../config.ts";
import type { CodecEngine } from "../media/engine/engine.ts";
import type { YuvColor } from "../media/mixer/i420.ts";
import { Mixer, type MixerSettings } from "../media/mixer/mixer.ts";
import type { RawVideoFrame } from "../media/mixer/video_composer.ts";
import { rgbaToI420Reference } from "../media/mixer/video_reference.ts";
import { Stream } from "../media/stream.ts";
import type { DecoderHub } from "../media/transcoder/decoded_source.ts";
import {
  BadRequestError,
  ConflictError,
  NotFoundError,
  ServiceUnavailableError,
} from "./errors.ts";
import type { Cap } from "./limits.ts";
import type { Logger } from "./log.ts";
import { MixerLayouts } from "./mixer_layouts.ts";
import { MixerLoad } from "./mixer_load.ts";
import type { MixerRecord } from "./records.ts";
import type { StreamRegistry } from "./stream_registry.ts";
import type { WatermarkCache } from "./watermark_cache.ts";

/** Scheme of mixer uris. */
const mixerScheme = "mixer://";
/** Audio of every mixer: Opus at 48 kHz stereo. */
const mixerSampleRate = 48_000;
const mixerChannels = 2;

/** A startup request. */
export interface MixerStartup {
  uri: string;
  localStreamName?: string;
  hasVideo?: boolean;
  hasAudio?: boolean;
  watermark?: string;
  background?: string;
  mixerLayoutClass?: string;
  /** Folder of custom layouts, relative to the media folder. */
  mixerLayoutDir?: string;
}

/** How an input is added or changed. */
export interface MixerInputRequest {
  audioLevel?: number;
  videoMuted?: boolean;
}

interface Entry {
  uri: string;
  mixer: Mixer;
  layouts: MixerLayouts;
  /** Made by auto-mixing: ends when its last input leaves. */
  auto: boolean;
}

/** The mixers of a server. */
export class MixerRegistry {
  /** The load test of `/mixer/test/*`. */
  readonly load: MixerLoad;
  #entries = new Map<string, Entry>();
  #config: Config;
  #streams: StreamRegistry;
  #hub: DecoderHub;
  #engine: CodecEngine;
  #watermarks: WatermarkCache;
  #log: Logger;
  #cap: Cap;
  #unwatch: (() => void) | undefined;
  /** Auto-mixing joins in progress by room, so two publishers of a room make one mixer. */
  #joining = new Map<string, Promise<unknown>>();

  /** @param cap the `mixers` cap; a mixer holds a slot from startup to its end. */
  constructor(
    config: Config,
    streams: StreamRegistry,
    hub: DecoderHub,
    engine: CodecEngine,
    watermarks: WatermarkCache,
    log: Logger,
    cap: Cap,
  ) {
    this.#config = config;
    this.#streams = streams;
    this.#hub = hub;
    this.#engine = engine;
    this.#watermarks = watermarks;
    this.#log = log.child({ component: "mixer" });
    this.#cap = cap;
    this.load = new MixerLoad(this, streams, log);
    if (config.mixer.autoMixing) {
      this.#unwatch = streams.watch((event, stream) => {
        if (event === "published" && stream instanceof Stream) this.#autoJoin(stream);
      });
    }
  }

  /**
   * Starts a mixer; its output stream (`localStreamName`, default the mixer's name) runs at
   * once. A uri or output name in use is a 409, a bad layout or background a 400, a missing
   * watermark or background file a 404, the `mixers` cap a 503.
   */
  async startup(request: MixerStartup, auto = false): Promise<Mixer> {
    const { uri } = request;
    const name = uri.slice(mixerScheme.length);
    if (name === "") throw new BadRequestError("uri", "names no mixer after mixer://");
    const localStreamName = request.localStreamName || name;
    const hasAudio = request.hasAudio ?? true;
    if (hasAudio && !this.#engine.start) {
      throw new BadRequestError(
        "hasAudio",
        `the ${this.#engine.kind} engine cannot mix audio live: start with hasAudio false, or use the native engine`,
      );
    }
    this.#checkFree(uri, localStreamName);
    const watermark = request.watermark
      ? await this.#watermarks.place(request.watermark, 0, 0, "watermark")
      : undefined;
    const background = request.background ? await this.#background(request.background) : {};
    this.#checkFree(uri, localStreamName);
    if (!this.#cap.tryAcquire()) throw new ServiceUnavailableError(this.#cap.refusal());
    let layouts: MixerLayouts;
    let mixer: Mixer | undefined;
    try {
      layouts = await MixerLayouts.open({
        requested: request.mixerLayoutClass,
        fallback: this.#config.mixer.layout,
        mediaFolder: this.#config.folders.media,
        // A change while the mixer starts is in `layouts.layout`, which it starts with.
        onChange: (layout) => mixer?.setLayout(layout),
        log: this.#log.child({ uri }),
      }, request.mixerLayoutDir);
    } catch (err) {
      this.#cap.release();
      throw err;
    }
    try {
      mixer = await Mixer.create({
        name: localStreamName,
        mediaSessionId: crypto.randomUUID(),
        settings: this.#settings(),
        hasVideo: request.hasVideo ?? true,
        hasAudio,
        layout: layouts.layout,
        ...background,
        watermark,
        mcuAudio: this.#config.mixer.mcuAudio,
        streams: this.#streams,
        hub: this.#hub,
        engine: this.#engine,
        log: this.#log.child({ uri, stream: localStreamName }),
        onEnded: () => {
          if (this.#entries.get(uri)?.mixer === mixer) this.#entries.delete(uri);
          void layouts.close();
          this.#cap.release();
        },
        onInputLeft: (remaining) => {
          if (auto && remaining === 0) void mixer?.stop("the last input left");
        },
      });
    } catch (err) {
      await layouts.close();
      this.#cap.release();
      throw err;
    }
    this.#entries.set(uri, { uri, mixer, layouts, auto });
    this.#log.info("mixer started", { uri, localStreamName, auto });
    return mixer;
  }

  /**
   * Adds the published stream `remoteStreamName` to the mixer of `uri`: 404 for a missing
   * mixer or stream, 409 for a stream already in it.
   */
  add(uri: string, remoteStreamName: string, request: MixerInputRequest): void {
    const { mixer } = this.#entry(uri);
    if (mixer.has(remoteStreamName)) {
      throw new ConflictError(`stream ${remoteStreamName} is already in mixer ${uri}`);
    }
    const source = this.#streams.published(remoteStreamName);
    if (!(source instanceof Stream) || source.ended) {
      throw new NotFoundError(`stream ${remoteStreamName} not found`);
    }
    mixer.add(source, {
      audioLevel: request.audioLevel ?? 100,
      videoMuted: request.videoMuted ?? false,
    });
  }

  /** Removes `remoteStreamName` from the mixer of `uri` (404 when either is missing). */
  async remove(uri: string, remoteStreamName: string): Promise<void> {
    await this.#entry(uri).mixer.remove(remoteStreamName);
  }

  /**
   * Sets the level and mute of every input whose name matches `streams` (a regular
   * expression, whole name); no input matching is a 404.
   */
  setAudioVideo(uri: string, streams: string, request: MixerInputRequest): void {
    const { mixer } = this.#entry(uri);
    let pattern: RegExp;
    try {
      pattern = new RegExp(`^(?:${streams})$`);
    } catch (err) {
      throw new BadRequestError("streams", (err as Error).message);
    }
    const matching = mixer.inputs().filter((input) => pattern.test(input.name));
    if (matching.length === 0) {
      throw new NotFoundError(`input matching ${streams} not found in mixer ${uri}`);
    }
    for (const input of matching) mixer.set(input.name, request);
  }

  /** Draws the PNG `watermark` of the media folder at (x, y); an empty name removes it. */
  async setBodyWatermark(uri: string, watermark: string, x: number, y: number): Promise<void> {
    const { mixer } = this.#entry(uri);
    const placed = watermark === ""
      ? undefined
      : await this.#watermarks.place(watermark, x, y, "watermark");
    mixer.setWatermark(placed);
  }

  /**
   * Draws the PNG `watermark` at (x, y) of the tile of the input whose mediaSessionId is
   * `mediaSessionId`; an empty name removes it. 404 for a missing mixer, input or file.
   */
  async setStreamWatermark(
    uri: string,
    mediaSessionId: string,
    watermark: string,
    x: number,
    y: number,
  ): Promise<void> {
    const { mixer } = this.#entry(uri);
    const input = mixer.inputs().find((i) => i.mediaSessionId === mediaSessionId);
    if (!input) throw new NotFoundError(`input ${mediaSessionId} not found in mixer ${uri}`);
    const placed = watermark === ""
      ? undefined
      : await this.#watermarks.place(watermark, x, y, "watermark");
    mixer.setInputWatermark(input.name, placed);
  }

  /**
   * Takes the custom layouts of `mixerLayoutDir` for the mixer of `uri`: its layout is
   * looked up there again. A layout that does not load is a 400 and the mixer keeps its own.
   */
  async setLayoutDir(uri: string, mixerLayoutDir: string): Promise<void> {
    await this.#entry(uri).layouts.setDir(mixerLayoutDir);
  }

  /** The records of every mixer. */
  list(): MixerRecord[] {
    return [...this.#entries.values()].map(({ uri, mixer }) => ({
      localMediaSessionId: mixer.output.mediaSessionId,
      localStreamName: mixer.output.name,
      uri,
      status: mixer.ended ? "FAILED" : "PROCESSED_LOCAL",
      hasAudio: mixer.output.tracks.some((t) => t.kind === "audio"),
      hasVideo: mixer.output.tracks.some((t) => t.kind === "video"),
      record: mixer.output.recording !== undefined,
      mediaSessions: mixer.inputs().map((input) => ({
        localMediaSessionId: input.mediaSessionId,
        audioLevel: input.audioLevel,
        videoMuted: input.videoMuted,
        localStreamName: input.name,
      })),
    }));
  }

  /** The mixer of `uri` (404 when missing). */
  get(uri: string): Mixer {
    return this.#entry(uri).mixer;
  }

  /** Ends the mixer of `uri` and its output stream. */
  async terminate(uri: string): Promise<void> {
    await this.#entry(uri).mixer.stop("Stopped by rest terminate");
  }

  /** Ends every mixer and stops auto-mixing (server stop). */
  async closeAll(): Promise<void> {
    this.#unwatch?.();
    await this.load.stop();
    await Promise.allSettled(this.#joining.values());
    await Promise.all([...this.#entries.values()].map((e) => e.mixer.stop("server stop")));
  }

  /** Auto-mixing: `<login>#<room>` (not a mixer's own output) joins the mixer `<room>`. */
  #autoJoin(stream: Stream): void {
    const parts = stream.name.split("#");
    if (parts.length < 2 || parts[0] === "" || parts[1] === "") return;
    if ([...this.#entries.values()].some((e) => e.mixer.output === stream)) return;
    const room = parts[1];
    const uri = `${mixerScheme}${room}`;
    const previous = this.#joining.get(room) ?? Promise.resolve();
    const join = previous.then(async () => {
      if (stream.ended) return;
      let entry = this.#entries.get(uri);
      if (!entry) {
        // Video only where the engine cannot mix audio live (ffmpeg.wasm).
        const hasAudio = this.#engine.start !== undefined;
        await this.startup({ uri, localStreamName: room, hasAudio }, true);
        entry = this.#entries.get(uri)!;
      }
      if (!entry.mixer.has(stream.name)) {
        entry.mixer.add(stream, { audioLevel: 100, videoMuted: false });
      }
    }).catch((err) => this.#log.warn("auto-mixing failed", { stream: stream.name, err }));
    this.#joining.set(room, join);
    void join.finally(() => {
      if (this.#joining.get(room) === join) this.#joining.delete(room);
    });
  }

  #entry(uri: string): Entry {
    const entry = this.#entries.get(uri);
    if (!entry) throw new NotFoundError(`mixer ${uri} not found`);
    return entry;
  }

  #checkFree(uri: string, localStreamName: string): void {
    if (this.#entries.has(uri)) throw new ConflictError(`mixer ${uri} exists`);
    const taken = [...this.#entries.values()].some((e) => e.mixer.output.name === localStreamName);
    if (taken || this.#streams.published(localStreamName)) {
      throw new ConflictError(`stream ${localStreamName} is already published`);
    }
  }

  #settings(): MixerSettings {
    const { width, height, fps, keyFrameIntervalSec, videoBitrateKbps, audioBitrateKbps } =
      this.#config.mixer;
    return {
      width,
      height,
      fps,
      keyFrameInterval: fps * keyFrameIntervalSec,
      videoBitrateKbps,
      sampleRate: mixerSampleRate,
      channels: mixerChannels,
      audioBitrateKbps,
    };
  }

  /** A `#rrggbb` colour, or a PNG of the media folder shown under the inputs. */
  async #background(
    value: string,
  ): Promise<{ background?: YuvColor; backgroundImage?: RawVideoFrame }> {
    const hex = /^#([0-9a-fA-F]{6})$/.exec(value);
    if (hex) {
      const rgb = [0, 2, 4].map((i) => parseInt(hex[1].slice(i, i + 2), 16));
      const rgba = new Uint8Array(16);
      for (let i = 0; i < 4; i++) rgba.set([...rgb, 255], i * 4);
      const yuv = new Uint8Array(6);
      rgbaToI420Reference(rgba, 2, 2, yuv, 601);
      return { background: { y: yuv[0], u: yuv[4], v: yuv[5] } };
    }
    const { image } = await this.#watermarks.place(value, 0, 0, "background");
    const width = image.width & ~1;
    const height = image.height & ~1;
    if (width < 2 || height < 2) {
      throw new BadRequestError("background", `${value} is smaller than 2x2 pixels`);
    }
    const rgba = new Uint8Array(width * height * 4);
    for (let row = 0; row < height; row++) {
      const from = row * image.width * 4;
      rgba.set(image.rgba.subarray(from, from + width * 4), row * width * 4);
    }
    const data = new Uint8Array(width * height * 3 / 2);
    // Once per mixer: the reference conversion is fast enough for one picture.
    rgbaToI420Reference(rgba, width, height, data, 601);
    return { backgroundImage: { width, height, data, pts: 0 } };
  }
}
