/**
 * Ports of a configured range handed out one at a time: a port is taken by binding a socket
 * on it, so a port another process holds is skipped; the search starts after the port last
 * given, so a freed port is not reused at once (late datagrams of its old sender).
 */

/** A range of ports and which of them are held. */
export class PortPool {
  readonly #held = new Set<number>();
  #next: number;

  /** @param min lowest port (inclusive) @param max highest port (inclusive) */
  constructor(readonly min: number, readonly max: number) {
    this.#next = min;
  }

  /** Ports in the range. */
  get size(): number {
    return this.max - this.min + 1;
  }

  /**
   * Binds the first port `bind` succeeds on (it resolves undefined when the port is busy) and
   * holds it; undefined when no port of the range could be bound.
   */
  async take<T>(
    bind: (port: number) => Promise<T | undefined>,
  ): Promise<{ port: number; value: T } | undefined> {
    for (let tried = 0; tried < this.size; tried++) {
      const port = this.#next;
      this.#next = port >= this.max ? this.min : port + 1;
      if (this.#held.has(port)) continue;
      // Held before the bind settles, so concurrent takes never try the same port.
      this.#held.add(port);
      const value = await bind(port);
      if (value !== undefined) return { port, value };
      this.#held.delete(port);
    }
    return undefined;
  }

  /** Gives a port back. */
  release(port: number): void {
    this.#held.delete(port);
  }
}
