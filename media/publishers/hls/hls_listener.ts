/**
 * The HLS listener: a small HTTP/1.1 server (RFC 9112) on a TCP listener, for the requests a
 * player makes (GET, HEAD, OPTIONS; no request bodies), with keep-alive and pipelining.
 *
 * Two transports share the HTTP logic of hls_http1.ts:
 * - `ffi` (hls_ffi_transport.ts): libc sockets driven by epoll, segments written once into a
 *   memfd (or an unnamed temp file) and sent with sendfile(2), so a segment's bytes are not
 *   copied per viewer in user space (1,000 viewers of ~300 KB segments: ~1.8x the
 *   requests/s of `deno`);
 * - `deno`: Deno.listen, one `write` of a prebuilt response per request (Deno.serve was about
 *   a third of that rate).
 * `auto` takes `ffi` when FFI is permitted and libc opens, else `deno`.
 */
import type { Logger } from "../../../core/log.ts";
import {
  acceptRetryFirstMs,
  acceptRetryMaxMs,
  type HlsHttpHandler,
  Http1Responder,
  idleSweepMs,
  idleTimeoutMs,
  type ParsedHead,
  Refusal,
  RequestReader,
  shutdownGraceMs,
} from "./hls_http1.ts";
import { FfiTransport, ffiTransportAvailable, type HlsSegmentStore } from "./hls_ffi_transport.ts";

export {
  type HlsHttpHandler,
  type HlsHttpReply,
  type HlsHttpRequest,
  idleTimeoutMs,
  maxHeadBytes,
  textReply,
} from "./hls_http1.ts";

/** Which sockets serve the HLS port (`hls.transport`). */
export type HlsTransportName = "auto" | "ffi" | "deno";

/** Where and what to serve. */
export interface HlsListenerOptions {
  hostname: string;
  /** 0 picks an ephemeral port. */
  port: number;
  handler: HlsHttpHandler;
  log: Logger;
  /** The transport; `auto` (default) takes `ffi` when it can be had. */
  transport?: HlsTransportName;
  /**
   * A connection waiting this long for (the rest of) a request, or (ffi) for a client to take
   * any byte of an answer, is closed, in ms; `idleTimeoutMs` by default.
   */
  idleTimeoutMs?: number;
  /** Where the `ffi` transport keeps the bodies it sends with sendfile; `memory` by default. */
  segmentStore?: HlsSegmentStore;
}

/** What a transport gives the listener. */
export interface HlsTransport {
  readonly port: number;
  readonly restarts: number;
  shutdown(): Promise<void>;
}

/** A started HLS listener. */
export class HlsListener {
  readonly #transport: HlsTransport;
  /** The transport serving: `ffi` or `deno`. */
  readonly transport: "ffi" | "deno";

  private constructor(transport: HlsTransport, name: "ffi" | "deno") {
    this.#transport = transport;
    this.transport = name;
  }

  /**
   * Listens; throws when the address cannot be listened on, or when `ffi` is asked for and
   * cannot be had (the reason).
   */
  static start(options: HlsListenerOptions): Promise<HlsListener> {
    const asked = options.transport ?? "auto";
    if (asked !== "deno") {
      const ffi = ffiTransportAvailable(options.hostname);
      if (ffi.ok) {
        return Promise.resolve(new HlsListener(new FfiTransport(options), "ffi"));
      }
      if (asked === "ffi") {
        return Promise.reject(new Error(`hls.transport ffi is not available: ${ffi.reason}`));
      }
    }
    return Promise.resolve(new HlsListener(new DenoTransport(options), "deno"));
  }

  /** The port listened on. */
  get port(): number {
    return this.#transport.port;
  }

  /** Times accepting failed (no descriptor left) and was tried again. */
  get restarts(): number {
    return this.#transport.restarts;
  }

  /**
   * Stops listening; requests being handled are answered (within `shutdownGraceMs`), then
   * every connection closes.
   */
  shutdown(): Promise<void> {
    return this.#transport.shutdown();
  }
}

/** One connection's state, for the idle sweep and shutdown. */
interface Connection {
  conn: Deno.TcpConn;
  /**
   * Waiting for a request, handling one (not idling: a blocking reload may wait long), or
   * waiting for the client to take an answer's bytes.
   */
  phase: "reading" | "handling" | "writing";
  /** Since when it waits for the client (a request, or the next bytes taken), in ms. */
  sinceMs: number;
}

/** The transport on Deno's sockets: a task per connection reading and writing in turn. */
class DenoTransport implements HlsTransport {
  #options: HlsListenerOptions;
  #responder: Http1Responder;
  #listener: Deno.TcpListener;
  #connections = new Set<Connection>();
  #tasks = new Set<Promise<void>>();
  #sweep: ReturnType<typeof setInterval>;
  #accepting: Promise<void>;
  #stopping = false;
  #restarts = 0;

  constructor(options: HlsListenerOptions) {
    this.#options = options;
    this.#responder = new Http1Responder(options.handler, options.log);
    this.#listener = Deno.listen({ hostname: options.hostname, port: options.port });
    const idleMs = options.idleTimeoutMs ?? idleTimeoutMs;
    this.#sweep = setInterval(() => this.#closeIdle(idleMs), Math.min(idleSweepMs, idleMs));
    this.#accepting = this.#accept();
  }

  get port(): number {
    return (this.#listener.addr as Deno.NetAddr).port;
  }

  get restarts(): number {
    return this.#restarts;
  }

  async shutdown(): Promise<void> {
    if (this.#stopping) return;
    this.#stopping = true;
    clearInterval(this.#sweep);
    this.#listener.close();
    await this.#accepting;
    this.#closeIdle(0, "reading");
    let timer: ReturnType<typeof setTimeout> | undefined;
    const grace = new Promise((resolve) => timer = setTimeout(resolve, shutdownGraceMs));
    await Promise.race([Promise.all(this.#tasks), grace]);
    clearTimeout(timer);
    for (const c of this.#connections) close(c.conn);
    await Promise.all(this.#tasks);
  }

  async #accept(): Promise<void> {
    let retryMs = acceptRetryFirstMs;
    while (!this.#stopping) {
      let conn: Deno.TcpConn;
      try {
        conn = await this.#listener.accept();
      } catch (err) {
        if (this.#stopping) return;
        // Out of descriptors: connections being served go on; accept again after a pause.
        this.#restarts++;
        this.#options.log.error("hls accept failed, accepting again", { inMs: retryMs, err });
        await new Promise((resolve) => setTimeout(resolve, retryMs));
        retryMs = Math.min(retryMs * 2, acceptRetryMaxMs);
        continue;
      }
      retryMs = acceptRetryFirstMs;
      const task = this.#serve(conn);
      this.#tasks.add(task);
      void task.finally(() => this.#tasks.delete(task));
    }
  }

  /**
   * Closes connections that waited `olderThanMs` or longer for a request or, with `writing`,
   * for the client to take any byte of an answer (a stalled client holds no one else up, but
   * would hold its socket and a segment forever).
   */
  #closeIdle(olderThanMs: number, phase?: Connection["phase"]): void {
    const now = performance.now();
    for (const c of this.#connections) {
      const waiting = phase ? c.phase === phase : c.phase !== "handling";
      if (waiting && now - c.sinceMs >= olderThanMs) close(c.conn);
    }
  }

  async #serve(conn: Deno.TcpConn): Promise<void> {
    const state: Connection = { conn, phase: "reading", sinceMs: performance.now() };
    this.#connections.add(state);
    try {
      conn.setNoDelay(true);
      await this.#requests(conn, state);
    } catch {
      // The peer went away or the connection was closed (idle, shutdown): nothing to answer.
    } finally {
      this.#connections.delete(state);
      close(conn);
    }
  }

  /** Reads requests one after another and answers each, until one asks to close. */
  async #requests(conn: Deno.TcpConn, state: Connection): Promise<void> {
    const remote = conn.remoteAddr;
    const reader = new RequestReader();
    for (;;) {
      state.phase = "reading";
      state.sinceMs = performance.now();
      let taken: ParsedHead | Refusal | undefined;
      while ((taken = reader.take()) === undefined) {
        if (this.#stopping && reader.buffered === 0) return;
        const n = await conn.read(reader.space());
        if (n === null) return;
        reader.received(n);
      }
      if (taken instanceof Refusal) {
        await write(state, this.#responder.refusal(taken));
        return;
      }
      state.phase = "handling";
      const reply = await this.#responder.answer(taken, remote);
      const keepAlive = taken.keepAlive && !this.#stopping;
      await write(state, this.#responder.message(reply, taken, keepAlive));
      if (!keepAlive) return;
    }
  }
}

/** Writes all of `message`; each write the client takes bytes of restarts its idle clock. */
async function write(state: Connection, message: Uint8Array): Promise<void> {
  state.phase = "writing";
  let at = 0;
  while (at < message.length) {
    state.sinceMs = performance.now();
    at += await state.conn.write(message.subarray(at));
  }
}

function close(conn: Deno.Conn): void {
  try {
    conn.close();
  } catch {
    // Closed already.
  }
}
