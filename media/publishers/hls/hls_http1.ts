/**
 * HTTP/1.1 (RFC 9112) for the HLS port, apart from any socket: request heads read out of a
 * connection's bytes (RequestReader) and responses built and kept per body (Http1Responder).
 * Both transports of the listener (hls_listener.ts: Deno's sockets; hls_ffi_transport.ts:
 * libc sockets with sendfile) feed their bytes through these, so they answer alike.
 *
 * Why responses are kept: 1,000 keep-alive viewers of 260 KB segments got ~11k requests/s
 * from Deno.serve on this machine, and ~29k from one `write` of a prebuilt response per
 * request. So a response's bytes (status line, headers, body) are built once per body and
 * kept while its status, headers (the same array) and Date second stay. Text bodies
 * (playlists) are encoded once per string, so a playlist's response is kept too.
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

/** Longest request head (request line and headers), in bytes; larger ones get a 431. */
export const maxHeadBytes = 16 * 1024;
/** A connection waiting this long for (the rest of) a request is closed (transports), in ms. */
export const idleTimeoutMs = 65_000;
/** Longest a shutdown waits for answers being written (a client not reading), in ms. */
export const shutdownGraceMs = 2_000;
/** How often idle connections are looked for, in ms. */
export const idleSweepMs = 5_000;
/** First pause before accepting again after accept failed (no descriptor left), in ms. */
export const acceptRetryFirstMs = 100;
/** Longest pause between accept attempts while they fail, in ms. */
export const acceptRetryMaxMs = 2000;

/** Longest request body read and thrown away, in bytes; larger ones get a 413. */
const maxDiscardedBodyBytes = 64 * 1024;
/** Text bodies kept encoded (playlists change every part or segment); beyond, all are dropped. */
const maxEncodedTexts = 256;
/** Longest text body kept encoded, in characters (bounds the memory of the kept ones). */
const maxEncodedTextChars = 64 * 1024;
/** Request heads up to this long are decoded in JS (cheaper than a decoder call), in bytes. */
const jsDecodeMaxBytes = 4096;

/** Reason phrases of the statuses the HLS server answers (status lines, viewer metrics). */
export const reasonPhrases: Record<number, string> = {
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

/** What the Connection header of a response says: nothing, `close` or `keep-alive`. */
const ConnectionHeader = { None: 0, Close: 1, KeepAlive: 2 } as const;
type ConnectionHeader = typeof ConnectionHeader[keyof typeof ConnectionHeader];

/** A parsed request head. */
export interface ParsedHead {
  method: string;
  path: string;
  query: string;
  headers: Map<string, string>;
  http10: boolean;
  keepAlive: boolean;
  bodyBytes: number;
}

/** A request the reader could not take: answered with `status`, then the connection closes. */
export class Refusal {
  constructor(readonly status: number, readonly message: string) {}
}

/**
 * The bytes a connection received that no request has taken yet, at most `maxHeadBytes`:
 * the transport reads into `space()`, calls `received(n)`, and takes requests with `take()`.
 * A request body (players send none) is read and thrown away.
 */
export class RequestReader {
  readonly #buf = new Uint8Array(maxHeadBytes);
  #have = 0;
  /** Where the search for the end of the head goes on (what is before was searched). */
  #searched = 0;
  /** Bytes of a request body still to throw away. */
  #skip = 0;

  /** Bytes held (received, not taken). */
  get buffered(): number {
    return this.#have;
  }

  /** Where the next bytes read go. */
  space(): Uint8Array {
    return this.#buf.subarray(this.#have);
  }

  /** `n` bytes were read into `space()`. */
  received(n: number): void {
    this.#have += n;
  }

  /**
   * The next request: its head, a Refusal (answer it and close), or undefined when more bytes
   * are needed.
   */
  take(): ParsedHead | Refusal | undefined {
    if (this.#skip > 0) {
      const n = Math.min(this.#skip, this.#have);
      this.#consume(n);
      this.#skip -= n;
      if (this.#skip > 0) return undefined;
    }
    const buf = this.#buf;
    const end = headEnd(buf, Math.max(0, this.#searched - 3), this.#have);
    if (end < 0) {
      this.#searched = this.#have;
      return this.#have === buf.length ? new Refusal(431, "request head too large") : undefined;
    }
    let head: ParsedHead;
    try {
      head = parseHead(
        end <= jsDecodeMaxBytes
          ? String.fromCharCode.apply(null, buf.subarray(0, end) as unknown as number[])
          : latin1.decode(buf.subarray(0, end)),
      );
    } catch (err) {
      return err instanceof Refusal ? err : new Refusal(400, "malformed request");
    }
    if (head.bodyBytes > maxDiscardedBodyBytes) return new Refusal(413, "request body too large");
    this.#consume(end + 4);
    // The body is thrown away as it comes; pipelined requests after it stay.
    const n = Math.min(head.bodyBytes, this.#have);
    this.#consume(n);
    this.#skip = head.bodyBytes - n;
    return head;
  }

  #consume(n: number): void {
    if (n === 0) return;
    this.#buf.copyWithin(0, n, this.#have);
    this.#have -= n;
    this.#searched = 0;
  }
}

/** The response kept for a body: valid while the rest of its head is the same. */
interface CachedMessage {
  status: number;
  headers: HlsHttpReply["headers"];
  connection: ConnectionHeader;
  /** The Date second it was built in. */
  dateSec: number;
  /** The whole response, built when first asked for. */
  message?: Uint8Array;
  /** The status line and headers alone. */
  head: Uint8Array;
}

/** A response's bytes: `head` then `body` (empty for HEAD). */
export interface ResponseBytes {
  head: Uint8Array;
  body: Uint8Array;
}

/** Calls the handler and builds responses; one per listener (its caches are shared). */
export class Http1Responder {
  readonly #handler: HlsHttpHandler;
  readonly #log: Logger;
  #cache = new WeakMap<Uint8Array, CachedMessage>();
  #texts = new Map<string, Uint8Array>();
  #dateSec = 0;
  #date = "";

  constructor(handler: HlsHttpHandler, log: Logger) {
    this.#handler = handler;
    this.#log = log;
  }

  /** The handler's reply to a request; a handler that throws is a 500. */
  async answer(head: ParsedHead, remote: Deno.NetAddr): Promise<HlsHttpReply> {
    try {
      return await this.#handler({
        method: head.method,
        path: head.path,
        query: head.query,
        header: (name) => head.headers.get(name),
        remote,
      });
    } catch (err) {
      this.#log.error("hls request failed", { path: head.path, err });
      return textReply(500, "internal error");
    }
  }

  /** The whole response in one array (kept per body while the rest of its head stays). */
  message(reply: HlsHttpReply, head: ParsedHead, keepAlive: boolean): Uint8Array {
    const { head: bytes, body, cached } = this.#parts(reply, head, keepAlive);
    if (body.length === 0) return bytes;
    if (cached) return cached.message ??= concat(bytes, body);
    return concat(bytes, body);
  }

  /** The response as head and body (the head kept per body while the rest of it stays). */
  split(reply: HlsHttpReply, head: ParsedHead, keepAlive: boolean): ResponseBytes {
    const { head: bytes, body } = this.#parts(reply, head, keepAlive);
    return { head: bytes, body };
  }

  /** A response to a request the reader refused; the connection closes after it. */
  refusal(refused: Refusal): Uint8Array {
    return this.message(
      textReply(refused.status, refused.message),
      { method: "GET", http10: false } as ParsedHead,
      false,
    );
  }

  #parts(
    reply: HlsHttpReply,
    head: ParsedHead,
    keepAlive: boolean,
  ): { head: Uint8Array; body: Uint8Array; cached?: CachedMessage } {
    const body = typeof reply.body === "string" ? this.#encoded(reply.body) : reply.body;
    const connection = !keepAlive
      ? ConnectionHeader.Close
      : head.http10
      ? ConnectionHeader.KeepAlive
      : ConnectionHeader.None;
    const date = this.#now();
    if (head.method === "HEAD") {
      return {
        head: encoder.encode(headText(reply, body.length, date, connection)),
        body: new Uint8Array(0),
      };
    }
    let cached = this.#cache.get(body);
    if (
      !(cached?.dateSec === this.#dateSec && cached.status === reply.status &&
        cached.headers === reply.headers && cached.connection === connection)
    ) {
      cached = {
        status: reply.status,
        headers: reply.headers,
        connection,
        dateSec: this.#dateSec,
        head: encoder.encode(headText(reply, body.length, date, connection)),
      };
      this.#cache.set(body, cached);
    }
    return { head: cached.head, body, cached };
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

/** The status line and headers of a response, up to the blank line. */
function headText(
  reply: HlsHttpReply,
  bodyBytes: number,
  date: string,
  connection: ConnectionHeader,
): string {
  let text = `HTTP/1.1 ${reply.status} ${reasonPhrases[reply.status] ?? "Unknown"}\r\n`;
  for (const [name, value] of reply.headers) text += `${name}: ${value}\r\n`;
  text += `Content-Length: ${bodyBytes}\r\nDate: ${date}\r\n`;
  if (connection === ConnectionHeader.Close) text += "Connection: close\r\n";
  else if (connection === ConnectionHeader.KeepAlive) text += "Connection: keep-alive\r\n";
  return text + "\r\n";
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

/** Where the blank line ending a request head starts, searching from `from`; -1 if not yet. */
function headEnd(buf: Uint8Array, from: number, to: number): number {
  for (let i = buf.indexOf(13, from); i >= 0 && i + 3 < to; i = buf.indexOf(13, i + 1)) {
    if (buf[i + 1] === 10 && buf[i + 2] === 13 && buf[i + 3] === 10) return i;
  }
  return -1;
}

const tokenPattern = /^[!#$%&'*+\-.^_`|~0-9A-Za-z]+$/;

/** The request line and headers (RFC 9112 3, 5); throws Refusal. */
function parseHead(text: string): ParsedHead {
  const lines = text.split("\r\n");
  // A client may send empty lines before a request (RFC 9112 2.2).
  while (lines.length > 1 && lines[0] === "") lines.shift();
  const [method, target, version, extra] = lines[0].split(" ");
  if (
    extra !== undefined || !method || !tokenPattern.test(method) || !target ||
    (version !== "HTTP/1.1" && version !== "HTTP/1.0")
  ) {
    throw new Refusal(400, "malformed request line");
  }
  const headers = new Map<string, string>();
  for (let i = 1; i < lines.length; i++) {
    const line = lines[i];
    const colon = line.indexOf(":");
    const name = line.slice(0, colon).toLowerCase();
    const value = line.slice(colon + 1).trim();
    // A name with spaces, or a value with a bare CR or LF, could smuggle a header or a response.
    if (colon <= 0 || !tokenPattern.test(name) || /[\r\n\0]/.test(value)) {
      throw new Refusal(400, "malformed header");
    }
    const before = headers.get(name);
    headers.set(name, before === undefined ? value : `${before}, ${value}`);
  }
  if (headers.has("transfer-encoding")) {
    throw new Refusal(501, "request bodies are not taken");
  }
  const length = headers.get("content-length");
  if (length !== undefined && !/^\d{1,15}$/.test(length)) {
    throw new Refusal(400, "malformed Content-Length");
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
