/**
 * The RTSP server's listener: accepts connections under a per-listener and a per-address
 * cap (a refused one is closed at once, as RTMP's are) and serves each with the handler the
 * server's owner makes for it. What a request means is the handler's business.
 */
import {
  CappedListener,
  type ListenerCaps,
  type ListenerLimits,
} from "../../../core/capped_listener.ts";
import type { Logger } from "../../../core/log.ts";
import { type RtspConnHandler, type RtspConnTimeouts, RtspServerConn } from "./server_conn.ts";

/** Caps and timeouts of one RTSP listener. */
export interface RtspServerOptions extends RtspConnTimeouts, ListenerCaps {}

/** Serves RTSP on one TCP listener. */
export class RtspServer {
  #listener: CappedListener<RtspServerConn>;

  /** `handler` makes the handler of each accepted connection. */
  constructor(
    handler: (conn: RtspServerConn) => RtspConnHandler,
    log: Logger,
    options: RtspServerOptions,
  ) {
    this.#listener = new CappedListener(options, {
      protocol: "rtsp",
      wrap: (tcp) => new RtspServerConn(tcp, log, options),
      serve: (conn) => conn.serve(handler(conn)),
    }, log);
  }

  /** Starts listening; returns the port (the ephemeral one when `port` is 0). */
  listen(hostname: string, port: number): number {
    return this.#listener.listen(hostname, port);
  }

  /** The listener's connection caps: held, max, refused. */
  limitsSnapshot(): ListenerLimits {
    return this.#listener.limitsSnapshot();
  }

  /** Stops listening, closes every connection and waits for them to end. */
  close(): Promise<void> {
    return this.#listener.close();
  }
}
