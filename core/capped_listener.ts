/**
 * A TCP listener whose connections are held under a per-listener and a per-address cap: a
 * refused connection is closed at once (refusals logged at most once per interval), an admitted
 * one is wrapped and served by its protocol, and its slots are freed when serving ends, however
 * it ends. RTMP and RTSP listen this way; what a connection says is their business.
 */
import { acceptLoop } from "./accept_loop.ts";
import type { Cap, KeyedCap } from "./limits.ts";
import type { Logger } from "./log.ts";

/** Shortest interval between two logged connection refusals, in ms. */
export const refusalLogIntervalMs = 5000;

/** The connection caps of one listener. */
export interface ListenerCaps {
  /** Connections the listener holds at once. */
  readonly connections: Cap;
  /** Connections one client address holds at once. */
  readonly perAddress: KeyedCap;
}

/** The connection caps of a listener, as `/health` shows them. */
export interface ListenerLimits {
  readonly connections: ReturnType<Cap["toJSON"]>;
  readonly connectionsPerAddress: ReturnType<KeyedCap["toJSON"]>;
}

/** What a protocol gives the listener: how to wrap an admitted connection and serve it. */
export interface CappedConnections<C extends { close(): void }> {
  /** Names the protocol in log lines ("rtmp", "rtsp"). */
  readonly protocol: string;
  /** Wraps an admitted TCP connection in the protocol's connection. */
  wrap(tcp: Deno.TcpConn): C;
  /** Serves one connection until it ends; a rejection is logged and costs only `conn`. */
  serve(conn: C): Promise<void>;
}

/** Serves one protocol on one TCP listener under its caps. */
export class CappedListener<C extends { close(): void }> {
  #listener: Deno.Listener | undefined;
  #conns = new Set<C>();
  /** Connections being served, and what `close()` waits on for them to end. */
  #serving = 0;
  #allServed: PromiseWithResolvers<void> | undefined;
  #accepting: Promise<void> | undefined;
  #closing = false;
  #lastRefusalLogMs = -Infinity;
  #caps: ListenerCaps;
  #protocol: CappedConnections<C>;
  #log: Logger;

  constructor(caps: ListenerCaps, protocol: CappedConnections<C>, log: Logger) {
    this.#caps = caps;
    this.#protocol = protocol;
    this.#log = log;
  }

  /** Starts listening; returns the port (the ephemeral one when `port` is 0). */
  listen(hostname: string, port: number): number {
    this.#listener = Deno.listen({ hostname, port, transport: "tcp" });
    this.#accepting = acceptLoop(
      this.#listener,
      (tcp) => this.#admit(tcp as Deno.TcpConn),
      this.#log,
      () => this.#closing,
    );
    return (this.#listener.addr as Deno.NetAddr).port;
  }

  /** The listener's connection caps: held, max, refused. */
  limitsSnapshot(): ListenerLimits {
    return {
      connections: this.#caps.connections.toJSON(),
      connectionsPerAddress: this.#caps.perAddress.toJSON(),
    };
  }

  /** Takes the caps' slots for a new connection and serves it, or closes it at once. */
  #admit(tcp: Deno.TcpConn): void {
    const { connections, perAddress } = this.#caps;
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
      tcp.setNoDelay(true);
    } catch {
      // The peer is gone already; the first read ends the connection.
    }
    const conn = this.#protocol.wrap(tcp);
    this.#conns.add(conn);
    this.#serving++;
    // Served from the next tick, as the accept loop expects of a handler. No async frame
    // waits on serving (that and its await were about half a KiB per idle player): two
    // callbacks on the handler's own promise end the connection however it ends.
    queueMicrotask(() => {
      let serving: Promise<void>;
      try {
        serving = this.#protocol.serve(conn);
      } catch (err) {
        serving = Promise.reject(err);
      }
      serving.then(
        () => this.#served(conn, address, undefined),
        (err) => this.#served(conn, address, err ?? new Error("rejected without a reason")),
      );
    });
  }

  /** Frees the slots of a connection whose serving ended; logs `err`, a handler's bug. */
  #served(conn: C, address: string, err: unknown): void {
    try {
      // A handler's bug costs its connection, never the process.
      if (err !== undefined) {
        this.#log.error(`${this.#protocol.protocol} connection failed`, { address, err });
      }
    } finally {
      conn.close();
      this.#caps.connections.release();
      this.#caps.perAddress.release(address);
      this.#conns.delete(conn);
      if (--this.#serving === 0) this.#allServed?.resolve();
    }
  }

  #logRefusal(reason: string, address: string): void {
    const now = performance.now();
    if (now - this.#lastRefusalLogMs < refusalLogIntervalMs) return;
    this.#lastRefusalLogMs = now;
    const { connections, perAddress } = this.#caps;
    this.#log.warn(`${this.#protocol.protocol} connection refused`, {
      reason,
      address,
      refused: connections.refused + perAddress.refused,
    });
  }

  /** Stops listening, closes every connection and waits for their serving to end. */
  async close(): Promise<void> {
    this.#closing = true;
    try {
      this.#listener?.close();
    } catch {
      // Closed already.
    }
    await this.#accepting;
    for (const conn of this.#conns) conn.close();
    if (this.#serving === 0) return;
    this.#allServed ??= Promise.withResolvers();
    await this.#allServed.promise;
  }
}
