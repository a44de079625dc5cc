/**
 * RTMP pulls by URI: `/pull/rtmp/pull` plays a remote RTMP stream into a local stream; the
 * entry goes away on terminate, when the remote stops, or on server stop.
 */
import { RtmpPull } from "../media/providers/rtmp_pull.ts";
import { parseRtmpUrl } from "../media/protocols/rtmp/url.ts";
import { ConflictError, NotFoundError } from "./errors.ts";
import type { Logger } from "./log.ts";
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

  constructor(streams: StreamRegistry, log: Logger) {
    this.#streams = streams;
    this.#log = log.child({ component: "rtmp-pull" });
  }

  /** Plays `uri` into the local stream `localStreamName` (default: the remote stream name). */
  async pull(uri: string, localStreamName?: string): Promise<void> {
    const url = parseRtmpUrl(uri, "uri");
    const name = localStreamName || url.streamName.split("?")[0];
    if (this.#entries.has(uri) || this.#starting.has(uri)) {
      throw new ConflictError(`${uri} is already pulled`);
    }
    if (this.#streams.published(name)) {
      throw new ConflictError(`stream ${name} is already published`);
    }
    this.#starting.add(uri);
    let pull: RtmpPull;
    try {
      pull = await RtmpPull.open({ url, name, log: this.#log });
    } finally {
      this.#starting.delete(uri);
    }
    try {
      this.#streams.add(pull.stream);
    } catch (err) {
      await pull.stop();
      throw err;
    }
    this.#entries.set(uri, pull);
    this.#log.info("rtmp pull started", { uri, stream: name });
    pull.ended.then(() => {
      if (this.#entries.get(uri) === pull) this.#entries.delete(uri);
      this.#streams.remove(pull.stream);
      this.#log.info("rtmp pull ended", { uri, stream: name });
    });
  }

  /** Stops the pull of `uri`; its stream ends. */
  async terminate(uri: string): Promise<void> {
    const pull = this.#entries.get(uri);
    if (!pull) throw new NotFoundError(`RTMP pull ${uri} not found`);
    this.#entries.delete(uri);
    await pull.stream.terminate("Stopped by rest /pull/rtmp/terminate");
  }

  /** The RTMP pull records. */
  list(): RtmpPullRecord[] {
    return [...this.#entries].map(([uri, pull]) => {
      const record = pull.stream.record();
      return {
        localMediaSessionId: pull.stream.mediaSessionId,
        localStreamName: pull.stream.name,
        uri,
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
