/**
 * One Web SDK session on one WebSocket: frame decoding and dispatch through the handler
 * table, sending, the keepalive counters, and the single end path (socket closed for any
 * reason → unregistered, streams ended, client log closed, ConnectionStatusEvent fired).
 */
import { MediaServerError, ParseError } from "../core/errors.ts";
import type { RestClientConfig } from "../core/hooks.ts";
import type { Logger } from "../core/log.ts";
import type { ConnectionRecord } from "../core/records.ts";
import type { ClientLogLevel, ClientSession } from "../core/session_registry.ts";
import { ClientLog } from "./client_log.ts";
import { encodeFrame, parseFrame } from "./frame.ts";
import type { HandlerTable, SignalingContext } from "./handlers.ts";
import { closeCodes } from "./websocket/frame_reader.ts";
import type { ServerWebSocket, SocketCloseInfo } from "./websocket/socket.ts";

/** WebSocket close codes (RFC 6455 §7.4.1), for the handlers that close sessions. */
export { closeCodes };

/** Bytes a client may leave unread in our send buffer before it is cut off as too slow. */
export const maxBufferedBytes = 4 * 1024 * 1024;

/**
 * Time a client has to answer our close frame, in ms; past it TCP is cut (a client that
 * stopped reading must not keep its session, streams and REST terminate call hanging).
 */
export const closeHandshakeTimeoutMs = 2000;

/** Where a session stands: `new` until `connection`, `connecting` while the hook runs. */
export type SessionState = "new" | "connecting" | "established" | "closed";

/** Addresses of the socket and the Origin of its upgrade request. */
export interface SessionEndpoints {
  readonly clientAddress: string;
  readonly clientPort: number;
  readonly serverAddress: string;
  readonly serverPort: number;
  /** Origin header of the upgrade request ("" when absent, e.g. a non-browser client). */
  readonly origin: string;
}

/** A client session of the Web SDK bound to its WebSocket. */
export class SignalingSession implements ClientSession {
  readonly sessionId: string;
  readonly endpoints: SessionEndpoints;
  readonly clientLog: ClientLog;
  /** Resolves once the session has fully ended. */
  readonly ended: Promise<void>;
  /** Consecutive server pings left without a pong (keepalive). */
  missedPongs = 0;
  /** A ping was sent and its pong has not come yet. */
  awaitingPong = false;

  #state: SessionState = "new";
  #socket: ServerWebSocket;
  #ctx: SignalingContext;
  #handlers: HandlerTable;
  #log: Logger;
  #record?: ConnectionRecord;
  #connection?: Record<string, unknown>;
  #restClientConfig?: RestClientConfig;
  /** Set when we close the session; otherwise the socket tells why it ended. */
  #endReason?: string;
  #ended = Promise.withResolvers<void>();

  constructor(
    socket: ServerWebSocket,
    endpoints: SessionEndpoints,
    ctx: SignalingContext,
    handlers: HandlerTable,
  ) {
    this.#socket = socket;
    this.endpoints = endpoints;
    this.#ctx = ctx;
    this.#handlers = handlers;
    const e = endpoints;
    this.sessionId =
      `/${e.clientAddress}:${e.clientPort}/${e.serverAddress}:${e.serverPort}-${crypto.randomUUID()}`;
    this.#log = ctx.log.child({ sessionId: this.sessionId });
    this.clientLog = new ClientLog(ctx.services.config.folders.logs, this.sessionId);
    this.ended = this.#ended.promise;
    socket.onmessage = (data) => this.#onMessage(data);
    socket.closed.then((info) => this.#onClose(info));
  }

  /** Where the session stands. */
  get state(): SessionState {
    return this.#state;
  }

  /** The backend's `restClientConfig` from the connect answer, if any. */
  get restClientConfig(): RestClientConfig | undefined {
    return this.#restClientConfig;
  }

  /** Marks the `connection` message as being handled; false if one was handled already. */
  beginConnect(): boolean {
    if (this.#state !== "new") return false;
    this.#state = "connecting";
    return true;
  }

  /**
   * Completes the handshake: registers the session and sends `getUserData` with
   * `clientObject`. False when the socket closed while the connect hook ran.
   */
  establish(
    connection: Record<string, unknown>,
    record: ConnectionRecord,
    restClientConfig: RestClientConfig | undefined,
    clientObject: Record<string, unknown>,
  ): boolean {
    if (this.#state !== "connecting" || this.#socket.state !== "open") return false;
    // From now on the larger limit of an established session applies.
    this.#socket.maxMessageBytes = this.#ctx.services.config.ws.maxMessageBytes;
    this.#connection = connection;
    this.#record = record;
    this.#restClientConfig = restClientConfig;
    this.#state = "established";
    this.#ctx.services.sessions.add(this);
    this.send("getUserData", clientObject);
    this.#log.info("session established", { appKey: record.appKey, origin: record.origin });
    this.clientLog.write("INFO", "session established");
    return true;
  }

  /** The Connection record; only established sessions are listed, so it is always set there. */
  record(): ConnectionRecord {
    if (!this.#record) throw new Error(`session ${this.sessionId} is not established`);
    return this.#record;
  }

  /** Sends a message; dropped once the socket is closing. */
  send(message: string, ...data: unknown[]): void {
    if (this.#socket.state !== "open") return;
    if (this.#socket.bufferedAmount > maxBufferedBytes) {
      this.close(closeCodes.policy, "client does not read its messages");
      return;
    }
    const text = encodeFrame(message, data);
    this.#socket.send(text);
    if (message !== "ping") this.clientLog.write("DEBUG", `>>> ${text}`);
    else this.clientLog.write("TRACE", `>>> ${text}`);
  }

  /**
   * Starts closing the socket; the end path runs once it has closed, which the socket
   * guarantees within closeHandshakeTimeoutMs.
   */
  close(code: number, reason: string): void {
    if (this.#socket.state !== "open") return;
    this.#endReason = reason;
    this.#socket.close(code, reason);
  }

  /** Closes the session and waits until it has ended. */
  async terminate(reason: string): Promise<void> {
    this.close(closeCodes.normal, reason);
    await this.ended;
  }

  /** Starts (or re-levels) the client log file. */
  enableClientLog(level: ClientLogLevel): Promise<void> {
    return this.clientLog.enable(level);
  }

  /** Stops the client log and closes its file. */
  disableClientLog(): Promise<void> {
    return this.clientLog.disable();
  }

  #onMessage(data: string | Uint8Array): void {
    if (typeof data !== "string") {
      // The core protocol is text only; binary belongs to media sockets not built yet.
      this.#log.debug("binary frame ignored");
      return;
    }
    let frame;
    try {
      frame = parseFrame(data);
    } catch (err) {
      const info = `malformed frame: ${(err as Error).message}`;
      this.#log.warn("malformed frame", { reason: (err as Error).message });
      this.clientLog.write("WARN", info);
      this.send("fail", { apiMethod: "signaling", info });
      return;
    }
    const { message } = frame;
    const payload = frame.data[0];
    if (message !== "pushLogs") {
      this.clientLog.write(message === "pong" ? "TRACE" : "DEBUG", `<<< ${data}`);
    }
    const entry = this.#handlers.get(message);
    if (!entry) {
      this.#log.info("unknown message", { message });
      this.send("fail", { apiMethod: message, info: `unknown message ${message}` });
      return;
    }
    if (this.#state !== "established" && !entry.beforeEstablished) {
      this.send("fail", { apiMethod: message, info: "the session is not established" });
      return;
    }
    try {
      const done = entry.handle(this, payload, this.#ctx);
      if (done) done.catch((err) => this.#handlerFailed(message, err));
    } catch (err) {
      this.#handlerFailed(message, err);
    }
  }

  #handlerFailed(message: string, err: unknown): void {
    const expected = err instanceof MediaServerError || err instanceof ParseError;
    const info = expected ? (err as Error).message : "internal error";
    if (expected) this.#log.warn("message refused", { message, err });
    else this.#log.error("message handler failed", { message, err, stack: (err as Error).stack });
    this.clientLog.write(expected ? "WARN" : "ERROR", `${message} failed: ${info}`);
    this.send("fail", { apiMethod: message, info });
  }

  #onClose(info: SocketCloseInfo): void {
    const wasEstablished = this.#state === "established";
    this.#state = "closed";
    const { services } = this.#ctx;
    services.sessions.remove(this);
    let reason = this.#endReason;
    if (reason === undefined && info.byServer) {
      // The socket failed the connection: a protocol error or a message over the limit.
      reason = info.reason;
      this.#log.warn("connection failed", { code: info.code, reason });
    }
    reason ??= info.reason === "" ? "closed by the client" : `closed by the client: ${info.reason}`;
    this.#log.info("session ended", { reason, code: info.code, established: wasEstablished });
    this.clientLog.write("INFO", `session ended: ${reason}`);
    const cleanup = (async () => {
      const streams = services.streams.list().filter((s) =>
        s.record().sessionId === this.sessionId
      );
      await Promise.allSettled(streams.map((s) => s.terminate("Stopped by session disconnect")));
      await this.clientLog.disable();
    })();
    if (wasEstablished) {
      void services.hooks.invoke(
        "ConnectionStatusEvent",
        { ...this.#connection, status: "DISCONNECTED", info: reason },
        this.#restClientConfig,
      );
    }
    cleanup.catch((err) => this.#log.error("session cleanup failed", { err }))
      .finally(() => this.#ended.resolve());
  }
}
