/** Starts a server in-process on ephemeral ports for integration tests. */
import { type Config, configSchema } from "../../config.ts";
import { type Logger, silentLogger } from "../../core/log.ts";
import { operations } from "../../routes/mod.ts";
import { type RunningServer, startServer } from "../../server.ts";
import type { ServiceOverrides } from "../../core/services.ts";

/** A running test server and the base URL of its REST API. */
export interface TestServer extends RunningServer {
  /** e.g. http://127.0.0.1:40123 */
  readonly restUrl: string;
  /** WebSocket signaling URL, e.g. ws://127.0.0.1:40124 */
  readonly wsUrl: string;
  /** Base URL of HLS, e.g. http://127.0.0.1:40125 */
  readonly hlsUrl: string;
  /** Base URL of the RTSP server, e.g. rtsp://127.0.0.1:40126 (a stream is `${rtspUrl}/name`). */
  readonly rtspUrl: string;
  /**
   * POSTs a JSON body (or raw text) to /rest-api<path>. A 200 answer is checked against the
   * operation's declared response schema first (throws on a mismatch), so every test that
   * calls an operation also checks that the OpenAPI document tells the truth about it.
   */
  post(path: string, body?: unknown, headers?: HeadersInit): Promise<Response>;
}

/** Configuration for tests: every port ephemeral, folders under a fresh temp dir. */
export function testConfig(overrides: Record<string, unknown> = {}): Config {
  const dir = Deno.makeTempDirSync({ prefix: "mediaserver-test-" });
  return configSchema.parse({
    ports: { rest: 0, ws: 0, wss: 0, hls: 0, rtmp: 0, rtsp: 0, srt: 0, sip: 0, cdn: 0 },
    folders: { media: `${dir}/content`, records: `${dir}/records`, logs: `${dir}/logs` },
    ...overrides,
  });
}

/** Starts a server (logging to `log`, silent by default); the caller must `await server.stop()`. */
export async function startTestServer(
  config: Config = testConfig(),
  log: Logger = silentLogger,
  overrides: ServiceOverrides = {},
): Promise<TestServer> {
  const server = await startServer(config, log, overrides);
  const restUrl = `http://${hostOf(config.binds.rest ?? config.bind)}:${server.restPort}`;
  return {
    ...server,
    restUrl,
    wsUrl: `ws://${hostOf(config.binds.ws ?? config.bind)}:${server.wsPort}`,
    hlsUrl: `http://${hostOf(config.binds.hls ?? config.bind)}:${server.hlsPort}`,
    rtspUrl: `rtsp://${hostOf(config.binds.rtsp ?? config.bind)}:${server.rtspPort}`,
    async post(path, body, headers) {
      const text = body === undefined
        ? undefined
        : typeof body === "string"
        ? body
        : JSON.stringify(body);
      const res = await fetch(`${restUrl}/rest-api${path}`, {
        method: "POST",
        body: text,
        headers: text === undefined ? headers : { "Content-Type": "application/json", ...headers },
      });
      if (res.status !== 200 || !operationsByPath.has(path)) return res;
      const answer = await res.text();
      checkResponse(path, answer);
      return new Response(answer, { status: res.status, headers: res.headers });
    },
  };
}

const operationsByPath = new Map(operations.map((op) => [op.path, op]));

/**
 * Throws unless `answer` (a 200 body of the operation at `path`) parses with the operation's
 * response schema and has no field the schema leaves out; an operation declared without a
 * response must answer an empty body.
 */
export function checkResponse(path: string, answer: string): void {
  const op = operationsByPath.get(path);
  if (!op) throw new Error(`no operation at ${path}`);
  if (op.response === null) {
    if (answer !== "") throw new Error(`${path} declares no response but answered ${answer}`);
    return;
  }
  if (answer === "") return;
  const value: unknown = JSON.parse(answer);
  const parsed = op.response.safeParse(value);
  if (!parsed.success) {
    throw new Error(
      `${path} answered what its response schema refuses: ${
        parsed.error.issues.map((issue) => `${issue.path.join(".")}: ${issue.message}`).join("; ")
      }\n${answer.slice(0, 2000)}`,
    );
  }
  const extra = undeclaredFields(value, parsed.data, "");
  if (extra.length > 0) {
    throw new Error(`${path} answered fields its response schema lacks: ${extra.join(", ")}`);
  }
}

/** Dotted paths of the fields of `raw` that parsing dropped (the schema does not declare them). */
function undeclaredFields(raw: unknown, parsed: unknown, at: string): string[] {
  if (Array.isArray(raw) && Array.isArray(parsed)) {
    return raw.flatMap((item, i) => undeclaredFields(item, parsed[i], `${at}${i}.`));
  }
  if (!isObject(raw) || !isObject(parsed)) return [];
  return Object.keys(raw).flatMap((key) =>
    key in parsed ? undeclaredFields(raw[key], parsed[key], `${at}${key}.`) : [at + key]
  );
}

function isObject(value: unknown): value is Record<string, unknown> {
  return typeof value === "object" && value !== null && !Array.isArray(value);
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
