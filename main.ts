/**
 * Entry point: reads the configuration, starts the server, stops cleanly on SIGINT/SIGTERM.
 * A bad configuration stops the start with a message naming the field and exit code 2. The
 * soft open-file limit is raised to the hard one first (needs --allow-ffi; without it a
 * warning says so).
 */
import { ConfigError, loadConfig } from "./config.ts";
import { createLogger, flushLogs } from "./core/log.ts";
import { LogRing } from "./core/log_ring.ts";
import { raiseOpenFileLimit } from "./core/fd_limit.ts";
import { startServer } from "./server.ts";

/** Exit code of a start refused for its configuration. */
const configErrorExitCode = 2;

async function main(): Promise<void> {
  let config;
  try {
    config = loadConfig({ args: Deno.args, env: Deno.env.toObject() });
  } catch (err) {
    if (!(err instanceof ConfigError)) throw err;
    console.error(`configuration error: ${err.message}`);
    Deno.exit(configErrorExitCode);
  }
  // The web console (/console) shows the recent lines.
  const log = createLogger({ level: config.log.level, recent: new LogRing() });
  const fds = raiseOpenFileLimit();
  if ("error" in fds) log.warn("open-file limit left as it is", { reason: fds.error });
  else log.info("open-file limit", { ...fds });
  // A socket error surfacing as a rejection nobody awaits or an exception thrown in a
  // callback (a listener failing at the descriptor limit, a peer resetting mid-write) must
  // not end a server holding every other client: log it instead of exiting.
  globalThis.addEventListener("unhandledrejection", (event) => {
    event.preventDefault();
    log.error("unhandled rejection", { err: event.reason });
  });
  globalThis.addEventListener("error", (event) => {
    event.preventDefault();
    log.error("uncaught exception", { err: event.error });
  });
  let server;
  try {
    server = await startServer(config, log);
  } catch (err) {
    // Every listener is needed: one that cannot open (a port in use, a privileged port) ends
    // the start, with the listener and its port named, rather than a server without it.
    log.error("cannot start", { err });
    flushLogs();
    Deno.exit(1);
  }
  const stop = async (signal: string) => {
    log.info("shutting down", { signal });
    await server.stop();
    flushLogs();
    Deno.exit(0);
  };
  Deno.addSignalListener("SIGINT", () => stop("SIGINT"));
  Deno.addSignalListener("SIGTERM", () => stop("SIGTERM"));
}

if (import.meta.main) await main();
