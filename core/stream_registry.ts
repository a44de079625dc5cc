/**
 * The streams of the server, keyed by mediaSessionId. Providers register what they publish;
 * players register what they play. REST and signaling look streams up here, never in each
 * other.
 */
import { ConflictError, NotFoundError, ServiceUnavailableError } from "./errors.ts";
import type { Cap } from "./limits.ts";
import type { RegisteredStream, StreamDirectory } from "../media/stream_record.ts";

export type { RegisteredStream } from "../media/stream_record.ts";

/** Told when a published stream is added to or removed from the registry. */
export type PublishWatcher = (event: "published" | "unpublished", stream: RegisteredStream) => void;

/**
 * Streams by mediaSessionId, with lookup of the published stream of a name. Every published
 * stream, whatever its provider, holds a slot of the `streams` cap while registered.
 */
export class StreamRegistry implements StreamDirectory {
  #byId = new Map<string, RegisteredStream>();
  #publishedByName = new Map<string, RegisteredStream>();
  #cap?: Cap;
  #watchers = new Set<PublishWatcher>();

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

  /** Number of streams. */
  get size(): number {
    return this.#byId.size;
  }
}
