/**
 * An HTTP listener that outlives its failures. Deno.serve ends its whole listener when
 * accept fails with "Too many open files" (its `finished` promise rejects, which unhandled
 * ends the process); connections already accepted keep being served. This listener logs the
 * failure and listens again on the same address after a pause that doubles up to a ceiling
 * while descriptors stay exhausted, so the API answers again once connections close.
 *
 * Requests go through the descriptor guard (core/fd_guard.ts): past its floor a request is
 * answered 503 and its connection shut down (Deno.serve ignores `Connection: close`), so a
 * flood of REST connections cannot take the last descriptors; `alwaysServed` paths (/health)
 * are answered all the same.
 */
import type { Logger } from "./log.ts";
import { ServiceUnavailableError } from "./errors.ts";
import { descriptors } from "./fd_guard.ts";
import { shutdownSocket } from "./socket_shutdown.ts";

/** First pause before listening again after a failure, in milliseconds. */
export const relistenFirstDelayMs = 100;
/** Longest pause between attempts while the failure repeats, in milliseconds. */
export const relistenMaxDelayMs = 2000;
/** A listener that ran this long without failing starts again from the first pause, in ms. */
const stableAfterMs = 10_000;

/** Where and what to serve. */
export interface HttpListenerOptions {
  hostname: string;
  /** 0 picks an ephemeral port, kept for every later listen. */
  port: number;
  handler: Deno.ServeHandler;
  /** Answers a request whose handler threw. */
  onError: (err: unknown) => Response | Promise<Response>;
  log: Logger;
  /** Paths served even past the descriptor guard's floor (e.g. `/health`). */
  alwaysServed?: readonly string[];
}

/** A started HTTP listener. */
export class HttpListener {
  #options: HttpListenerOptions;
  #server!: Deno.HttpServer<Deno.NetAddr>;
  #port = 0;
  #delayMs = relistenFirstDelayMs;
  #startedAt = 0;
  #timer?: ReturnType<typeof setTimeout>;
  #stopped = false;
  #restarts = 0;

  private constructor(options: HttpListenerOptions) {
    this.#options = options;
  }

  /** Listens; rejects when the first listen fails (address in use, permission). */
  static async start(options: HttpListenerOptions): Promise<HttpListener> {
    const listener = new HttpListener(options);
    listener.#port = await listener.#listen(options.port);
    return listener;
  }

  /** The port listened on. */
  get port(): number {
    return this.#port;
  }

  /** Times the listener failed and listened again. */
  get restarts(): number {
    return this.#restarts;
  }

  /** Stops listening and closes the connections (in-flight requests end first). */
  async shutdown(): Promise<void> {
    this.#stopped = true;
    clearTimeout(this.#timer);
    // A listener that failed is already closed; its shutdown has nothing left to do.
    await this.#server.shutdown().catch(() => {});
    await this.#server.finished.catch(() => {});
  }

  #listen(port: number): Promise<number> {
    const { promise, resolve } = Promise.withResolvers<number>();
    const { hostname, onError } = this.#options;
    const server = Deno.serve(
      { hostname, port, onListen: ({ port }) => resolve(port), onError },
      this.#guarded,
    );
    this.#server = server;
    this.#startedAt = Date.now();
    server.finished.catch((err) => this.#failed(server, err));
    return promise;
  }

  /** The handler behind the descriptor guard. */
  #guarded: Deno.ServeHandler<Deno.NetAddr> = (req, info) => {
    const remote = info.remoteAddr;
    if (
      descriptors.admitRequest(remote) ||
      this.#options.alwaysServed?.includes(pathOf(req.url))
    ) {
      return this.#options.handler(req, info);
    }
    const refusal = new ServiceUnavailableError(descriptors.refuseRequest());
    // Its descriptor is what the floor protects: freed once the answer is out, even if the
    // client never closes (a grace period would let a flood pile descriptors up).
    info.completed.finally(() => shutdownSocket({ localPort: this.#port, remote }));
    return Response.json(refusal.toJSON(), {
      status: refusal.status,
      headers: { Connection: "close" },
    });
  };

  #failed(server: Deno.HttpServer<Deno.NetAddr>, err: unknown): void {
    if (this.#stopped || server !== this.#server) return;
    if (Date.now() - this.#startedAt > stableAfterMs) this.#delayMs = relistenFirstDelayMs;
    this.#options.log.error("listener failed, listening again", {
      address: this.#options.hostname,
      port: this.#port,
      inMs: this.#delayMs,
      err,
    });
    this.#schedule();
  }

  #schedule(): void {
    this.#timer = setTimeout(() => {
      if (this.#stopped) return;
      try {
        void this.#listen(this.#port);
        this.#restarts++;
        this.#delayMs = Math.min(this.#delayMs * 2, relistenMaxDelayMs);
      } catch (err) {
        // No descriptor left even for the listening socket: try again later.
        this.#options.log.warn("listening again failed", { port: this.#port, err });
        this.#delayMs = Math.min(this.#delayMs * 2, relistenMaxDelayMs);
        this.#schedule();
      }
    }, this.#delayMs);
  }
}

/** The path of an absolute URL, without parsing the whole URL. */
export function pathOf(url: string): string {
  const start = url.indexOf("/", url.indexOf("//") + 2);
  const query = url.indexOf("?", start);
  return url.slice(start, query < 0 ? undefined : query);
}
