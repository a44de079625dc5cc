/**
 * VOD streams by localStreamName: `/vod/startup` opens a file of the media folder and
 * publishes it; the entry (and its stream) goes away on terminate or at the file's end.
 */
import type { Config } from "../config.ts";
import { VodProvider } from "../media/providers/vod.ts";
import {
  BadRequestError,
  ConflictError,
  NotFoundError,
  ServiceUnavailableError,
} from "./errors.ts";
import type { Cap } from "./limits.ts";
import type { Logger } from "./log.ts";
import { existingFileInside } from "./paths.ts";
import type { VodRecord } from "./records.ts";
import type { StreamRegistry } from "./stream_registry.ts";

/** Scheme of the URIs of files published as live streams. */
const liveScheme = "vod-live://";

interface VodEntry {
  uri: string;
  provider: VodProvider;
}

/** The VOD streams of a server. */
export class VodRegistry {
  #entries = new Map<string, VodEntry>();
  #config: Config;
  #streams: StreamRegistry;
  #log: Logger;
  #cap: Cap;

  /** @param cap the `vods` cap; a VOD stream holds a slot from startup to its end. */
  constructor(config: Config, streams: StreamRegistry, log: Logger, cap: Cap) {
    this.#cap = cap;
    this.#config = config;
    this.#streams = streams;
    this.#log = log.child({ component: "vod" });
  }

  /**
   * Publishes the file of `uri` (vod-live://<file in the media folder>) as `localStreamName`
   * (default: the file name). Resolves once the stream is registered and playing; a VOD or
   * stream beyond its cap is a 503.
   */
  async startup(uri: string, localStreamName?: string): Promise<void> {
    if (!uri.startsWith(liveScheme)) {
      throw new BadRequestError("uri", `only ${liveScheme} URIs are published as live streams`);
    }
    let file: string;
    try {
      file = decodeURIComponent(uri.slice(liveScheme.length));
    } catch {
      throw new BadRequestError("uri", "malformed percent-encoding in the file name");
    }
    const name = localStreamName || file;
    if (this.#entries.has(name)) throw new ConflictError(`VOD stream ${name} exists`);
    if (this.#streams.published(name)) {
      throw new ConflictError(`stream ${name} is already published`);
    }
    const path = await existingFileInside(this.#config.folders.media, file, "uri");
    if (!this.#cap.tryAcquire()) throw new ServiceUnavailableError(this.#cap.refusal());
    let provider: VodProvider;
    try {
      provider = await VodProvider.open({
        path,
        name,
        mediaSessionId: crypto.randomUUID(),
        log: this.#log,
      });
    } catch (err) {
      this.#cap.release();
      throw err;
    }
    try {
      // Checked again: another startup of the same name may have finished while the file opened.
      if (this.#entries.has(name)) throw new ConflictError(`VOD stream ${name} exists`);
      this.#streams.add(provider.stream);
    } catch (err) {
      this.#cap.release();
      await provider.stop();
      throw err;
    }
    const entry = { uri, provider };
    this.#entries.set(name, entry);
    this.#log.info("vod started", { stream: name, file });
    provider.start().then(() => {
      this.#cap.release();
      this.#entries.delete(name);
      this.#streams.remove(provider.stream);
      this.#log.info("vod ended", { stream: name });
    });
  }

  /** Ends the VOD stream of `uri` (and `localStreamName` when given). */
  async terminate(uri: string, localStreamName?: string): Promise<void> {
    const matches = [...this.#entries].filter(([name, e]) =>
      e.uri === uri && (!localStreamName || name === localStreamName)
    );
    if (matches.length === 0) {
      throw new NotFoundError(`VOD stream ${localStreamName ?? uri} not found`);
    }
    await Promise.all(
      matches.map(([, e]) => e.provider.stream.terminate("Stopped by rest /vod/terminate")),
    );
  }

  /** The VOD records. */
  list(): VodRecord[] {
    return [...this.#entries].map(([name, { uri, provider }]) => ({
      localMediaSessionId: provider.stream.mediaSessionId,
      localStreamName: name,
      uri,
      status: "PROCESSED_LOCAL",
      hasAudio: provider.stream.tracks.some((t) => t.kind === "audio"),
      hasVideo: provider.stream.tracks.some((t) => t.kind === "video"),
      record: provider.stream.recording !== undefined,
    }));
  }

  /** Ends every VOD stream (server stop). */
  async closeAll(): Promise<void> {
    await Promise.all([...this.#entries.values()].map((e) => e.provider.stop()));
  }
}
