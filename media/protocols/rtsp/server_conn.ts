/**
 * One connection of the RTSP server: reads requests (and interleaved RTCP) with the shared
 * message parser, hands each request to the connection's handler and writes its response;
 * media goes out on the same socket between responses. Bytes that are no RTSP, a request
 * over the parser's limits, or one left unfinished for `requestTimeoutMs` are answered 400
 * and the connection is closed. A write the client does not take within `writeTimeoutMs`
 * closes the connection too, so a stalled player cannot hold its socket.
 */
import { ParseError } from "../../../core/errors.ts";
import type { Logger } from "../../../core/log.ts";
import { type InterleavedFrame, type RtspServerRequest, RtspStreamParser } from "./message.ts";
import { type RtspReply, writeResponse } from "./response.ts";

/** Bytes read from the socket at once. */
export const serverReadChunkBytes = 4 * 1024;
/** Time a started request has to arrive whole, in ms. */
export const requestTimeoutMs = 5000;
/** Time a write may wait for the client to read, in ms. */
export const writeTimeoutMs = 10_000;

/** What a connection does with what it reads. */
export interface RtspConnHandler {
  /** Answers one request (requests are answered in order, one at a time). */
  request(request: RtspServerRequest): Promise<RtspReply> | RtspReply;
  /** An interleaved frame of the client (its RTCP receiver reports). */
  interleaved(frame: InterleavedFrame): void;
  /** The connection has ended; called once, and awaited before the connection counts as gone. */
  closed(): Promise<void> | void;
}

/** Ends a write: with the error when it failed (the connection is closed then). */
export type RtspWriteDone = (err?: Error) => void;

const noBytes = new Uint8Array(0);

/** Timeouts of a connection (tests shorten them). */
export interface RtspConnTimeouts {
  requestTimeoutMs?: number;
  writeTimeoutMs?: number;
}

/** A client connection. */
export class RtspServerConn {
  /** Client address and port, for logs. */
  readonly remote: string;
  /** Client IP address (UDP media goes there). */
  readonly remoteAddress: string;
  /** Address the client reached the server on (for the SDP's origin). */
  readonly localAddress: string;
  readonly #conn: Deno.Conn;
  readonly #log: Logger;
  readonly #timeouts: Required<RtspConnTimeouts>;
  readonly #ended = Promise.withResolvers<void>();
  #closed = false;
  /** Start of the write in flight (performance.now() ms), or -1 when none is. */
  #writeStartMs = -1;
  /** Bytes of the write in flight, how many the socket took, and its callback. */
  #inFlight: Uint8Array = noBytes;
  #inFlightOffset = 0;
  #inFlightDone: RtspWriteDone | undefined;
  /** Writes given while one was in flight, in order, and their callbacks. */
  #queued: Uint8Array[] = [];
  #queuedDone: RtspWriteDone[] = [];
  #watchdog: ReturnType<typeof setTimeout> | undefined;

  constructor(conn: Deno.Conn, log: Logger, timeouts: RtspConnTimeouts = {}) {
    this.#conn = conn;
    const remote = conn.remoteAddr as Deno.NetAddr;
    this.remote = `${remote.hostname}:${remote.port}`;
    this.remoteAddress = remote.hostname;
    this.localAddress = (conn.localAddr as Deno.NetAddr).hostname;
    this.#log = log;
    this.#timeouts = {
      requestTimeoutMs: timeouts.requestTimeoutMs ?? requestTimeoutMs,
      writeTimeoutMs: timeouts.writeTimeoutMs ?? writeTimeoutMs,
    };
  }

  /** True once closed. */
  get closed(): boolean {
    return this.#closed;
  }

  /** Settles when the connection has closed. */
  get ended(): Promise<void> {
    return this.#ended.promise;
  }

  /**
   * Writes `bytes` after what was written before; resolves once the client took them,
   * rejects when the connection is closed. `bytes` must not change until then.
   */
  write(bytes: Uint8Array): Promise<void> {
    const { promise, resolve, reject } = Promise.withResolvers<void>();
    this.writeThen(bytes, (err) => err ? reject(err) : resolve());
    return promise;
  }

  /**
   * `write` with a callback instead of a promise, for players, which write dozens of times a
   * second: chained promises per write were most of their garbage.
   */
  writeThen(bytes: Uint8Array, done: RtspWriteDone): void {
    if (this.#closed) {
      queueMicrotask(() => done(new Deno.errors.BadResource("RTSP connection closed")));
      return;
    }
    if (this.#writeStartMs >= 0) {
      this.#queued.push(bytes);
      this.#queuedDone.push(done);
      return;
    }
    this.#start(bytes, done);
  }

  #start(bytes: Uint8Array, done: RtspWriteDone): void {
    this.#writeStartMs = performance.now();
    this.#watchdog ??= setTimeout(this.#checkWrite, this.#timeouts.writeTimeoutMs);
    this.#inFlight = bytes;
    this.#inFlightOffset = 0;
    this.#inFlightDone = done;
    this.#conn.write(bytes).then(this.#wrote, this.#writeFailed);
  }

  /** Continues a partial write; once all is written, starts the next queued one. */
  #wrote = (n: number): void => {
    this.#inFlightOffset += n;
    if (this.#inFlightOffset < this.#inFlight.length && !this.#closed) {
      this.#conn.write(this.#inFlight.subarray(this.#inFlightOffset))
        .then(this.#wrote, this.#writeFailed);
      return;
    }
    this.#finish(this.#closed ? new Deno.errors.BadResource("RTSP connection closed") : undefined);
  };

  #writeFailed = (err: Error): void => {
    this.close();
    this.#finish(err);
  };

  /** Ends the write in flight; starts the next, or fails them all once closed. */
  #finish(err: Error | undefined): void {
    const done = this.#inFlightDone;
    this.#inFlightDone = undefined;
    this.#inFlight = noBytes;
    this.#writeStartMs = -1;
    if (this.#closed) {
      const failed = this.#queuedDone;
      this.#queued = [];
      this.#queuedDone = [];
      const closed = err ?? new Deno.errors.BadResource("RTSP connection closed");
      done?.(closed);
      for (const d of failed) d(closed);
      return;
    }
    const next = this.#queued.shift();
    if (next) this.#start(next, this.#queuedDone.shift()!);
    done?.(err);
  }

  #checkWrite = (): void => {
    this.#watchdog = undefined;
    if (this.#closed) return;
    if (this.#writeStartMs < 0) {
      this.#watchdog = setTimeout(this.#checkWrite, this.#timeouts.writeTimeoutMs);
      return;
    }
    const waitedMs = performance.now() - this.#writeStartMs;
    if (waitedMs >= this.#timeouts.writeTimeoutMs) {
      this.#log.info("rtsp client stopped reading; closing", { remote: this.remote });
      this.close();
    } else this.#watchdog = setTimeout(this.#checkWrite, this.#timeouts.writeTimeoutMs - waitedMs);
  };

  /** Closes the socket. Idempotent. */
  close(): void {
    if (this.#closed) return;
    this.#closed = true;
    clearTimeout(this.#watchdog);
    try {
      this.#conn.close();
    } catch {
      // Closed already.
    }
    this.#ended.resolve();
  }

  /** Reads and answers requests until the connection ends; calls `handler.closed` once. */
  async serve(handler: RtspConnHandler): Promise<void> {
    const parser = new RtspStreamParser();
    const buf = new Uint8Array(serverReadChunkBytes);
    let partialTimer: ReturnType<typeof setTimeout> | undefined;
    try {
      for (;;) {
        const n = await this.#conn.read(buf).catch(() => null);
        if (n === null) break;
        try {
          parser.push(buf.subarray(0, n));
          for (let message = parser.next(); message; message = parser.next()) {
            if (message.kind === "interleaved") handler.interleaved(message);
            else if (message.kind === "request") {
              if (!await this.#answer(handler, message)) return;
            }
            // A response of the client answers nothing the server asked: ignored.
          }
        } catch (err) {
          if (!(err instanceof ParseError)) throw err;
          await this.#refuse(err.message);
          return;
        }
        clearTimeout(partialTimer);
        partialTimer = undefined;
        if (parser.buffered > 0) {
          partialTimer = setTimeout(
            () => void this.#refuse("request not complete in time"),
            this.#timeouts.requestTimeoutMs,
          );
        }
      }
    } finally {
      clearTimeout(partialTimer);
      this.close();
      await handler.closed();
    }
  }

  /** Answers a request; false when the connection is to close. */
  async #answer(handler: RtspConnHandler, request: RtspServerRequest): Promise<boolean> {
    const cseq = request.headers.get("cseq");
    let reply: RtspReply;
    if (cseq === undefined || !/^\d{1,10}$/.test(cseq)) {
      reply = { status: 400, close: true };
    } else {
      try {
        reply = await handler.request(request);
      } catch (err) {
        if (!(err instanceof ParseError)) throw err;
        reply = { status: 400, close: true };
        this.#log.debug("bad rtsp request", { remote: this.remote, err: err.message });
      }
    }
    const written = this.write(writeResponse(cseq, reply)).catch(() => {});
    reply.afterWrite?.();
    await written;
    if (reply.close) this.close();
    return !reply.close && !this.#closed;
  }

  /** Answers 400 to bytes that are no request, then closes. */
  async #refuse(reason: string): Promise<void> {
    if (this.#closed) return;
    this.#log.debug("rtsp connection refused", { remote: this.remote, reason });
    await this.write(writeResponse(undefined, { status: 400 })).catch(() => {});
    this.close();
  }
}
