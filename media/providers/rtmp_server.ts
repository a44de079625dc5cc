/** The RTMP listener of a server: publishers become streams, players play any published stream. */
import type { Config } from "../../config.ts";
import type { Logger } from "../../core/log.ts";
import type { CodecEngine } from "../engine/engine.ts";
import { RtmpServer } from "../protocols/rtmp/server.ts";
import { playRtmp } from "../publishers/rtmp_play.ts";
import type { StreamDirectory } from "../stream_record.ts";
import { RtmpIngest } from "./rtmp_ingest.ts";

/** What the RTMP listener needs of the server (the server's services satisfy it). */
export interface RtmpServerDeps {
  log: Logger;
  streams: StreamDirectory;
  /** Converts Opus audio to AAC for players. */
  engine: CodecEngine;
  config: Pick<Config, "bind" | "binds" | "ports">;
}

/** A listening RTMP server. */
export interface RunningRtmpServer {
  /** The port listened on (the ephemeral one when configured as 0). */
  readonly port: number;
  /** Stops listening and closes every RTMP connection. */
  close(): Promise<void>;
}

/** Starts RTMP on `config.binds.rtmp` (else `config.bind`):`config.ports.rtmp`. */
export function startRtmpServer(services: RtmpServerDeps): RunningRtmpServer {
  const log = services.log.child({ component: "rtmp" });
  const ingest = new RtmpIngest(services.streams, log);
  const server = new RtmpServer({
    publish: (name, _app, conn) => ingest.publish(name, conn),
    play: (name, _app, target) =>
      playRtmp({ streams: services.streams, engine: services.engine, log }, name, target),
  }, log);
  const address = services.config.binds.rtmp ?? services.config.bind;
  const port = server.listen(address, services.config.ports.rtmp);
  log.info("listening", { service: "rtmp", address, port });
  return { port, close: () => server.close() };
}
