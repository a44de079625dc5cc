/**
 * The RTSP server's listener: accepts connections under a per-listener and a per-address
 * cap (a refused one is closed at once, as RTMP's are) and serves each with the handler the
 * server's owner makes for it. What a request means is the handler's business.
 */
import { acceptLoop } from "../../../core/accept_loop.ts";
import type { Cap, KeyedCap } from "../../../core/limits.ts";
import type { Logger } from "../../../core/log.ts";
import { type RtspConnHandler, type RtspConnTimeouts, RtspServerConn } from "./server_conn.ts";

/** Shortest interval between two logged connection refusals, in ms. */
export const refusalLogIntervalMs = 5000;

/** Caps and timeouts of one RTSP listener. */
export interface RtspServerOptions extends RtspConnTimeouts {
  readonly connections: Cap;
  readonly perAddress: KeyedCap;
}

/** The connection caps of the listener, as `/health` shows them. */
export interface RtspListenerLimits {
  readonly connections: ReturnType<Cap["toJSON"]>;
  readonly connectionsPerAddress: ReturnType<KeyedCap["toJSON"]>;
}

/** Serves RTSP on one TCP listener. */
export class RtspServer {
  #listener: Deno.Listener | undefined;
  #conns = new Set<RtspServerConn>();
  #serving = new Set<Promise<void>>();
  #handler: (conn: RtspServerConn) => RtspConnHandler;
  #log: Logger;
  #options: RtspServerOptions;
  #accepting: Promise<void> | undefined;
  #closing = false;
  #lastRefusalLogMs = -Infinity;

  /** `handler` makes the handler of each accepted connection. */
  constructor(
    handler: (conn: RtspServerConn) => RtspConnHandler,
    log: Logger,
    options: RtspServerOptions,
  ) {
    this.#handler = handler;
    this.#log = log;
    this.#options = options;
  }

  /** Starts listening; returns the port (the ephemeral one when `port` is 0). */
  listen(hostname: string, port: number): number {
    this.#listener = Deno.listen({ hostname, port, transport: "tcp" });
    this.#accepting = acceptLoop(
      this.#listener,
      (tcp) => this.#admit(tcp),
      this.#log,
      () => this.#closing,
    );
    return (this.#listener.addr as Deno.NetAddr).port;
  }

  /** The listener's connection caps: held, max, refused. */
  limitsSnapshot(): RtspListenerLimits {
    return {
      connections: this.#options.connections.toJSON(),
      connectionsPerAddress: this.#options.perAddress.toJSON(),
    };
  }

  #admit(tcp: Deno.Conn): void {
    const { connections, perAddress } = this.#options;
    const address = (tcp.remoteAddr as Deno.NetAddr).hostname;
    let refusal: string | undefined;
    if (!connections.tryAcquire()) refusal = connections.refusal();
    else if (!perAddress.tryAcquire(address)) {
      connections.release();
      refusal = perAddress.refusal();
    }
    if (refusal) {
      try {
        tcp.close();
      } catch {
        // Gone already.
      }
      this.#logRefusal(refusal, address);
      return;
    }
    try {
      (tcp as Deno.TcpConn).setNoDelay(true);
    } catch {
      // The peer is gone already; the first read ends the connection.
    }
    const conn = new RtspServerConn(tcp, this.#log, this.#options);
    this.#conns.add(conn);
    // A handler's bug costs its connection, never the process.
    const serving = Promise.resolve().then(() => conn.serve(this.#handler(conn))).catch((err) =>
      this.#log.error("rtsp connection failed", { remote: conn.remote, err })
    ).finally(() => {
      conn.close();
      connections.release();
      perAddress.release(address);
      this.#conns.delete(conn);
      this.#serving.delete(serving);
    });
    this.#serving.add(serving);
  }

  #logRefusal(reason: string, address: string): void {
    const now = performance.now();
    if (now - this.#lastRefusalLogMs < refusalLogIntervalMs) return;
    this.#lastRefusalLogMs = now;
    const { connections, perAddress } = this.#options;
    this.#log.warn("rtsp connection refused", {
      reason,
      address,
      refused: connections.refused + perAddress.refused,
    });
  }

  /** Stops listening, closes every connection and waits for them to end. */
  async close(): Promise<void> {
    this.#closing = true;
    try {
      this.#listener?.close();
    } catch {
      // Closed already.
    }
    await this.#accepting;
    for (const conn of this.#conns) conn.close();
    await Promise.allSettled([...this.#serving]);
  }
}
