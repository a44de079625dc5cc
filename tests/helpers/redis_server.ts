/** A `redis-server` of its own for a test or a bench, on 127.0.0.1. */
import { freePort } from "./process.ts";

/** Time redis-server gets to accept connections after its start, in ms. */
const listenTimeoutMs = 5_000;
/** The cluster state lives in memory only: a restarted server starts empty. */
const noPersistence = ["--save", "", "--appendonly", "no"];

/**
 * A running `redis-server` without persistence (`--save "" --appendonly no`): killed and
 * restarted, it comes back empty on the same port, as a cluster store's outage does.
 */
export class RedisServer {
  readonly port: number;
  /** `redis://127.0.0.1:<port>`, for a client or MEDIASERVER_CLUSTER_REDIS_URL. */
  readonly url: string;
  readonly #extraArgs: string[];
  #child?: Deno.ChildProcess;

  /** A server to start on `port` (a free one by default) with `extraArgs` after the usual ones. */
  constructor(options: { port?: number; extraArgs?: string[] } = {}) {
    this.port = options.port ?? freePort();
    this.url = `redis://127.0.0.1:${this.port}`;
    this.#extraArgs = options.extraArgs ?? [];
  }

  /**
   * Starts redis-server, also again on the same port after a kill (it starts empty), and
   * resolves once it accepts connections. Throws naming the Debian package when redis-server
   * is not installed.
   */
  async start(): Promise<void> {
    if (this.#child) throw new Error(`redis-server on ${this.port} is running`);
    try {
      this.#child = new Deno.Command("redis-server", {
        args: ["--bind", "127.0.0.1", "--port", String(this.port), ...noPersistence]
          .concat(this.#extraArgs),
        stdin: "null",
        stdout: "null",
        stderr: "null",
      }).spawn();
    } catch (error) {
      if (error instanceof Deno.errors.NotFound) {
        throw new Error("redis-server is missing: install the Debian package redis-server");
      }
      throw error;
    }
    const started = performance.now();
    for (;;) {
      try {
        (await Deno.connect({ hostname: "127.0.0.1", port: this.port })).close();
        return;
      } catch {
        if (performance.now() - started > listenTimeoutMs) {
          await this.kill();
          throw new Error(
            `redis-server did not listen on ${this.port} within ${listenTimeoutMs} ms`,
          );
        }
        await new Promise((resolve) => setTimeout(resolve, 20));
      }
    }
  }

  /**
   * Kills it with SIGKILL (a crash; there is nothing to persist) and waits for the exit; does
   * nothing when it is not running.
   */
  async kill(): Promise<void> {
    const child = this.#child;
    if (!child) return;
    this.#child = undefined;
    try {
      child.kill("SIGKILL");
    } catch {
      // Exited already.
    }
    await child.status;
  }

  /** The answer of one `redis-cli` command, trimmed. */
  async cli(...args: string[]): Promise<string> {
    const out = await new Deno.Command("redis-cli", {
      args: ["-h", "127.0.0.1", "-p", String(this.port), ...args],
      stdin: "null",
    }).output();
    return new TextDecoder().decode(out.stdout).trim();
  }
}

/** A started RedisServer (see its constructor for `options`). */
export async function startRedis(
  options: { port?: number; extraArgs?: string[] } = {},
): Promise<RedisServer> {
  const server = new RedisServer(options);
  await server.start();
  return server;
}
