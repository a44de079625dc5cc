/**
 * Starts and stops the listeners of one server: the REST API now; signaling, RTMP and HLS
 * plug in here as they are built. Everything started here is closed by `stop()`.
 */
import type { Config } from "./config.ts";
import type { Logger } from "./core/log.ts";
import { createServices, type Services } from "./core/services.ts";
import { createRestApp } from "./routes/http.ts";
import { operations } from "./routes/mod.ts";

/** A started server. */
export interface RunningServer {
  readonly services: Services;
  /** Port the REST API listens on (the configured one, or the ephemeral one given for 0). */
  readonly restPort: number;
  /** Stops accepting, lets in-flight requests finish, closes every listener. */
  stop(): Promise<void>;
}

/** Starts every listener of the configuration. */
export async function startServer(config: Config, log: Logger): Promise<RunningServer> {
  const services = createServices(config, log);
  const app = createRestApp({ services, operations });
  const { promise: listening, resolve } = Promise.withResolvers<number>();
  const rest = Deno.serve({
    hostname: config.bind,
    port: config.ports.rest,
    onListen: ({ port }) => resolve(port),
    onError: (err) => {
      log.error("rest listener error", { err });
      return new Response("internal error", { status: 500 });
    },
  }, app.fetch);
  const restPort = await listening;
  log.info("listening", { service: "rest", address: config.bind, port: restPort });

  let stopped: Promise<void> | undefined;
  return {
    services,
    restPort,
    stop() {
      stopped ??= (async () => {
        await rest.shutdown();
        log.info("stopped");
      })();
      return stopped;
    },
  };
}
