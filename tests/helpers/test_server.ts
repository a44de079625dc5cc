/** Starts a server in-process on ephemeral ports for integration tests. */
import { type Config, configSchema } from "../../config.ts";
import { type Logger, silentLogger } from "../../core/log.ts";
import { type RunningServer, startServer } from "../../server.ts";

/** A running test server and the base URL of its REST API. */
export interface TestServer extends RunningServer {
  /** e.g. http://127.0.0.1:40123 */
  readonly restUrl: string;
  /** WebSocket signaling URL, e.g. ws://127.0.0.1:40124 */
  readonly wsUrl: string;
  /** POSTs a JSON body (or raw text) to /rest-api<path>. */
  post(path: string, body?: unknown, headers?: HeadersInit): Promise<Response>;
}

/** Configuration for tests: every port ephemeral, folders under a fresh temp dir. */
export function testConfig(overrides: Record<string, unknown> = {}): Config {
  const dir = Deno.makeTempDirSync({ prefix: "mediaserver-test-" });
  return configSchema.parse({
    ports: { rest: 0, ws: 0, wss: 0, hls: 0, rtmp: 0 },
    folders: { media: `${dir}/content`, records: `${dir}/records`, logs: `${dir}/logs` },
    ...overrides,
  });
}

/** Starts a server (logging to `log`, silent by default); the caller must `await server.stop()`. */
export async function startTestServer(
  config: Config = testConfig(),
  log: Logger = silentLogger,
): Promise<TestServer> {
  const server = await startServer(config, log);
  const restUrl = `http://${hostOf(config.binds.rest ?? config.bind)}:${server.restPort}`;
  return {
    ...server,
    restUrl,
    wsUrl: `ws://${hostOf(config.binds.ws ?? config.bind)}:${server.wsPort}`,
    post(path, body, headers) {
      const text = body === undefined
        ? undefined
        : typeof body === "string"
        ? body
        : JSON.stringify(body);
      return fetch(`${restUrl}/rest-api${path}`, {
        method: "POST",
        body: text,
        headers: text === undefined ? headers : { "Content-Type": "application/json", ...headers },
      });
    },
  };
}

/** An address as the host of a URL (IPv6 in brackets). */
function hostOf(address: string): string {
  return address.includes(":") ? `[${address}]` : address;
}

/** Runs `fn` with a fresh server and stops it afterwards, whatever happens. */
export async function withServer(
  fn: (server: TestServer) => Promise<void>,
  config?: Config,
): Promise<void> {
  const server = await startTestServer(config);
  try {
    await fn(server);
  } finally {
    await server.stop();
  }
}
