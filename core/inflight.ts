/**
 * Counts the requests a listener is handling so a stop can let them finish. Deno's
 * `server.shutdown()` alone cuts the body of a request still being uploaded, so a stop first
 * drains: new requests get 503, in-flight ones run to their end, then the listener closes.
 */

/** Longest a stop waits for in-flight requests, in ms, before closing anyway. */
export const drainTimeoutMs = 10_000;

/** Wraps a fetch handler to count in-flight requests and refuse new ones while draining. */
export class InflightTracker {
  #inflight = 0;
  #draining = false;
  #idle?: PromiseWithResolvers<void>;

  /** Number of requests being handled. */
  get inflight(): number {
    return this.#inflight;
  }

  /**
   * Counts a request in; false while draining (answer it with `refusal()`). A handler that
   * counts itself saves the extra async layer of `wrap`; it calls `leave()` once answered.
   */
  enter(): boolean {
    if (this.#draining) return false;
    this.#inflight++;
    return true;
  }

  /** Counts a request entered with `enter()` out. */
  leave(): void {
    if (--this.#inflight === 0) this.#idle?.resolve();
  }

  /** The answer to a request that came while draining. */
  refusal(): Response {
    return Response.json({ error: "unavailable", message: "the server is shutting down" }, {
      status: 503,
      headers: { "Connection": "close" },
    });
  }

  /** The handler, counted. */
  wrap(
    handler: (req: Request) => Response | Promise<Response>,
  ): (req: Request) => Promise<Response> {
    return async (req) => {
      if (!this.enter()) return this.refusal();
      try {
        return await handler(req);
      } finally {
        this.leave();
      }
    };
  }

  /** Refuses new requests and resolves once none is in flight, or after `timeoutMs`. */
  async drain(timeoutMs = drainTimeoutMs): Promise<void> {
    this.#draining = true;
    if (this.#inflight === 0) return;
    this.#idle = Promise.withResolvers<void>();
    let timer: ReturnType<typeof setTimeout> | undefined;
    const timeout = new Promise<void>((resolve) => timer = setTimeout(resolve, timeoutMs));
    try {
      await Promise.race([this.#idle.promise, timeout]);
    } finally {
      clearTimeout(timer);
    }
  }
}
