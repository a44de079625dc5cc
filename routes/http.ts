/**
 * The HTTP face of the management API: method and content-type checks, JSON body parsing,
 * schema validation, CORS, the request log, and the one place where typed errors become
 * HTTP statuses.
 */
import { turns } from "../core/turn_budget.ts";
import { Hono } from "hono";
import type { z } from "zod";
import { BadRequestError, MediaServerError, NotImplementedError } from "../core/errors.ts";
import { pathOf } from "../core/http_listener.ts";
import type { Logger } from "../core/log.ts";
import type { InflightTracker } from "../core/inflight.ts";
import type { Services } from "../core/services.ts";
import { serverVersion } from "../core/version.ts";
import type { Operation, OperationContext } from "./operation.ts";
import { buildOpenApi, openApiPath } from "./openapi.ts";
import { clientRecordsPrefix, serveClientRecord } from "./client_records.ts";
import { createRestAccess } from "./rest_access.ts";
import { registerWhip } from "./whip.ts";
import { healthOf, type ListenerFigures } from "./health.ts";
import { redactPaths, redactText } from "../core/redact.ts";
import { createMetrics, metricsPath } from "./metrics.ts";
import { createRestTimer } from "./rest_timing.ts";
import { isConsoleFile, registerConsole } from "./console.ts";

/** Prefix of every management operation. */
export const restPrefix = "/rest-api";

/** Seconds a browser may cache a preflight answer. */
const preflightMaxAgeSeconds = 86_400;

/** Options of createRestApp. */
export interface RestAppOptions {
  services: Services;
  operations: readonly Operation[];
  /** Connection caps of the listeners, for `/health`. */
  listenerFigures?: ListenerFigures;
  /**
   * Counts the requests in flight so a stop can let them finish (503 while draining); counted
   * inside the handler, which spares a wrapping async layer per request.
   */
  inflight?: InflightTracker;
}

/** An operation's route: the operation and its request line's method and path members. */
interface OperationRoute {
  op: Operation;
  /** `"method":"POST","path":"/rest-api/..."` (and GET's), kept for every request line. */
  postMembers: string;
  getMembers: string;
}

/**
 * The request handler serving /health, the OpenAPI document and every operation, with a log
 * line per request. Access checks (auth, Host) run first, for every route; CORS headers go
 * into each response and the log wraps the app from the outside: a Hono middleware awaiting
 * `next()` costs about a quarter of the throughput.
 */
export function createRestHandler(
  { services, operations, listenerFigures, inflight }: RestAppOptions,
): (req: Request) => Promise<Response> {
  const app = createRestApp({ services, operations, listenerFigures });
  // A line per request (the console's own polling included) would fill the recent-lines ring.
  const log = services.log.child({ component: "rest" }).unkept();
  // An operation's request line is written from kept JSON members: building the fields'
  // object and stringifying it cost more than the rest of the line.
  const requestLine = log.memberWriter("info", "request", ["method", "path", "status", "ms"]);
  const access = createRestAccess(services.config);
  const time = services.config.metrics.enabled
    ? createRestTimer(restPrefix, operations)
    : undefined;
  const maxBodyBytes = services.config.rest.maxBodyBytes;
  // Operations are answered without the router when the path and method match exactly: its
  // dispatch cost as much as the rest of a small request. Other methods (HEAD, OPTIONS, the
  // 405s) and every other route go through the app. Each await on the way costs a turn of
  // the microtask queue, so a request goes through one async function and awaits only what
  // is pending: its body, a later turn when the slice is spent, an asynchronous handler.
  const byPath = new Map<string, OperationRoute>(operations.map((op) => {
    const path = JSON.stringify(restPrefix + op.path);
    return [restPrefix + op.path, {
      op,
      postMembers: `"method":"POST","path":${path}`,
      getMembers: `"method":"GET","path":${path}`,
    }];
  }));
  const ctx: OperationContext = { services };
  const errorLog = services.log.child({ component: "rest" });
  return async (req) => {
    const started = performance.now();
    if (inflight && !inflight.enter()) return inflight.refusal();
    try {
      const method = req.method;
      const path = pathOf(req.url);
      // The console's files hold no secret; its page asks for credentials itself.
      let res = isConsoleFile(method, path) ? undefined : access.refuse(req, method, path);
      const route = byPath.get(path);
      if (res) {
        // Refused before any route ran.
      } else if (route && (method === "POST" || (method === "GET" && route.op.allowGet))) {
        try {
          const raw = method === "GET" ? undefined : await operationBody(req, maxBodyBytes);
          // A burst of operations runs in slices, /health (not an operation) between them.
          const turn = turns.admit();
          if (turn) await turn;
          const answer = runOperation(route.op, raw, ctx);
          res = answer instanceof Promise ? await answer : answer;
        } catch (err) {
          res = errorAnswer(err, path, errorLog);
        }
      } else {
        res = await app.fetch(req);
      }
      access.addCors(req, method, res);
      const ms = performance.now() - started;
      const status = res.status;
      time?.(path, status, ms / 1000);
      const roundedMs = Math.round(ms * 100) / 100;
      if (route && requestLine) {
        const members = method === "POST"
          ? route.postMembers
          : method === "GET"
          ? route.getMembers
          : `"method":${JSON.stringify(method)},"path":${JSON.stringify(path)}`;
        requestLine(`${members},"status":${status},"ms":${roundedMs}`);
      } else if (log.enabled("info")) {
        log.info("request", { method, path, status, ms: roundedMs });
      }
      return res;
    } finally {
      inflight?.leave();
    }
  };
}

/**
 * An operation's JSON body (undefined for none). A body declared as exactly
 * `application/json` is parsed by the runtime as it takes it (`req.json()`, a third of the
 * cost of reading it as text first); other bodies go through `readText` and `parseJsonBody`.
 */
async function operationBody(req: Request, maxBytes: number): Promise<unknown> {
  const declared = req.headers.get("Content-Length");
  if (
    declared !== null && declared !== "0" &&
    req.headers.get("Content-Type") === "application/json"
  ) {
    if (Number(declared) > maxBytes) throw new PayloadTooLargeError(maxBytes);
    try {
      return await req.json();
    } catch (err) {
      if (err instanceof SyntaxError) throw malformedJson(err);
      throw err;
    }
  }
  return parseJsonBody(req, await readText(req, maxBytes));
}

/** Runs an operation: its JSON body (none for GET) checked against its schema, then its handler. */
async function answerOperation(
  op: Operation,
  req: Request,
  method: string,
  ctx: OperationContext,
): Promise<Response> {
  const raw = method === "GET"
    ? undefined
    : await operationBody(req, ctx.services.config.rest.maxBodyBytes);
  const turn = turns.admit();
  if (turn) await turn;
  return await runOperation(op, raw, ctx);
}

/**
 * An operation's answer to a parsed body: the body checked against its schema, then its
 * handler; a promise only when the handler's result is one.
 */
function runOperation(
  op: Operation,
  raw: unknown,
  ctx: OperationContext,
): Response | Promise<Response> {
  const body = parseBody(op.body, raw ?? {});
  if (!op.handle) throw new NotImplementedError(op.path);
  const result = op.handle(body, ctx);
  if (result instanceof Promise) return result.then((value) => operationAnswer(op, value));
  return operationAnswer(op, result);
}

/** The HTTP answer of an operation's result. */
function operationAnswer(op: Operation, result: unknown): Response {
  if (op.response === null || result === undefined) {
    return new Response(null, { status: 200, headers: { "Content-Type": "application/json" } });
  }
  return Response.json(result);
}

/** The one place where a thrown error becomes an HTTP answer (and, when it is a failure, a log line). */
function errorAnswer(err: unknown, path: string, log: Logger): Response {
  if (err instanceof MediaServerError) {
    // A cap's refusal (503) is the server protecting itself, not a failure: a warning.
    if (err.status === 503) log.warn("operation refused", { message: err.message });
    else if (err.status >= 500 && err.status !== 501) log.error("operation failed", { err });
    return Response.json(clientSafe(err.toJSON()), { status: err.status });
  }
  log.error("unexpected error", { path, err, stack: (err as Error).stack });
  return Response.json(
    clientSafe({ error: "internal error", message: String((err as Error).message) }),
    { status: 500 },
  );
}

/** Builds the Hono app; the CORS headers are added around it. */
function createRestApp({ services, operations, listenerFigures }: RestAppOptions): Hono {
  const app = new Hono();
  const log = services.log.child({ component: "rest" });
  const startedAt = Date.now();
  const ctx: OperationContext = { services };

  app.get("/health", (c) => c.json(healthOf(services, startedAt, listenerFigures), 200));

  if (services.config.metrics.enabled) {
    const metrics = createMetrics(services);
    app.get(
      metricsPath,
      async (c) => c.body(await metrics.text(), 200, { "Content-Type": metrics.contentType }),
    );
  }

  const openApi = buildOpenApi(operations, serverVersion);
  app.get(openApiPath, (c) => c.json(openApi, 200));
  // GET also answers HEAD in Hono; the handler leaves the body out itself.
  app.get(
    `${clientRecordsPrefix}*`,
    (c) => serveClientRecord(c.req.raw, services.config.folders.records),
  );

  for (const op of operations) {
    const path = restPrefix + op.path;
    const methods = op.allowGet ? ["GET", "POST"] : ["POST"];
    app.on(methods, path, (c) => answerOperation(op, c.req.raw, c.req.method, ctx));
    app.options(path, (c) =>
      c.body(null, 204, {
        "Allow": [...methods, "OPTIONS"].join(", "),
        "Access-Control-Allow-Methods": [...methods, "OPTIONS"].join(", "),
        "Access-Control-Allow-Headers": c.req.header("Access-Control-Request-Headers") ??
          "Content-Type",
        "Access-Control-Max-Age": String(preflightMaxAgeSeconds),
      }));
    app.all(path, (c) =>
      c.json(
        { error: "method not allowed", message: `${op.path} answers ${methods.join(", ")}` },
        405,
        { "Allow": methods.join(", ") },
      ));
  }

  registerWhip(app, services);
  registerConsole(app, services);

  app.notFound((c) =>
    c.json(
      { error: "not found", message: `no operation at ${c.req.method} ${c.req.path}` },
      404,
    )
  );
  app.onError((err, c) => errorAnswer(err, c.req.path, log));
  return app;
}

/**
 * An error body as a client may see it: URIs in its message without their secrets, and no
 * absolute path of the server's disk (fs errors name the file they failed on).
 */
function clientSafe(body: Record<string, unknown>): Record<string, unknown> {
  return typeof body.message === "string"
    ? { ...body, message: redactPaths(redactText(body.message)) }
    : body;
}

/** The body's text as JSON: empty means no parameters; another media type is a 415. */
function parseJsonBody(req: Request, text: string): unknown {
  // An empty body carries no parameters whatever its declared type (fetch labels "" text/plain).
  if (text.trim() === "") return undefined;
  const contentType = req.headers.get("Content-Type") ?? undefined;
  if (contentType === undefined || !isJsonUtf8(contentType)) {
    throw new UnsupportedMediaTypeError(contentType ?? "(none)");
  }
  try {
    return JSON.parse(text);
  } catch (err) {
    throw malformedJson(err as Error);
  }
}

/** The 400 of a body that is not JSON. */
function malformedJson(err: Error): BadRequestError {
  return new BadRequestError("body", `malformed JSON: ${err.message}`);
}

/** Reads a body as UTF-8 text, refusing more than `maxBytes` without buffering the excess. */
export async function readText(req: Request, maxBytes: number): Promise<string> {
  const declared = Number(req.headers.get("Content-Length") ?? 0);
  if (declared > maxBytes) throw new PayloadTooLargeError(maxBytes);
  // Reading `req.body` first would make a stream of it, which halves the throughput of small
  // requests: a declared length within the limit is read whole.
  if (declared > 0) {
    const text = await req.text();
    if (text.length > maxBytes) throw new PayloadTooLargeError(maxBytes);
    return text;
  }
  if (!req.body) return "";
  const chunks: Uint8Array[] = [];
  let size = 0;
  for await (const chunk of req.body) {
    size += chunk.byteLength;
    if (size > maxBytes) throw new PayloadTooLargeError(maxBytes);
    chunks.push(chunk);
  }
  const all = new Uint8Array(size);
  let offset = 0;
  for (const chunk of chunks) {
    all.set(chunk, offset);
    offset += chunk.byteLength;
  }
  return new TextDecoder().decode(all);
}

/** The body is larger than the configured limit. */
class PayloadTooLargeError extends MediaServerError {
  constructor(maxBytes: number) {
    super(413, "payload too large", `body exceeds ${maxBytes} bytes`);
  }
}

/** True for `application/json`, optionally with a UTF-8 charset parameter. */
function isJsonUtf8(contentType: string): boolean {
  if (contentType === "application/json") return true; // what nearly every client sends
  const [type, ...params] = contentType.split(";").map((p) => p.trim().toLowerCase());
  if (type !== "application/json") return false;
  return params.every((p) => {
    const [name, value] = p.split("=").map((s) => s.trim().replace(/^"|"$/g, ""));
    return name !== "charset" || value === "utf-8" || value === "utf8";
  });
}

/** The body is not JSON. */
class UnsupportedMediaTypeError extends MediaServerError {
  constructor(contentType: string) {
    super(
      415,
      "unsupported media type",
      `Content-Type must be application/json (UTF-8), got ${contentType}`,
    );
  }
}

/** Validates a body against an operation's schema; the first issue becomes a 400 naming its field. */
export function parseBody<S extends z.ZodType>(schema: S, body: unknown): z.output<S> {
  const result = schema.safeParse(body, { reportInput: true });
  if (result.success) return result.data;
  const issue = result.error.issues[0];
  let path = issue.path.map(String);
  let message = issue.message;
  if (issue.code === "unrecognized_keys") {
    path = [...path, issue.keys[0]];
    message = "unknown field";
  } else if (path.length > 0 && "input" in issue && issue.input === undefined) {
    message = "required field is missing";
  }
  throw new BadRequestError(path.join(".") || "body", message);
}
