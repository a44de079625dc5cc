/**
 * HLS outputs by stream name: started by `/hls/startup` or by a viewer asking for a playlist
 * of a published stream, stopped by `/hls/terminate`, after `hls.idleTimeoutSec` without a
 * viewer request (viewer-started ones), or `hls.endedKeepSec` after their stream ended
 * unless a publisher of the name came back meanwhile (the output then continues).
 *
 * Variants: `source`, the stream as it is when its video fits HLS (H.264, or H.265 in fMP4;
 * audio not AAC is converted to AAC once per stream), or a shared H.264 rendition at the
 * source's size for other video (VP8); then one shared H.264 rendition per configured profile;
 * then, when variants name audio groups, one audio rendition (AAC) per configured
 * `hls.audioRenditions` entry of those groups, shared by every viewer, and those variants
 * carry their video only.
 */
import type { z } from "zod";
import type { Config } from "../config.ts";
import { type AudioTarget, convertedAudio } from "../media/engine/audio_conversion.ts";
import type { CodecEngine } from "../media/engine/engine.ts";
import { Stream } from "../media/stream.ts";
import type { PlayRenditions, PlayRequest } from "../media/transcoder/play_renditions.ts";
import { HlsOutput, type HlsVariantPlan } from "../media/publishers/hls/hls_output.ts";
import type { HlsOutputs } from "../media/publishers/hls/hls_http.ts";
import type { HlsViewerRecord } from "../media/publishers/hls/hls_viewers.ts";
import { createHlsSegmenter } from "../media/publishers/hls/segmenter.ts";
import { BadRequestError, ConflictError, NotFoundError } from "./errors.ts";
import type { Logger } from "./log.ts";
import type { hlsProfileDetails, HlsRecord } from "./records.ts";
import type { StreamRegistry } from "./stream_registry.ts";

/** Period of the look at idle, ended and republished outputs, in ms. */
const tickMs = 250;
/** Page length of `/hls/find_all` when the request gives none. */
const defaultPageSize = 100;

/** Details of one variant (`/hls/profiles`). */
export type HlsProfileDetails = z.infer<typeof hlsProfileDetails>;

/** The HLS outputs of a server. */
export class HlsRegistry implements HlsOutputs {
  #outputs = new Map<string, HlsOutput>();
  #config: Config;
  #streams: StreamRegistry;
  #renditions: PlayRenditions;
  #engine: CodecEngine;
  #log: Logger;
  #timer: ReturnType<typeof setInterval> | undefined;
  #closed = false;

  constructor(
    config: Config,
    streams: StreamRegistry,
    renditions: PlayRenditions,
    engine: CodecEngine,
    log: Logger,
  ) {
    this.#config = config;
    this.#streams = streams;
    this.#renditions = renditions;
    this.#engine = engine;
    this.#log = log.child({ component: "hls" });
  }

  /**
   * Starts the output of the published stream `name` (kept until terminated or its stream
   * ends); an output of the name running already is a 409.
   */
  startup(name: string): void {
    checkName(name);
    const existing = this.#outputs.get(name);
    if (existing && existing.endedAtMs === undefined) {
      throw new ConflictError(`HLS output of stream ${name} exists`);
    }
    const source = this.#source(name);
    if (!source) throw new NotFoundError(`stream ${name} not found`);
    if (existing) {
      existing.persistent = true;
      this.#resume(existing, source);
      return;
    }
    this.#start(name, source, true);
  }

  /**
   * The output of `name` for a viewer's request: the running (or recently ended) one, else,
   * when `start` and the stream is published, a new one that stops when viewers stop asking.
   */
  find(name: string, start: boolean): HlsOutput | undefined {
    const output = this.#outputs.get(name);
    if (output || !start || this.#closed) return output;
    if (name.includes("/") || name.includes("\\")) return undefined;
    const source = this.#source(name);
    return source ? this.#start(name, source, false) : undefined;
  }

  /**
   * Opens `name` for a viewer presenting `key` through the streams' gate (the CDN: access
   * checked, a stream of another node pulled here).
   */
  open(name: string, key: string | undefined): Promise<unknown> {
    return this.#streams.open(name, key);
  }

  /** Stops the output of `name` (404 when there is none). */
  terminate(name: string): void {
    const output = this.#outputs.get(name);
    if (!output) throw new NotFoundError(`HLS output of stream ${name} not found`);
    this.#remove(output, "terminated");
  }

  /** A page of the HLS records, in start order. */
  list(offset = 0, size = defaultPageSize): HlsRecord[] {
    return [...this.#outputs.values()].slice(offset, offset + size).map((output) => ({
      id: output.id,
      streamName: output.name,
      status: "ACTIVE",
      waitingSize: output.waiting,
      profiles: output.variants.map((v) => v.name),
      subscribers: output.viewers.active(),
      playlist: output.masterPlaylist(),
      createdDate: output.createdDate,
      logs: [],
    }));
  }

  /** Details of the variant `profileName` of the output `hlsId`. */
  profiles(hlsId: string, profileName: string): HlsProfileDetails {
    const output = this.#byId(hlsId);
    const variant = output.variant(profileName);
    if (!variant) {
      throw new NotFoundError(`profile ${profileName} of HLS output ${hlsId} not found`);
    }
    const record = variant.stream.record();
    const info = variant.segmenter.variant;
    const metrics = variant.segmenter.metrics;
    const video = variant.stream.videoTrack;
    const audioOnly = variant.media === "audio";
    return {
      name: variant.name,
      stream: {
        ...record,
        name: variant.profile || audioOnly ? `${output.name}-${variant.name}` : output.name,
        mediaProvider: "HLS",
      },
      keyFrameReceived: metrics.keyFrameReceived,
      // An audio rendition is described in the same shape: type audio, no picture.
      videoProfile: audioOnly
        ? {
          type: "audio",
          width: 0,
          height: 0,
          fps: 0,
          bitrate: variant.audioBitrateKbps ??
            Math.round((info?.averageBandwidth ?? 0) / 1000),
          codec: variant.stream.tracks.find((t) => t.kind === "audio")?.codec ?? "",
          quality: 0,
          audioGroupId: variant.audioGroup ?? "",
        }
        : {
          type: "video",
          width: info?.width ?? video?.width ?? 0,
          height: info?.height ?? video?.height ?? 0,
          fps: variant.profile?.fps || Math.round(info?.frameRate ?? record.fps),
          bitrate: variant.profile?.bitrateKbps ??
            Math.round((info?.averageBandwidth ?? record.bitrate * 1000) / 1000),
          codec: video?.codec ?? "",
          quality: 0,
          audioGroupId: variant.audioGroup ?? "",
        },
      metrics: {
        minFPS: metrics.minFPS,
        avgFPS: metrics.avgFPS,
        maxFPS: metrics.maxFPS,
        countGaps: metrics.countGaps,
        resolutionChanges: metrics.resolutionChanges,
        queueSize: metrics.queueSize,
        startPts: Math.round(metrics.startPts),
        currentPts: Math.round(metrics.currentPts),
      },
      subscribers: output.viewers.active(variant.name),
    };
  }

  /** The viewers of the output `hlsId`. */
  subscribers(hlsId: string): HlsViewerRecord[] {
    return this.#byId(hlsId).viewers.records();
  }

  /** Stops every output and refuses new ones (server stop). */
  closeAll(): void {
    this.#closed = true;
    for (const output of [...this.#outputs.values()]) this.#remove(output, "server stop");
  }

  #byId(hlsId: string): HlsOutput {
    for (const output of this.#outputs.values()) if (output.id === hlsId) return output;
    throw new NotFoundError(`HLS output ${hlsId} not found`);
  }

  #source(name: string): Stream | undefined {
    const stream = this.#streams.published(name);
    return stream instanceof Stream && !stream.ended ? stream : undefined;
  }

  #start(name: string, source: Stream, persistent: boolean): HlsOutput {
    const plans = this.#plans(source);
    const output = new HlsOutput(name, source, plans, persistent, {
      targetDurationSec: this.#config.hls.segmentDurationSec,
      partDurationMs: this.#config.hls.lowLatency ? this.#config.hls.partDurationMs : 0,
      windowSegments: this.#config.hls.windowSegments,
      createSegmenter: createHlsSegmenter,
      log: this.#log.child({ stream: name }),
    });
    this.#outputs.set(name, output);
    this.#timer ??= setInterval(() => this.#tick(), tickMs);
    this.#log.info("hls output started", {
      stream: name,
      by: persistent ? "rest" : "viewer",
      variants: plans.map((p) => p.name),
    });
    return output;
  }

  #resume(output: HlsOutput, source: Stream): void {
    output.resume(source, this.#plans(source));
    this.#log.info("hls output continues with a new publisher", { stream: output.name });
  }

  /**
   * The variants of `source`: its own (or a rendition of its size), then the profiles, then
   * the audio renditions of the groups they name (when the source has video and audio).
   */
  #plans(source: Stream): HlsVariantPlan[] {
    const { container, profiles, audioRenditions, sourceAudioGroup } = this.#config.hls;
    const video = source.videoTrack;
    const audio = source.tracks.find((t) => t.kind === "audio");
    const plans: HlsVariantPlan[] = [];
    // Audio served apart needs both; otherwise every variant stays muxed.
    const split = video !== undefined && audio !== undefined;
    const groupOf = (group: string | undefined) =>
      split && group !== undefined ? { media: "video" as const, audioGroup: group } : {};
    // A video-only variant's rendition keeps the source's audio (dropped) rather than encode it.
    const keptAudio = (group: string | undefined): AudioTarget =>
      groupOf(group).media && audio && passableAudio.has(audio.codec)
        ? audio.codec as AudioTarget
        : "AAC";
    const renditionOf = (request: PlayRequest, group?: string) =>
      this.#renditions.get(source, request, "H264", keptAudio(group));
    // A rendition refused (the transcoders cap) is a 503; ones made before stop unread.
    // Apple plays H.265 from fMP4 only.
    const videoContainer = video?.codec === "H265" ? "fmp4" : container;
    if (!video || video.codec === "H264" || video.codec === "H265") {
      const stream = audio && audio.codec !== "AAC" && !groupOf(sourceAudioGroup).media
        ? convertedAudio(source, "AAC", this.#engine, this.#log)
        : source;
      plans.push({
        name: "source",
        stream,
        container: videoContainer,
        ...groupOf(sourceAudioGroup),
      });
    } else {
      plans.push({
        name: "source",
        stream: renditionOf({ width: 0, height: 0, maxBitrateKbps: 0 }, sourceAudioGroup),
        container,
        ...groupOf(sourceAudioGroup),
      });
    }
    if (video) {
      for (const profile of profiles) {
        plans.push({
          name: profile.name,
          stream: renditionOf({
            width: profile.width,
            height: profile.height,
            fps: profile.fps,
            maxBitrateKbps: profile.bitrateKbps,
          }, profile.audioGroup),
          container,
          profile,
          ...groupOf(profile.audioGroup),
        });
      }
    }
    const groups = new Set(plans.map((p) => p.audioGroup));
    for (const rendition of audioRenditions) {
      if (!audio || !groups.has(rendition.group)) continue;
      // Each audio rendition is one AAC encode of the source (shared with every reader of
      // the same bitrate), or the source's AAC as it is when no bitrate is asked.
      const stream = rendition.bitrateKbps !== undefined
        ? convertedAudio(source, "AAC", this.#engine, this.#log, rendition.bitrateKbps * 1000)
        : audio.codec === "AAC"
        ? source
        : convertedAudio(source, "AAC", this.#engine, this.#log);
      plans.push({
        name: rendition.name,
        stream,
        container: videoContainer,
        media: "audio",
        audioGroup: rendition.group,
        audioBitrateKbps: rendition.bitrateKbps,
      });
    }
    return plans;
  }

  #remove(output: HlsOutput, reason: string): void {
    if (this.#outputs.get(output.name) === output) this.#outputs.delete(output.name);
    output.close();
    this.#log.info("hls output stopped", { stream: output.name, reason });
    if (this.#outputs.size === 0 && this.#timer !== undefined) {
      clearInterval(this.#timer);
      this.#timer = undefined;
    }
  }

  #tick(): void {
    const now = Date.now();
    const { idleTimeoutSec, endedKeepSec } = this.#config.hls;
    for (const output of [...this.#outputs.values()]) {
      const endedAt = output.endedAtMs;
      if (endedAt !== undefined) {
        const source = this.#source(output.name);
        if (source && source !== output.source) {
          try {
            this.#resume(output, source);
          } catch (err) {
            this.#log.warn("hls output cannot continue with the new publisher", { err });
            this.#remove(output, "new publisher refused");
          }
        } else if (now - endedAt >= endedKeepSec * 1000) this.#remove(output, "stream ended");
        continue;
      }
      const lastRequest = output.viewers.lastRequestMs ?? output.createdDate;
      // A request waiting for the first segment is a viewer too, not counted until answered.
      if (
        !output.persistent && output.waiting === 0 && now - lastRequest >= idleTimeoutSec * 1000
      ) {
        this.#remove(output, "no viewer");
      }
    }
  }
}

/** Audio codecs a rendition can carry through unchanged (its audio is not encoded again). */
const passableAudio = new Set<string>(["OPUS", "AAC", "PCMU", "PCMA", "G722"]);

/** A stream name that would break out of its URL path is a 400. */
function checkName(name: string): void {
  if (name.includes("/") || name.includes("\\") || name.includes("..")) {
    throw new BadRequestError("name", "must not contain path characters (/, \\, ..)");
  }
}
