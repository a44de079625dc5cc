/**
 * The WebSocket signaling listeners (WS, and WSS when a certificate is configured): upgrade
 * every request on `/` to a session, run the shared keepalive, and close everything on stop.
 */
import { drainTimeoutMs } from "../core/inflight.ts";
import type { Services } from "../core/services.ts";
import { registerConnection } from "./connection.ts";
import { registerData } from "./data.ts";
import { HandlerTable, type SignalingContext } from "./handlers.ts";
import { KeepAlive, registerKeepAlive } from "./keepalive.ts";
import { registerPushLogs } from "./push_logs.ts";
import { closeCodes, SignalingSession } from "./session.ts";
import { registerWebRtcStreams } from "./webrtc_streams.ts";

/** The handlers of every message built so far. */
export function defaultHandlers(): HandlerTable {
  const handlers = new HandlerTable();
  registerConnection(handlers);
  registerKeepAlive(handlers);
  registerData(handlers);
  registerPushLogs(handlers);
  registerWebRtcStreams(handlers);
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

/** Every signaling listener of a server and the sessions they carry. */
export class SignalingServer {
  /** Message handlers; later modules register theirs here before clients connect. */
  readonly handlers: HandlerTable;
  readonly #ctx: SignalingContext;
  readonly #sessions = new Set<SignalingSession>();
  readonly #listeners: Deno.HttpServer[] = [];
  readonly #keepAlive: KeepAlive;
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

  /** Opens a listener and resolves with its port. */
  async listen(options: ListenOptions): Promise<number> {
    const tls = options.tls && {
      cert: await Deno.readTextFile(options.tls.certFile),
      key: await Deno.readTextFile(options.tls.keyFile),
    };
    const { promise: listening, resolve } = Promise.withResolvers<number>();
    const service = tls ? "wss" : "ws";
    let port = options.port;
    const listener = Deno.serve({
      hostname: options.hostname,
      port: options.port,
      ...tls,
      onListen: (addr) => resolve(addr.port),
      onError: (err) => {
        this.#ctx.log.error("signaling listener error", {
          service,
          err,
          stack: (err as Error).stack,
        });
        return new Response("internal error", { status: 500 });
      },
    }, (req, info) => this.#accept(req, info, options.hostname, port));
    this.#listeners.push(listener);
    port = await listening;
    this.#keepAlive.start();
    this.#ctx.log.info("listening", { service, address: options.hostname, port });
    return port;
  }

  /** Closes every session (their streams end), waits for them, then closes the listeners. */
  async stop(): Promise<void> {
    this.#stopping = true;
    this.#keepAlive.stop();
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
    await Promise.all(this.#listeners.map((l) => l.shutdown()));
    await this.#ctx.services.hooks.drain();
  }

  #accept(req: Request, info: Deno.ServeHandlerInfo, serverAddress: string, serverPort: number) {
    if (this.#stopping) return new Response("server stopping", { status: 503 });
    if (req.headers.get("upgrade")?.toLowerCase() !== "websocket") {
      return new Response("WebSocket signaling endpoint\n", {
        status: 426,
        headers: { "Upgrade": "websocket" },
      });
    }
    // Read before the upgrade: the request (headers, remoteAddr) is gone after it.
    const remote = info.remoteAddr as Deno.NetAddr;
    const origin = req.headers.get("origin") ?? "";
    // Our own ping/pong (config.keepAlive) is the liveness check; Deno's would double it.
    const { socket, response } = Deno.upgradeWebSocket(req, { idleTimeout: 0 });
    const session = new SignalingSession(
      socket,
      {
        clientAddress: remote.hostname,
        clientPort: remote.port,
        serverAddress,
        serverPort,
        origin,
      },
      this.#ctx,
      this.handlers,
    );
    this.#sessions.add(session);
    session.ended.then(() => this.#sessions.delete(session));
    return response;
  }
}
