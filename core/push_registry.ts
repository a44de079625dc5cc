/**
 * RTMP pushes by mediaSessionId: `/push/startup` publishes a local stream to a remote RTMP
 * server; the entry goes away on terminate, when the stream ends, or on server stop.
 */
import type { CodecEngine } from "../media/engine/engine.ts";
import { aacStreamFor } from "../media/publishers/rtmp_aac_stream.ts";
import { RtmpPush } from "../media/publishers/rtmp_push.ts";
import { openSoundMix } from "../media/publishers/rtmp_sound_mix.ts";
import { parseRtmpUrl } from "../media/protocols/rtmp/url.ts";
import { Stream } from "../media/stream.ts";
import { NotFoundError, ServiceUnavailableError } from "./errors.ts";
import type { Cap } from "./limits.ts";
import { descriptors } from "./fd_guard.ts";
import type { Config } from "../config.ts";
import type { Logger } from "./log.ts";
import { OutboundPolicy } from "./outbound.ts";
import { redactUri } from "./redact.ts";
import { existingFileInside } from "./paths.ts";
import type { PushRecord } from "./records.ts";
import type { StreamRegistry } from "./stream_registry.ts";

interface PushEntry {
  record: PushRecord;
  push: RtmpPush;
}

/** The RTMP pushes of a server. */
export class PushRegistry {
  #entries = new Map<string, PushEntry>();
  #streams: StreamRegistry;
  #mediaFolder: string;
  #log: Logger;
  #outbound: OutboundPolicy;
  #cap: Cap;

  /** @param cap the `pushes` cap; a push holds a slot from start to end. */
  constructor(config: Config, streams: StreamRegistry, log: Logger, cap: Cap) {
    this.#cap = cap;
    this.#mediaFolder = config.folders.media;
    this.#streams = streams;
    this.#log = log.child({ component: "rtmp-push" });
    this.#outbound = new OutboundPolicy(config.outbound.allowedHosts);
  }

  /**
   * Publishes the stream `streamName` to `rtmpUrl` (to `rtmpUrl/streamName` unless
   * `fullUrl`), Opus audio converted to AAC by `engine`. Resolves once the remote accepted
   * the publish. A host outside `outbound.allowedHosts` is a 403, a push beyond the cap a
   * 503; the record's rtmpUrl shows no secret.
   */
  async startup(
    streamName: string,
    rtmpUrl: string,
    fullUrl: boolean,
    engine: CodecEngine,
  ): Promise<PushRecord> {
    const address = fullUrl ? rtmpUrl : `${rtmpUrl.replace(/\/+$/, "")}/${streamName}`;
    const url = parseRtmpUrl(address, "rtmpUrl");
    this.#outbound.check(url.hostname, "rtmpUrl");
    const stream = this.#streams.published(streamName);
    if (!(stream instanceof Stream) || stream.ended) {
      throw new NotFoundError(`stream ${streamName} not found`);
    }
    const push = new RtmpPush({
      stream,
      url,
      log: this.#log,
      sendable: (s) => aacStreamFor(s, engine, this.#log),
    });
    if (!descriptors.admit()) throw new ServiceUnavailableError(descriptors.refusal());
    if (!this.#cap.tryAcquire()) throw new ServiceUnavailableError(this.#cap.refusal());
    let ended: Promise<void>;
    try {
      ({ ended } = await push.start());
    } catch (err) {
      this.#cap.release();
      throw err;
    }
    const record = {
      mediaSessionId: crypto.randomUUID(),
      streamName,
      rtmpUrl: redactUri(address),
    };
    this.#entries.set(record.mediaSessionId, { record, push });
    this.#log.info("push started", { stream: streamName, url: address });
    ended.then(() => {
      this.#cap.release();
      this.#entries.delete(record.mediaSessionId);
      this.#log.info("push ended", { stream: streamName, url: address });
    });
    return record;
  }

  /** The push of `mediaSessionId`, or NotFoundError. */
  get(mediaSessionId: string): RtmpPush {
    const entry = this.#entries.get(mediaSessionId);
    if (!entry) throw new NotFoundError(`push ${mediaSessionId} not found`);
    return entry.push;
  }

  /**
   * Mixes `soundFile` of the media folder into the push's audio (again and again when
   * `loop`), until sound_off; a sound already on is replaced.
   */
  async soundOn(
    mediaSessionId: string,
    soundFile: string,
    loop: boolean,
    engine: CodecEngine,
  ): Promise<void> {
    const push = this.get(mediaSessionId);
    const soundPath = await existingFileInside(this.#mediaFolder, soundFile, "soundFile");
    const mix = await openSoundMix({
      source: aacStreamFor(push.stream, engine, this.#log),
      soundPath,
      loop,
      engine,
      log: this.#log,
      operation: "/push/sound_on",
    });
    await push.soundOn(mix);
  }

  /** Stops mixing a sound into the push's audio. */
  async soundOff(mediaSessionId: string): Promise<void> {
    await this.get(mediaSessionId).soundOff();
  }

  /** Stops a push. */
  async terminate(mediaSessionId: string): Promise<void> {
    const push = this.get(mediaSessionId);
    this.#entries.delete(mediaSessionId);
    await push.stop();
  }

  /** The Push records. */
  list(): PushRecord[] {
    return [...this.#entries.values()].map((e) => e.record);
  }

  /** Stops every push (server stop). */
  async closeAll(): Promise<void> {
    const entries = [...this.#entries.values()];
    this.#entries.clear();
    await Promise.all(entries.map((e) => e.push.stop()));
  }
}
