/**
 * The WebSocket signaling listeners (WS, and WSS when a certificate is configured): our own
 * accept loop and RFC 6455 handshake, so that no accept error ends the process, connection
 * caps refuse with 503 before any upgrade, and the handshake (upgrade and an accepted
 * `connection` message) has a deadline. Every upgraded socket carries one session.
 */
import { drainTimeoutMs } from "../core/inflight.ts";
import { Cap, KeyedCap } from "../core/limits.ts";
import type { Services } from "../core/services.ts";
import { registerConnection } from "./connection.ts";
import { registerData } from "./data.ts";
import { HandlerTable, type SignalingContext } from "./handlers.ts";
import { KeepAlive, registerKeepAlive } from "./keepalive.ts";
import { registerMseStreams } from "./mse_streams.ts";
import { registerPushLogs } from "./push_logs.ts";
import { closeCodes, closeHandshakeTimeoutMs, SignalingSession } from "./session.ts";
import { registerWebRtcStreams } from "./webrtc_streams.ts";
import { registerSipPhone } from "./sip_phone.ts";
import { registerSfuApp } from "./sfu/sfu_app.ts";
import { acceptLoop } from "../core/accept_loop.ts";
import { closeConnection } from "../core/tls_handshake.ts";
import {
  checkUpgrade,
  errorResponse,
  HandshakeError,
  switchingProtocols,
} from "./websocket/handshake.ts";
import { ServerWebSocket } from "./websocket/socket.ts";
import { readRequestHead, writeAll } from "./websocket/upgrade.ts";

/** Time a refused connection has to send its request head before it is cut, in ms. */
export const refusalReadTimeoutMs = 1000;
/**
 * Connections refused by the descriptor guard that may wait at once for their request head
 * to be answered 503; beyond, a refused connection is closed at once. Their descriptors come
 * out of the reserve, so this stays a small share of it.
 */
export const maxAnsweredDescriptorRefusals = 32;

/** The handlers of every message built so far. */
export function defaultHandlers(): HandlerTable {
  const handlers = new HandlerTable();
  registerConnection(handlers);
  registerKeepAlive(handlers);
  registerData(handlers);
  registerPushLogs(handlers);
  registerWebRtcStreams(handlers);
  registerMseStreams(handlers);
  registerSipPhone(handlers);
  registerSfuApp(handlers);
  return handlers;
}

/** Where one listener binds. */
export interface ListenOptions {
  hostname: string;
  /** Port, 0 for an ephemeral one. */
  port: number;
  /** PEM files for WSS; plain WS without. */
  tls?: { certFile: string; keyFile: string };
}

/** The connection caps of one listener, as `/health` shows them. */
export interface ListenerLimits {
  readonly connections: ReturnType<Cap["toJSON"]>;
  readonly connectionsPerAddress: ReturnType<KeyedCap["toJSON"]>;
}

/** One open listener, its caps and its accept loop. */
interface Listener {
  readonly service: string;
  readonly hostname: string;
  readonly port: number;
  readonly listener: Deno.Listener;
  readonly connections: Cap;
  readonly perAddress: KeyedCap;
  loop?: Promise<void>;
}

/** Every signaling listener of a server and the sessions they carry. */
export class SignalingServer {
  /** Message handlers; later modules register theirs here before clients connect. */
  readonly handlers: HandlerTable;
  readonly #ctx: SignalingContext;
  readonly #sessions = new Set<SignalingSession>();
  readonly #listeners: Listener[] = [];
  /** Connections not upgraded yet, so a stop can cut them, and their handling to wait for. */
  readonly #handshakes = new Map<Deno.Conn, Promise<void>>();
  readonly #keepAlive: KeepAlive;
  /** Descriptor refusals waiting to be answered 503 (at most maxAnsweredDescriptorRefusals). */
  #answeringRefusals = 0;
  #stopping = false;

  constructor(services: Services, handlers: HandlerTable = defaultHandlers()) {
    this.handlers = handlers;
    this.#ctx = { services, log: services.log.child({ component: "signaling" }) };
    const { intervalMs, probes } = services.config.keepAlive;
    this.#keepAlive = new KeepAlive(intervalMs, probes, () => this.#sessions);
  }

  /** Open sessions, established or not. */
  get sessionCount(): number {
    return this.#sessions.size;
  }

  /** The connection caps of every listener by service (`ws`, `wss`): held, max, refused. */
  limitsSnapshot(): Record<string, ListenerLimits> {
    return Object.fromEntries(this.#listeners.map((l) => [l.service, {
      connections: l.connections.toJSON(),
      connectionsPerAddress: l.perAddress.toJSON(),
    }]));
  }

  /** Opens a listener and resolves with its port. */
  async listen(options: ListenOptions): Promise<number> {
    const { hostname } = options;
    const listener: Deno.Listener = options.tls
      ? Deno.listenTls({
        hostname,
        port: options.port,
        cert: await Deno.readTextFile(options.tls.certFile),
        key: await Deno.readTextFile(options.tls.keyFile),
      })
      : Deno.listen({ hostname, port: options.port });
    const service = options.tls ? "wss" : "ws";
    const { port } = listener.addr as Deno.NetAddr;
    const limits = this.#ctx.services.config.limits;
    const entry: Listener = {
      service,
      hostname,
      port,
      listener,
      connections: new Cap(`${service} connections`, limits.connectionsPerListener),
      perAddress: new KeyedCap(`${service} connections per address`, limits.connectionsPerAddress),
    };
    this.#listeners.push(entry);
    const log = this.#ctx.log.child({ service });
    entry.loop = acceptLoop(
      listener,
      (conn) => this.#track(conn, entry),
      log,
      () => this.#stopping,
      (conn, reason) => this.#refuse(conn, entry, reason),
    );
    this.#keepAlive.start();
    this.#ctx.log.info("listening", { service, address: hostname, port });
    return port;
  }

  /** Stops accepting, closes every session (their streams end) and waits for them. */
  async stop(): Promise<void> {
    this.#stopping = true;
    this.#keepAlive.stop();
    for (const l of this.#listeners) l.listener.close();
    await Promise.all(this.#listeners.map((l) => l.loop));
    for (const conn of this.#handshakes.keys()) closeConnection(conn, this.#ctx.log);
    await Promise.all(this.#handshakes.values());
    const ended = [...this.#sessions].map((s) => {
      s.close(closeCodes.goingAway, "server stopping");
      return s.ended;
    });
    let timer: ReturnType<typeof setTimeout> | undefined;
    await Promise.race([
      Promise.all(ended),
      new Promise((resolve) => timer = setTimeout(resolve, drainTimeoutMs)),
    ]);
    clearTimeout(timer);
    await this.#ctx.services.hooks.drain();
  }

  /**
   * Answers a connection the descriptor guard refused with a 503 naming the reason, as long
   * as few such answers are pending (the client's request head is read first, so closing
   * does not reset the connection over unread bytes); closes it at once beyond.
   */
  #refuse(conn: Deno.Conn, listener: Listener, reason: string): void {
    if (this.#answeringRefusals >= maxAnsweredDescriptorRefusals) {
      closeConnection(conn, this.#ctx.log);
      return;
    }
    this.#answeringRefusals++;
    this.#track(conn, listener, reason);
    this.#handshakes.get(conn)?.finally(() => this.#answeringRefusals--);
  }

  /**
   * Runs the handshake of a new connection, tracked until it is upgraded or refused;
   * `refusal`: refused already (by the descriptor guard), answered 503 once its head is read.
   */
  #track(conn: Deno.Conn, listener: Listener, refusal?: string): void {
    const handling = this.#handshake(conn, listener, refusal)
      .catch((err) => {
        this.#ctx.log.error("signaling handshake failed", { err, stack: (err as Error).stack });
        closeConnection(conn, this.#ctx.log);
      })
      .finally(() => this.#handshakes.delete(conn));
    this.#handshakes.set(conn, handling);
  }

  async #handshake(conn: Deno.Conn, listener: Listener, refused?: string): Promise<void> {
    const remote = conn.remoteAddr as Deno.NetAddr;
    // A connection refused already takes no slot (so releases none).
    const refusal = refused ?? this.#takeConnectionSlot(listener, remote.hostname);
    const releaseSlot = () => {
      listener.connections.release();
      listener.perAddress.release(remote.hostname);
    };
    const { handshakeTimeoutMs } = this.#ctx.services.config.ws;
    // One deadline per connection for the whole handshake: until upgraded it cuts the
    // connection; after, it closes a session whose `connection` was not accepted in time.
    let onDeadline = () => closeConnection(conn, this.#ctx.log);
    const deadline = setTimeout(
      () => onDeadline(),
      refusal === undefined ? handshakeTimeoutMs : refusalReadTimeoutMs,
    );
    let upgraded = false;
    try {
      // Signaling messages are small and answered at once: no Nagle delay (TLS has no setter).
      if ("setNoDelay" in conn) (conn as Deno.TcpConn).setNoDelay(true);
      const read = await readRequestHead(conn);
      if (read === undefined) return;
      const { head, rest } = read;
      if (refusal !== undefined) throw new HandshakeError(503, refusal);
      const key = checkUpgrade(head);
      if (this.#stopping) throw new HandshakeError(503, "server stopping");
      await writeAll(conn, switchingProtocols(key));
      const socket = new ServerWebSocket(conn, {
        maxMessageBytes: this.#ctx.services.config.ws.maxHandshakeMessageBytes,
        closeTimeoutMs: closeHandshakeTimeoutMs,
      });
      const session = new SignalingSession(
        socket,
        {
          clientAddress: remote.hostname,
          clientPort: remote.port,
          serverAddress: listener.hostname,
          serverPort: listener.port,
          origin: head.headers.get("origin") ?? "",
        },
        this.#ctx,
        this.handlers,
      );
      upgraded = true;
      this.#sessions.add(session);
      socket.closed.then(releaseSlot);
      session.ended.then(() => {
        clearTimeout(deadline);
        this.#sessions.delete(session);
      });
      onDeadline = () => {
        // Only a handshake can be late; an established (or detached) session is past it.
        if (session.state !== "new" && session.state !== "connecting") return;
        session.close(
          closeCodes.policy,
          `no connection message accepted within ${handshakeTimeoutMs} ms`,
        );
      };
      socket.start(rest);
    } catch (err) {
      if (err instanceof HandshakeError) {
        // Debug only: under a flood these would bury the log; the caps count them for /health.
        this.#ctx.log.debug("upgrade refused", {
          service: listener.service,
          clientAddress: remote.hostname,
          status: err.status,
          reason: err.message,
        });
        await writeAll(conn, errorResponse(err.status, err.message, err.headers)).catch(() => {});
      } else if (!isConnectionError(err)) {
        throw err;
      }
    } finally {
      if (!upgraded) {
        clearTimeout(deadline);
        closeConnection(conn, this.#ctx.log);
        if (refusal === undefined) releaseSlot();
      }
    }
  }

  /** Takes a connection slot of the listener and of the client address; the refusal if not. */
  #takeConnectionSlot(listener: Listener, address: string): string | undefined {
    if (!listener.connections.tryAcquire()) return listener.connections.refusal();
    if (!listener.perAddress.tryAcquire(address)) {
      listener.connections.release();
      return listener.perAddress.refusal();
    }
    return undefined;
  }
}

/** True for the errors of a connection that broke or that we closed (deadline, stop). */
function isConnectionError(err: unknown): boolean {
  return err instanceof Deno.errors.BadResource || err instanceof Deno.errors.ConnectionReset ||
    err instanceof Deno.errors.BrokenPipe || err instanceof Deno.errors.Interrupted ||
    err instanceof Deno.errors.UnexpectedEof || err instanceof Deno.errors.ConnectionAborted ||
    err instanceof Deno.errors.InvalidData || err instanceof Deno.errors.TimedOut;
}
