/**
 * The RTSP server of a server: every published stream is played at
 * `rtsp://host:<ports.rtsp>/<stream>` (RFC 2326) over TCP interleaved channels or UDP, and
 * taken from publishers (ANNOUNCE/RECORD), with connections capped per listener and per
 * address as RTMP's are and, with `rtsp.serverUsers`, Digest or Basic authentication.
 */
import type { Config } from "../../config.ts";
import { Cap, KeyedCap } from "../../core/limits.ts";
import type { Logger } from "../../core/log.ts";
import type { ListenerLimits } from "../../core/capped_listener.ts";
import { RtspServer } from "../protocols/rtsp/server.ts";
import type { RtspConnTimeouts } from "../protocols/rtsp/server_conn.ts";
import { RtspServerAuth } from "../protocols/rtsp/server_auth.ts";
import type { ViewerDirectory } from "../stream_record.ts";
import { RtspSession } from "./rtsp_session.ts";

/** What the RTSP server needs of the server (the server's services satisfy it). */
export interface RtspServerDeps {
  log: Logger;
  streams: ViewerDirectory;
  config: Pick<Config, "bind" | "binds" | "ports" | "limits" | "media" | "rtsp" | "cdn">;
}

/** Options of startRtspServer for tests. */
export interface RtspServerTestOptions extends RtspConnTimeouts {
  /** Overrides the session timeout, in seconds. */
  sessionTimeoutSec?: number;
}

/** A listening RTSP server. */
export interface RunningRtspServer {
  /**
   * The port listened on (the ephemeral one when configured as 0); 0 when the server had no
   * permission to listen on the configured port.
   */
  readonly port: number;
  /** The listener's connection caps, for `/health`. */
  limitsSnapshot(): ListenerLimits;
  /** Stops listening and ends every session. */
  close(): Promise<void>;
}

/** Starts RTSP on `config.binds.rtsp` (else `config.bind`):`config.ports.rtsp`. */
export function startRtspServer(
  deps: RtspServerDeps,
  options: RtspServerTestOptions = {},
): RunningRtspServer {
  const log = deps.log.child({ component: "rtsp-server" });
  const { config } = deps;
  const address = config.binds.rtsp ?? config.bind;
  const sessionDeps = {
    streams: deps.streams,
    udp: {
      hostname: config.binds.media ?? config.bind,
      min: config.media.udpPortMin,
      max: config.media.udpPortMax,
    },
    log,
    auth: new RtspServerAuth(config.rtsp.serverUsers),
    sessionTimeoutSec: options.sessionTimeoutSec,
    aclPropertyName: config.cdn.aclPropertyName,
  };
  const server = new RtspServer((conn) => new RtspSession(sessionDeps, conn), log, {
    connections: new Cap("rtsp connections", config.limits.connectionsPerListener),
    perAddress: new KeyedCap("rtsp connections per address", config.limits.connectionsPerAddress),
    requestTimeoutMs: options.requestTimeoutMs,
    writeTimeoutMs: options.writeTimeoutMs,
  });
  let port: number;
  try {
    port = server.listen(address, config.ports.rtsp);
  } catch (err) {
    if (!(err instanceof Deno.errors.PermissionDenied)) throw err;
    // Port 554 needs privileges most users do not run with: the rest of the server is
    // still of use, so it starts without RTSP and says why.
    log.error("rtsp server not started: no permission to listen; set ports.rtsp (e.g. 8554)", {
      address,
      port: config.ports.rtsp,
    });
    return { port: 0, limitsSnapshot: () => server.limitsSnapshot(), close: () => server.close() };
  }
  log.info("listening", { service: "rtsp", address, port });
  return { port, limitsSnapshot: () => server.limitsSnapshot(), close: () => server.close() };
}
