/**
 * RTMP pulls by URI: `/pull/rtmp/pull` plays a remote RTMP stream into a local stream; the
 * entry goes away on terminate, when the remote stops, or on server stop.
 */
import { RtmpPull } from "../media/providers/rtmp_pull.ts";
import { parseRtmpUrl } from "../media/protocols/rtmp/url.ts";
import type { Config } from "../config.ts";
import { ConflictError, NotFoundError, ServiceUnavailableError } from "./errors.ts";
import type { Cap } from "./limits.ts";
import { descriptors } from "./fd_guard.ts";
import type { Logger } from "./log.ts";
import { OutboundPolicy } from "./outbound.ts";
import { redactUri } from "./redact.ts";
import type { RtmpPullRecord } from "./records.ts";
import type { StreamRegistry } from "./stream_registry.ts";

/** Status of a running pull in its record, as WCS names it. */
const pullStatus = "PROCESSED_REMOTE";

/** The RTMP pulls of a server. */
export class RtmpPullRegistry {
  #entries = new Map<string, RtmpPull>();
  /** URIs whose pull is connecting: a duplicate is refused before it connects too. */
  #starting = new Set<string>();
  #streams: StreamRegistry;
  #log: Logger;
  #outbound: OutboundPolicy;
  #cap: Cap;

  /** @param cap the `pulls` cap, shared with RTSP pulls; a pull holds a slot from start to end. */
  constructor(config: Config, streams: StreamRegistry, log: Logger, cap: Cap) {
    this.#cap = cap;
    this.#streams = streams;
    this.#log = log.child({ component: "rtmp-pull" });
    this.#outbound = new OutboundPolicy(config.outbound.allowedHosts);
  }

  /**
   * Plays `uri` into the local stream `localStreamName` (default: the remote stream name,
   * without its query); a host outside `outbound.allowedHosts` is a 403, a pull or stream
   * beyond its cap a 503.
   */
  async pull(uri: string, localStreamName?: string): Promise<void> {
    const url = parseRtmpUrl(uri, "uri");
    this.#outbound.check(url.hostname, "uri");
    const name = localStreamName || url.streamName.split("?")[0];
    if (this.#entries.has(uri) || this.#starting.has(uri)) {
      throw new ConflictError(`${redactUri(uri)} is already pulled`);
    }
    if (this.#streams.published(name)) {
      throw new ConflictError(`stream ${name} is already published`);
    }
    if (!descriptors.admit()) throw new ServiceUnavailableError(descriptors.refusal());
    if (!this.#cap.tryAcquire()) throw new ServiceUnavailableError(this.#cap.refusal());
    this.#starting.add(uri);
    let pull: RtmpPull;
    try {
      pull = await RtmpPull.open({ url, name, log: this.#log });
    } catch (err) {
      this.#cap.release();
      throw err;
    } finally {
      this.#starting.delete(uri);
    }
    try {
      this.#streams.add(pull.stream);
    } catch (err) {
      this.#cap.release();
      await pull.stop();
      throw err;
    }
    this.#entries.set(uri, pull);
    this.#log.info("rtmp pull started", { uri, stream: name });
    pull.ended.then(() => {
      this.#cap.release();
      if (this.#entries.get(uri) === pull) this.#entries.delete(uri);
      this.#streams.remove(pull.stream);
      this.#log.info("rtmp pull ended", { uri, stream: name });
    });
  }

  /**
   * Stops the pull of `uri` (the one pulled, or the redacted one the records show when it
   * names one pull); its stream ends.
   */
  async terminate(uri: string): Promise<void> {
    const key = this.#entries.has(uri) ? uri : this.#byRedacted(uri);
    const pull = key === undefined ? undefined : this.#entries.get(key);
    if (key === undefined || !pull) {
      throw new NotFoundError(`RTMP pull ${redactUri(uri)} not found`);
    }
    this.#entries.delete(key);
    await pull.stream.terminate("Stopped by rest /pull/rtmp/terminate");
  }

  /** The one pulled uri whose redacted form is `redacted`. */
  #byRedacted(redacted: string): string | undefined {
    const matches = [...this.#entries.keys()].filter((uri) => redactUri(uri) === redacted);
    return matches.length === 1 ? matches[0] : undefined;
  }

  /** The RTMP pull records; uris show no secret. */
  list(): RtmpPullRecord[] {
    return [...this.#entries].map(([uri, pull]) => {
      const record = pull.stream.record();
      return {
        localMediaSessionId: pull.stream.mediaSessionId,
        localStreamName: pull.stream.name,
        uri: redactUri(uri),
        status: pullStatus,
        hasAudio: record.hasAudio,
        hasVideo: record.hasVideo,
        record: record.record,
      };
    });
  }

  /** Stops every pull (server stop). */
  async closeAll(): Promise<void> {
    const pulls = [...this.#entries.values()];
    this.#entries.clear();
    await Promise.all(pulls.map((p) => p.stop()));
  }
}
