/**
 * The streams of the server, keyed by mediaSessionId. Providers register what they publish;
 * players register what they play. REST and signaling look streams up here, never in each
 * other.
 */
import { ConflictError, NotFoundError, ServiceUnavailableError } from "./errors.ts";
import type { Cap } from "./limits.ts";
import type { RegisteredStream, ViewerDirectory } from "../media/stream_record.ts";

export type { RegisteredStream } from "../media/stream_record.ts";

/** Told when a published stream is added to or removed from the registry. */
export type PublishWatcher = (event: "published" | "unpublished", stream: RegisteredStream) => void;

/**
 * Decides what a viewer gets for a stream name when more than this server's own streams
 * exist: the CDN checks the viewer's access key and brings streams published on other nodes.
 */
export interface PlayGate {
  /**
   * The stream a viewer presenting `key` plays under `name`: the local one, or one brought
   * from elsewhere (e.g. pulled from an origin); undefined when there is none. Rejects with
   * ForbiddenError when the key does not open the stream.
   */
  open(name: string, key: string | undefined): Promise<RegisteredStream | undefined>;
  /**
   * Follows a viewer of `name` that presented `key`: `stop` is called with the reason when the
   * key stops opening the stream. The returned function ends the watch (the viewer left).
   */
  watchViewer(name: string, key: string | undefined, stop: (info: string) => void): () => void;
}

/**
 * Streams by mediaSessionId, with lookup of the published stream of a name. Every published
 * stream, whatever its provider, holds a slot of the `streams` cap while registered.
 */
export class StreamRegistry implements ViewerDirectory {
  #byId = new Map<string, RegisteredStream>();
  #publishedByName = new Map<string, RegisteredStream>();
  #cap?: Cap;
  #watchers = new Set<PublishWatcher>();
  #gate?: PlayGate;

  /** @param cap the `streams` cap published streams take a slot of; none: unlimited. */
  constructor(cap?: Cap) {
    this.#cap = cap;
  }

  /**
   * Adds a stream; a duplicate id, or a second publisher of a name, is a ConflictError, a
   * published stream beyond the `streams` cap a ServiceUnavailableError.
   */
  add(stream: RegisteredStream): void {
    if (this.#byId.has(stream.mediaSessionId)) {
      throw new ConflictError(`mediaSessionId ${stream.mediaSessionId} exists`);
    }
    if (stream.published) {
      if (this.#publishedByName.has(stream.name)) {
        throw new ConflictError(`stream ${stream.name} is already published`);
      }
      if (this.#cap && !this.#cap.tryAcquire()) {
        throw new ServiceUnavailableError(this.#cap.refusal());
      }
      this.#publishedByName.set(stream.name, stream);
    }
    this.#byId.set(stream.mediaSessionId, stream);
    if (stream.published) this.#tell("published", stream);
  }

  /** Removes a stream if present (idempotent, so owners may call it on every exit path). */
  remove(stream: RegisteredStream): void {
    if (this.#byId.get(stream.mediaSessionId) !== stream) return;
    this.#byId.delete(stream.mediaSessionId);
    if (this.#publishedByName.get(stream.name) === stream) {
      this.#publishedByName.delete(stream.name);
      this.#cap?.release();
      this.#tell("unpublished", stream);
    }
  }

  /**
   * Calls `watcher` after every published stream is added or removed, until the returned
   * function is called. Watchers run synchronously inside `add`/`remove`: they must not throw.
   */
  watch(watcher: PublishWatcher): () => void {
    this.#watchers.add(watcher);
    return () => this.#watchers.delete(watcher);
  }

  #tell(event: "published" | "unpublished", stream: RegisteredStream): void {
    for (const watcher of this.#watchers) watcher(event, stream);
  }

  /** The stream with this id, or NotFoundError. */
  get(mediaSessionId: string): RegisteredStream {
    const stream = this.#byId.get(mediaSessionId);
    if (!stream) throw new NotFoundError(`stream with mediaSessionId ${mediaSessionId} not found`);
    return stream;
  }

  /** The published stream of this name, if any. */
  published(name: string): RegisteredStream | undefined {
    return this.#publishedByName.get(name);
  }

  /** Every stream, in registration order. */
  list(): RegisteredStream[] {
    return [...this.#byId.values()];
  }

  /** Installs (or, with undefined, removes) the gate viewers' streams are opened through. */
  setGate(gate: PlayGate | undefined): void {
    this.#gate = gate;
  }

  /**
   * The stream a viewer presenting `key` plays under `name`: through the gate when one is
   * installed (access checks, streams of other nodes), else the published one.
   */
  open(name: string, key?: string): Promise<RegisteredStream | undefined> {
    return this.#gate ? this.#gate.open(name, key) : Promise.resolve(this.published(name));
  }

  /**
   * Follows a viewer for the gate (its key may be revoked: `stop` is then called with the
   * reason); the returned function ends the watch. Without a gate nothing is watched.
   */
  watchViewer(name: string, key: string | undefined, stop: (info: string) => void): () => void {
    return this.#gate ? this.#gate.watchViewer(name, key, stop) : () => {};
  }

  /** Number of streams. */
  get size(): number {
    return this.#byId.size;
  }
}
