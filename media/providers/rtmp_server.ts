/** The RTMP listener of a server: publishers become streams, players play any published stream. */
import type { Services } from "../../core/services.ts";
import { RtmpServer } from "../protocols/rtmp/server.ts";
import { playRtmp } from "../publishers/rtmp_play.ts";
import { RtmpIngest } from "./rtmp_ingest.ts";

/** A listening RTMP server. */
export interface RunningRtmpServer {
  /** The port listened on (the ephemeral one when configured as 0). */
  readonly port: number;
  /** Stops listening and closes every RTMP connection. */
  close(): Promise<void>;
}

/** Starts RTMP on `config.binds.rtmp` (else `config.bind`):`config.ports.rtmp`. */
export function startRtmpServer(services: Services): RunningRtmpServer {
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
