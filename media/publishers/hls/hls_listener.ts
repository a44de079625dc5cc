/**
 * The HLS listener: a small HTTP/1.1 server (RFC 9112) on a TCP listener, for the requests a
 * player makes (GET, HEAD, OPTIONS; no request bodies), with keep-alive and pipelining.
 *
 * Why not Deno.serve: 1,000 keep-alive viewers of 260 KB segments got ~11k requests/s from
 * Deno.serve on this machine, and ~29k from one `write` of a prebuilt response per request
 * (nginx with sendfile: ~32k). So a response's bytes (status line, headers, body) are built
 * once per body and kept while its status, headers (the same array) and Date second stay; a
 * response split in two writes, or copied per request, was back at Deno.serve's rate. Text
 * bodies (playlists) are encoded once per string, so a playlist's response is kept too.
 */
import type { Logger } from "../../../core/log.ts";

/** A request as the HLS handler sees it. */
export interface HlsHttpRequest {
  method: string;
  /** The path of the request target, as sent (no dot-segment normalization). */
  path: string;
  /** The query of the request target, without `?`; empty when none. */
  query: string;
  /** A request header by its lower-case name (repeated ones joined with `, `). */
  header(name: string): string | undefined;
  remote: Deno.NetAddr;
}

/** A response of the HLS handler; Content-Length, Date and Connection are added. */
export interface HlsHttpReply {
  status: number;
  headers: readonly (readonly [string, string])[];
  /**
   * Bytes kept as they are while served (a segment), or text; the response is kept per body,
   * so a handler answering with the same body, status and `headers` array is answered fast.
   */
  body: Uint8Array | string;
}

/** The request handler of the listener. */
export type HlsHttpHandler = (req: HlsHttpRequest) => Promise<HlsHttpReply>;

/** Where and what to serve. */
export interface HlsListenerOptions {
  hostname: string;
  /** 0 picks an ephemeral port. */
  port: number;
  handler: HlsHttpHandler;
  log: Logger;
}

/** Longest request head (request line and headers), in bytes; larger ones get a 431. */
export const maxHeadBytes = 16 * 1024;
/** Longest request body read and thrown away, in bytes; larger ones get a 413. */
const maxDiscardedBodyBytes = 64 * 1024;
/** A connection waiting this long for (the rest of) a request is closed, in ms. */
export const idleTimeoutMs = 65_000;
/** Longest a shutdown waits for answers being written (a client not reading), in ms. */
const shutdownGraceMs = 2_000;
/** How often idle connections are looked for, in ms. */
const idleSweepMs = 5_000;
/** Text bodies kept encoded (playlists change every part or segment); beyond, all are dropped. */
const maxEncodedTexts = 256;
/** Longest text body kept encoded, in characters (bounds the memory of the kept ones). */
const maxEncodedTextChars = 64 * 1024;
/** First pause before accepting again after accept failed (no descriptor left), in ms. */
const acceptRetryFirstMs = 100;
/** Longest pause between accept attempts while they fail, in ms. */
const acceptRetryMaxMs = 2000;

const reasons: Record<number, string> = {
  200: "OK",
  204: "No Content",
  400: "Bad Request",
  404: "Not Found",
  405: "Method Not Allowed",
  409: "Conflict",
  413: "Content Too Large",
  431: "Request Header Fields Too Large",
  500: "Internal Server Error",
  501: "Not Implemented",
  503: "Service Unavailable",
};

const encoder = new TextEncoder();
const latin1 = new TextDecoder("latin1");
/** Request heads up to this long are decoded in JS (cheaper than a decoder call), in bytes. */
const jsDecodeMaxBytes = 4096;

/** What the Connection header of a response says: nothing, `close` or `keep-alive`. */
const ConnectionHeader = { None: 0, Close: 1, KeepAlive: 2 } as const;
type ConnectionHeader = typeof ConnectionHeader[keyof typeof ConnectionHeader];

/** The response kept for a body: valid while the rest of its head is the same. */
interface CachedMessage {
  status: number;
  headers: HlsHttpReply["headers"];
  connection: ConnectionHeader;
  /** The Date second it was built in. */
  dateSec: number;
  message: Uint8Array;
}

/** One connection's state, for the idle sweep and shutdown. */
interface Connection {
  conn: Deno.TcpConn;
  /** Waiting for a request (not handling one). */
  reading: boolean;
  /** Since when it waits, in ms (performance.now). */
  sinceMs: number;
}

/** A request the parser could not take; answered, then the connection closes. */
class BadRequest extends Error {
  constructor(readonly status: number, message: string) {
    super(message);
  }
}

/** A started HLS listener. */
export class HlsListener {
  #options: HlsListenerOptions;
  #listener: Deno.TcpListener;
  #connections = new Set<Connection>();
  #tasks = new Set<Promise<void>>();
  #cache = new WeakMap<Uint8Array, CachedMessage>();
  #texts = new Map<string, Uint8Array>();
  #sweep: ReturnType<typeof setInterval>;
  #accepting: Promise<void>;
  #stopping = false;
  #restarts = 0;
  #dateSec = 0;
  #date = "";

  private constructor(options: HlsListenerOptions) {
    this.#options = options;
    this.#listener = Deno.listen({ hostname: options.hostname, port: options.port });
    this.#sweep = setInterval(() => this.#closeIdle(idleTimeoutMs), idleSweepMs);
    this.#accepting = this.#accept();
  }

  /** Listens; throws when the address cannot be listened on. */
  static start(options: HlsListenerOptions): Promise<HlsListener> {
    return Promise.resolve(new HlsListener(options));
  }

  /** The port listened on. */
  get port(): number {
    return (this.#listener.addr as Deno.NetAddr).port;
  }

  /** Times accepting failed (no descriptor left) and was tried again. */
  get restarts(): number {
    return this.#restarts;
  }

  /**
   * Stops listening; requests being handled are answered (within `shutdownGraceMs`), then
   * every connection closes.
   */
  async shutdown(): Promise<void> {
    if (this.#stopping) return;
    this.#stopping = true;
    clearInterval(this.#sweep);
    this.#listener.close();
    await this.#accepting;
    this.#closeIdle(0);
    let timer: ReturnType<typeof setTimeout> | undefined;
    const grace = new Promise((resolve) => timer = setTimeout(resolve, shutdownGraceMs));
    await Promise.race([Promise.all(this.#tasks), grace]);
    clearTimeout(timer);
    for (const c of this.#connections) close(c.conn);
    await Promise.all(this.#tasks);
  }

  async #accept(): Promise<void> {
    let retryMs = acceptRetryFirstMs;
    while (!this.#stopping) {
      let conn: Deno.TcpConn;
      try {
        conn = await this.#listener.accept();
      } catch (err) {
        if (this.#stopping) return;
        // Out of descriptors: connections being served go on; accept again after a pause.
        this.#restarts++;
        this.#options.log.error("hls accept failed, accepting again", { inMs: retryMs, err });
        await new Promise((resolve) => setTimeout(resolve, retryMs));
        retryMs = Math.min(retryMs * 2, acceptRetryMaxMs);
        continue;
      }
      retryMs = acceptRetryFirstMs;
      const task = this.#serve(conn);
      this.#tasks.add(task);
      void task.finally(() => this.#tasks.delete(task));
    }
  }

  /** Closes connections waiting for a request for `olderThanMs` or longer. */
  #closeIdle(olderThanMs: number): void {
    const now = performance.now();
    for (const c of this.#connections) {
      if (c.reading && now - c.sinceMs >= olderThanMs) close(c.conn);
    }
  }

  async #serve(conn: Deno.TcpConn): Promise<void> {
    const state: Connection = { conn, reading: true, sinceMs: performance.now() };
    this.#connections.add(state);
    try {
      conn.setNoDelay(true);
      await this.#requests(conn, state);
    } catch {
      // The peer went away or the connection was closed (idle, shutdown): nothing to answer.
    } finally {
      this.#connections.delete(state);
      close(conn);
    }
  }

  /** Reads requests one after another and answers each, until one asks to close. */
  async #requests(conn: Deno.TcpConn, state: Connection): Promise<void> {
    const remote = conn.remoteAddr;
    const buf = new Uint8Array(maxHeadBytes);
    let have = 0;
    for (;;) {
      state.reading = true;
      state.sinceMs = performance.now();
      let end = headEnd(buf, 0, have);
      while (end < 0) {
        if (this.#stopping && have === 0) return;
        if (have === buf.length) {
          await this.#write(conn, this.#error(431, "request head too large"));
          return;
        }
        const from = Math.max(0, have - 3);
        const n = await conn.read(buf.subarray(have));
        if (n === null) return;
        have += n;
        end = headEnd(buf, from, have);
      }
      let head: ParsedHead;
      try {
        head = parseHead(
          end <= jsDecodeMaxBytes
            ? String.fromCharCode.apply(null, buf.subarray(0, end) as unknown as number[])
            : latin1.decode(buf.subarray(0, end)),
        );
      } catch (err) {
        const bad = err instanceof BadRequest ? err : new BadRequest(400, "malformed request");
        await this.#write(conn, this.#error(bad.status, bad.message));
        return;
      }
      // The head and what follows it: a body is thrown away, pipelined requests stay.
      let consumed = end + 4;
      const bodyBytes = head.bodyBytes;
      if (bodyBytes > maxDiscardedBodyBytes) {
        await this.#write(conn, this.#error(413, "request body too large"));
        return;
      }
      let skip = bodyBytes;
      while (skip > 0) {
        if (consumed < have) {
          const n = Math.min(skip, have - consumed);
          consumed += n;
          skip -= n;
        } else {
          have = consumed = 0;
          const n = await conn.read(buf);
          if (n === null) return;
          have = n;
        }
      }
      buf.copyWithin(0, consumed, have);
      have -= consumed;
      // Handling (a blocking reload may wait long) is not idling: the idle sweep leaves it.
      state.reading = false;

      let reply: HlsHttpReply;
      try {
        reply = await this.#options.handler({
          method: head.method,
          path: head.path,
          query: head.query,
          header: (name) => head.headers.get(name),
          remote,
        });
      } catch (err) {
        this.#options.log.error("hls request failed", { path: head.path, err });
        reply = textReply(500, "internal error");
      }
      const keepAlive = head.keepAlive && !this.#stopping;
      await this.#write(conn, this.#message(reply, head, keepAlive));
      if (!keepAlive) return;
    }
  }

  async #write(conn: Deno.TcpConn, message: Uint8Array): Promise<void> {
    let at = 0;
    while (at < message.length) at += await conn.write(message.subarray(at));
  }

  /** The bytes of a response: the body's kept response while the rest of its head is the same. */
  #message(reply: HlsHttpReply, head: ParsedHead, keepAlive: boolean): Uint8Array {
    const body = typeof reply.body === "string" ? this.#encoded(reply.body) : reply.body;
    const connection = !keepAlive
      ? ConnectionHeader.Close
      : head.http10
      ? ConnectionHeader.KeepAlive
      : ConnectionHeader.None;
    const date = this.#now();
    if (head.method === "HEAD") {
      return encoder.encode(this.#head(reply, body.length, date, connection));
    }
    const cached = this.#cache.get(body);
    if (
      cached?.dateSec === this.#dateSec && cached.status === reply.status &&
      cached.headers === reply.headers && cached.connection === connection
    ) return cached.message;
    const message = concat(encoder.encode(this.#head(reply, body.length, date, connection)), body);
    this.#cache.set(body, {
      status: reply.status,
      headers: reply.headers,
      connection,
      dateSec: this.#dateSec,
      message,
    });
    return message;
  }

  /** The status line and headers of a response, up to the blank line. */
  #head(
    reply: HlsHttpReply,
    bodyBytes: number,
    date: string,
    connection: ConnectionHeader,
  ): string {
    let text = `HTTP/1.1 ${reply.status} ${reasons[reply.status] ?? "Unknown"}\r\n`;
    for (const [name, value] of reply.headers) text += `${name}: ${value}\r\n`;
    text += `Content-Length: ${bodyBytes}\r\nDate: ${date}\r\n`;
    if (connection === ConnectionHeader.Close) text += "Connection: close\r\n";
    else if (connection === ConnectionHeader.KeepAlive) text += "Connection: keep-alive\r\n";
    return text + "\r\n";
  }

  /** The UTF-8 bytes of a text body, the same array for the same text while it is kept. */
  #encoded(text: string): Uint8Array {
    let bytes = this.#texts.get(text);
    if (bytes) return bytes;
    if (this.#texts.size >= maxEncodedTexts) this.#texts.clear();
    bytes = encoder.encode(text);
    if (text.length <= maxEncodedTextChars) this.#texts.set(text, bytes);
    return bytes;
  }

  /** A response to a request the parser refused; the connection closes after it. */
  #error(status: number, message: string): Uint8Array {
    const reply = textReply(status, message);
    return this.#message(reply, { method: "GET", http10: false } as ParsedHead, false);
  }

  /** The Date header's value (RFC 9110 5.6.7), made once a second. */
  #now(): string {
    const ms = Date.now();
    const sec = Math.floor(ms / 1000);
    if (sec !== this.#dateSec) {
      this.#dateSec = sec;
      this.#date = new Date(ms).toUTCString();
    }
    return this.#date;
  }
}

/** A plain-text response. */
export function textReply(
  status: number,
  message: string,
  headers: readonly (readonly [string, string])[] = [],
): HlsHttpReply {
  return {
    status,
    headers: [
      ["Content-Type", "text/plain; charset=utf-8"],
      ["Cache-Control", "no-cache"],
      ...headers,
    ],
    body: message + "\n",
  };
}

interface ParsedHead {
  method: string;
  path: string;
  query: string;
  headers: Map<string, string>;
  http10: boolean;
  keepAlive: boolean;
  bodyBytes: number;
}

/** Where the blank line ending a request head starts, searching from `from`; -1 if not yet. */
function headEnd(buf: Uint8Array, from: number, to: number): number {
  for (let i = buf.indexOf(13, from); i >= 0 && i + 3 < to; i = buf.indexOf(13, i + 1)) {
    if (buf[i + 1] === 10 && buf[i + 2] === 13 && buf[i + 3] === 10) return i;
  }
  return -1;
}

const tokenPattern = /^[!#$%&'*+\-.^_`|~0-9A-Za-z]+$/;

/** The request line and headers (RFC 9112 3, 5); throws BadRequest. */
function parseHead(text: string): ParsedHead {
  const lines = text.split("\r\n");
  // A client may send empty lines before a request (RFC 9112 2.2).
  while (lines.length > 1 && lines[0] === "") lines.shift();
  const [method, target, version, extra] = lines[0].split(" ");
  if (
    extra !== undefined || !method || !tokenPattern.test(method) || !target ||
    (version !== "HTTP/1.1" && version !== "HTTP/1.0")
  ) {
    throw new BadRequest(400, "malformed request line");
  }
  const headers = new Map<string, string>();
  for (let i = 1; i < lines.length; i++) {
    const line = lines[i];
    const colon = line.indexOf(":");
    const name = line.slice(0, colon).toLowerCase();
    const value = line.slice(colon + 1).trim();
    // A name with spaces, or a value with a bare CR or LF, could smuggle a header or a response.
    if (colon <= 0 || !tokenPattern.test(name) || /[\r\n\0]/.test(value)) {
      throw new BadRequest(400, "malformed header");
    }
    const before = headers.get(name);
    headers.set(name, before === undefined ? value : `${before}, ${value}`);
  }
  if (headers.has("transfer-encoding")) {
    throw new BadRequest(501, "request bodies are not taken");
  }
  const length = headers.get("content-length");
  if (length !== undefined && !/^\d{1,15}$/.test(length)) {
    throw new BadRequest(400, "malformed Content-Length");
  }
  const http10 = version === "HTTP/1.0";
  const connection = headers.get("connection")?.toLowerCase() ?? "";
  const keepAlive = http10 ? /\bkeep-alive\b/.test(connection) : !/\bclose\b/.test(connection);
  // Absolute form (a proxy's request): the path starts after the authority.
  let pathStart = 0;
  if (/^https?:\/\//i.test(target)) {
    pathStart = target.indexOf("/", target.indexOf("//") + 2);
    if (pathStart < 0) return request("/", "");
  }
  const q = target.indexOf("?", pathStart);
  return q < 0
    ? request(target.slice(pathStart), "")
    : request(target.slice(pathStart, q), target.slice(q + 1));

  function request(path: string, query: string): ParsedHead {
    const hash = query.indexOf("#");
    return {
      method,
      path,
      query: hash < 0 ? query : query.slice(0, hash),
      headers,
      http10,
      keepAlive,
      bodyBytes: length === undefined ? 0 : Number(length),
    };
  }
}

function concat(a: Uint8Array, b: Uint8Array): Uint8Array {
  const out = new Uint8Array(a.length + b.length);
  out.set(a);
  out.set(b, a.length);
  return out;
}

function close(conn: Deno.Conn): void {
  try {
    conn.close();
  } catch {
    // Closed already.
  }
}
