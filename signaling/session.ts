/**
 * One Web SDK session on its WebSocket: frame decoding and dispatch through the handler
 * table, sending, the keepalive counters, and the single end path (unregistered, streams
 * ended, client log closed, ConnectionStatusEvent fired). A session connected with
 * `keepAlive: true` whose socket is lost is detached instead: its streams go on, its messages
 * are kept, and a new connection sending its `authToken` resumes it within
 * `ws.resumeWindowSec`; past the window it ends.
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

/**
 * Bytes of messages a detached session keeps for its next connection; past it the session
 * ends (the same bound as a connected client's unread messages).
 */
export const maxPendingBytes = maxBufferedBytes;

/**
 * Where a session stands: `new` until `connection`, `connecting` while the hook runs,
 * `detached` while a keepAlive session waits for a connection to resume it.
 */
export type SessionState = "new" | "connecting" | "established" | "detached" | "closed";

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
  /** The `getUserData` object, sent again to a connection that resumes the session. */
  #clientObject?: Record<string, unknown>;
  /** Set when we close the socket; otherwise the socket tells why it ended. */
  #closeReason?: string;
  /** Our close leaves a keepAlive session resumable (the client stopped answering pings). */
  #resumableClose = false;
  /** Messages for the client while it has no open socket, encoded. */
  #pending: string[] = [];
  #pendingBytes = 0;
  #pendingOverflow = false;
  #resumeTimer?: ReturnType<typeof setTimeout>;
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
    this.#attach(socket);
  }

  /** Where the session stands. */
  get state(): SessionState {
    return this.#state;
  }

  /** The client asked to keep the session on the server after its socket is lost. */
  get keepAlive(): boolean {
    return this.#record?.keepAlive ?? false;
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
    this.#clientObject = clientObject;
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

  /**
   * Sends a message; once the socket is closing it is dropped, or kept for the next
   * connection of a session that may be resumed (pings excepted).
   */
  send(message: string, ...data: unknown[]): void {
    if (this.#state === "detached" || (this.#socket.state !== "open" && this.#mayDetach())) {
      if (message !== "ping") this.#keep(encodeFrame(message, data));
      return;
    }
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
   * guarantees within closeHandshakeTimeoutMs. `resumable`: a keepAlive session is detached
   * rather than ended. A detached session ends at once unless `resumable`.
   */
  close(code: number, reason: string, resumable = false): void {
    if (this.#state === "detached") {
      if (!resumable) this.#end(reason, code);
      return;
    }
    if (this.#socket.state === "open") {
      this.#closeReason = reason;
      this.#resumableClose = resumable;
      this.#socket.close(code, reason);
    } else if (!resumable) {
      // The socket is going already: this close makes its end final, never a detach.
      this.#closeReason ??= reason;
      this.#resumableClose = false;
    }
  }

  /**
   * Moves the socket of `from` (a new connection whose `connection` carried this session's
   * authToken and keepAlive) to this session: `getUserData` again, then the messages kept
   * while it was away. A socket this session still holds is closed. False, leaving `from`
   * as it was, unless this session is a keepAlive one still going and `from` is connecting.
   */
  resume(from: SignalingSession): boolean {
    if (this.#state !== "established" && this.#state !== "detached") return false;
    if (!this.keepAlive || this === from) return false;
    const socket = from.#giveUpSocket("connecting");
    if (!socket) return false;
    const previous = this.#socket;
    const wasDetached = this.#state === "detached";
    clearTimeout(this.#resumeTimer);
    this.#closeReason = undefined;
    this.#resumableClose = false;
    this.missedPongs = 0;
    this.awaitingPong = false;
    this.#attach(socket);
    socket.maxMessageBytes = this.#ctx.services.config.ws.maxMessageBytes;
    this.#state = "established";
    // Its close is ignored now that the session holds another socket.
    previous.close(closeCodes.normal, "session resumed on another connection");
    const pending = this.#pending;
    this.#pending = [];
    this.#pendingBytes = 0;
    this.send("getUserData", this.#clientObject);
    for (const text of pending) {
      socket.send(text);
      this.clientLog.write("DEBUG", `>>> ${text}`);
    }
    const e = from.endpoints;
    this.#log.info("session resumed", {
      clientAddress: e.clientAddress,
      clientPort: e.clientPort,
      wasDetached,
      pendingMessages: pending.length,
    });
    this.clientLog.write("INFO", `session resumed from ${e.clientAddress}:${e.clientPort}`);
    return true;
  }

  /**
   * Gives up the socket of a session that never sent `connection`, for another use (the MSE
   * media transport `connectMediaTransport` opens): this session ends here without closing
   * it. Undefined unless the session is new and its socket open.
   */
  releaseSocket(): ServerWebSocket | undefined {
    return this.#giveUpSocket("new");
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

  /** Makes `socket` the session's own: its messages come here, its close ends or detaches. */
  #attach(socket: ServerWebSocket): void {
    this.#socket = socket;
    socket.onmessage = (data) => this.#onMessage(data);
    socket.closed.then((info) => {
      if (this.#socket === socket) this.#onClose(info);
    });
  }

  /**
   * Gives up the socket (to a media transport, or to the session a `connection` resumes):
   * this session ends here without closing it. Undefined unless the session is in `state`
   * and its socket open.
   */
  #giveUpSocket(state: SessionState): ServerWebSocket | undefined {
    if (this.#state !== state || this.#socket.state !== "open") return undefined;
    this.#state = "closed";
    this.#socket.onmessage = undefined;
    this.#ended.resolve();
    return this.#socket;
  }

  /** True for a keepAlive session that outlives a lost socket (a window is configured). */
  #mayDetach(): boolean {
    return this.#state === "established" && this.keepAlive && !this.#pendingOverflow &&
      this.#ctx.services.config.ws.resumeWindowSec > 0;
  }

  /** Keeps a message for the next connection; past maxPendingBytes the session will end. */
  #keep(text: string): void {
    if (this.#pendingOverflow) return;
    // Rare path (no socket): the exact UTF-8 size is worth its encoding.
    this.#pendingBytes += new TextEncoder().encode(text).byteLength;
    if (this.#pendingBytes <= maxPendingBytes) {
      this.#pending.push(text);
      return;
    }
    this.#pendingOverflow = true;
    this.#pending = [];
    this.#pendingBytes = 0;
    if (this.#state === "detached") {
      this.#end(`more than ${maxPendingBytes} bytes of messages waited for a connection`);
    }
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
    if (this.#state === "closed" || this.#state === "detached") return;
    let reason = this.#closeReason;
    const failed = reason === undefined && info.byServer;
    if (failed) {
      // The socket failed the connection: a protocol error or a message over the limit.
      reason = info.reason;
      this.#log.warn("connection failed", { code: info.code, reason });
    }
    const lost = reason === undefined ? `socket closed (${info.code})` : reason;
    if (!failed && (reason === undefined || this.#resumableClose) && this.#mayDetach()) {
      this.#detach(lost);
      return;
    }
    reason ??= info.reason === "" ? "closed by the client" : `closed by the client: ${info.reason}`;
    this.#end(reason, info.code);
  }

  /** Keeps the session without a socket for `ws.resumeWindowSec`, then ends it. */
  #detach(lost: string): void {
    this.#state = "detached";
    const windowSec = this.#ctx.services.config.ws.resumeWindowSec;
    this.#log.info("session detached, kept for resumption", { reason: lost, windowSec });
    this.clientLog.write("INFO", `${lost}: session kept ${windowSec} s for resumption`);
    this.#resumeTimer = setTimeout(
      () => this.#end(`not resumed within ${windowSec} s after ${lost}`),
      windowSec * 1000,
    );
  }

  /** The end path, run once: unregistered, streams ended, log closed, DISCONNECTED fired. */
  #end(reason: string, code?: number): void {
    const wasEstablished = this.#state === "established" || this.#state === "detached";
    this.#state = "closed";
    clearTimeout(this.#resumeTimer);
    this.#pending = [];
    this.#pendingBytes = 0;
    const { services } = this.#ctx;
    services.sessions.remove(this);
    this.#log.info("session ended", { reason, code, established: wasEstablished });
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
