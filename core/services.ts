/**
 * The services REST routes and signaling call into. One instance per server; tests build
 * their own.
 */
import type { Config } from "../config.ts";
import type { Logger } from "./log.ts";
import { StreamRegistry } from "./stream_registry.ts";

/** Registries and services of one server. */
export interface Services {
  readonly config: Config;
  readonly log: Logger;
  readonly streams: StreamRegistry;
}

/** Builds the services of a server. */
export function createServices(config: Config, log: Logger): Services {
  return { config, log, streams: new StreamRegistry() };
}
