/** The listeners of a change feed, shared by the cluster stores and the cluster view. */
import type { Logger } from "../log.ts";
import type { ClusterChange } from "./store.ts";

/**
 * Listeners of cluster changes. Each is called from its own microtask, so whoever emits is
 * never re-entered, and a listener that throws is logged without stopping the others.
 */
export class Watchers {
  #listeners = new Set<(change: ClusterChange) => void>();
  #log?: Logger;

  constructor(log?: Logger) {
    this.#log = log;
  }

  /** Adds `listener`; the returned function removes it (a change already queued is dropped). */
  add(listener: (change: ClusterChange) => void): () => void {
    // A wrapper per call, so the same function watched twice is called twice.
    const entry = (change: ClusterChange) => listener(change);
    this.#listeners.add(entry);
    return () => this.#listeners.delete(entry);
  }

  /** Queues `change` for every listener. */
  emit(change: ClusterChange): void {
    for (const listener of this.#listeners) {
      queueMicrotask(() => {
        if (!this.#listeners.has(listener)) return;
        try {
          listener(change);
        } catch (error) {
          this.#log?.error("cluster change listener failed", { change: change.type, error });
        }
      });
    }
  }

  /** Removes every listener. */
  clear(): void {
    this.#listeners.clear();
  }
}
