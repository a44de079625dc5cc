/**
 * Stream access lists (CDN 2.2): a stream without a list is open; a stream with one opens only
 * to viewers presenting one of its keys (none, once every key was removed, until the list is
 * deleted). Lists live in the cluster
 * store, so a change made on the origin applies on every node at once; viewers whose key a
 * change revokes are stopped with "restricted access".
 */
import { ForbiddenError } from "../errors.ts";

/** The reason a viewer is refused or stopped, as WCS words it. */
export const restrictedAccess = "restricted access";

interface Viewer {
  key: string | undefined;
  stop: (info: string) => void;
}

/** Checks viewers' keys against the current lists and stops the ones a change revokes. */
export class ViewerAccess {
  #keysOf: (stream: string) => readonly string[] | undefined;
  #viewers = new Map<string, Set<Viewer>>();

  /** @param keysOf the access list of a stream (undefined: open to all). */
  constructor(keysOf: (stream: string) => readonly string[] | undefined) {
    this.#keysOf = keysOf;
  }

  /** True when `key` opens `stream`. */
  allows(stream: string, key: string | undefined): boolean {
    const keys = this.#keysOf(stream);
    return keys === undefined || (key !== undefined && keys.includes(key));
  }

  /** Throws ForbiddenError ("restricted access") when `key` does not open `stream`. */
  check(stream: string, key: string | undefined): void {
    if (!this.allows(stream, key)) throw new ForbiddenError(restrictedAccess);
  }

  /** Follows a viewer until the returned function is called. */
  watch(stream: string, key: string | undefined, stop: (info: string) => void): () => void {
    const viewer: Viewer = { key, stop };
    let viewers = this.#viewers.get(stream);
    if (!viewers) this.#viewers.set(stream, viewers = new Set());
    viewers.add(viewer);
    return () => {
      viewers.delete(viewer);
      if (viewers.size === 0 && this.#viewers.get(stream) === viewers) {
        this.#viewers.delete(stream);
      }
    };
  }

  /** Stops the viewers of `stream` whose key no longer opens it; returns how many. */
  enforce(stream: string): number {
    let stopped = 0;
    for (const viewer of [...this.#viewers.get(stream) ?? []]) {
      if (this.allows(stream, viewer.key)) continue;
      this.#viewers.get(stream)?.delete(viewer);
      viewer.stop(restrictedAccess);
      stopped++;
    }
    return stopped;
  }

  /** Number of viewers followed. */
  get size(): number {
    let size = 0;
    for (const viewers of this.#viewers.values()) size += viewers.size;
    return size;
  }
}
