/**
 * The server side of the WebSocket opening handshake (RFC 6455 §4.2): a minimal HTTP/1.1
 * request head parser, the checks of an upgrade request, and the responses (101, or an HTTP
 * error that ends the connection). No extension is ever accepted (no permessage-deflate).
 */
import { createHash } from "node:crypto";

/** Largest request head read before answering 431, in bytes (browsers send ~1 KiB + cookies). */
export const maxRequestHeadBytes = 16 * 1024;

/** The one protocol version spoken (RFC 6455 §4.1). */
export const webSocketVersion = "13";

/** The GUID appended to the client's key to make the accept value (RFC 6455 §1.3). */
const acceptGuid = "258EAFA5-E914-47DA-95CA-C5AB0DC85B11";

/** A parsed HTTP/1.1 request head. */
export interface RequestHead {
  readonly method: string;
  readonly target: string;
  /** Header names lowercased; repeated headers joined with ", ". */
  readonly headers: ReadonlyMap<string, string>;
}

/** An HTTP error answer to a request that is not a valid WebSocket upgrade. */
export class HandshakeError extends Error {
  /**
   * @param status HTTP status to answer.
   * @param headers extra response headers (e.g. `Sec-WebSocket-Version` with 400).
   */
  constructor(
    readonly status: number,
    message: string,
    readonly headers: Readonly<Record<string, string>> = {},
  ) {
    super(message);
    this.name = "HandshakeError";
  }
}

const statusTexts: Record<number, string> = {
  101: "Switching Protocols",
  400: "Bad Request",
  426: "Upgrade Required",
  431: "Request Header Fields Too Large",
  503: "Service Unavailable",
};

const latin1 = new TextDecoder("latin1");
const encoder = new TextEncoder();
const token = /^[!#$%&'*+.^_`|~0-9A-Za-z-]+$/;

/** Index just past the `\r\n\r\n` ending a request head in `bytes`, or -1 while incomplete. */
export function headEnd(bytes: Uint8Array): number {
  for (let i = 3; i < bytes.length; i++) {
    if (
      bytes[i] === 10 && bytes[i - 1] === 13 && bytes[i - 2] === 10 && bytes[i - 3] === 13
    ) return i + 1;
  }
  return -1;
}

/** Parses a request head (request line and header fields, without the final empty line). */
export function parseRequestHead(bytes: Uint8Array): RequestHead {
  const lines = latin1.decode(bytes).split("\r\n");
  const requestLine = lines[0].split(" ");
  if (requestLine.length !== 3 || !token.test(requestLine[0]) || requestLine[1] === "") {
    throw new HandshakeError(400, "malformed request line");
  }
  if (requestLine[2] !== "HTTP/1.1") {
    throw new HandshakeError(400, "a WebSocket upgrade needs HTTP/1.1");
  }
  const headers = new Map<string, string>();
  for (const line of lines.slice(1)) {
    if (line === "") continue;
    const colon = line.indexOf(":");
    const name = line.slice(0, colon);
    if (colon <= 0 || !token.test(name)) throw new HandshakeError(400, "malformed header field");
    const key = name.toLowerCase();
    const value = line.slice(colon + 1).trim();
    const previous = headers.get(key);
    headers.set(key, previous === undefined ? value : `${previous}, ${value}`);
  }
  return { method: requestLine[0], target: requestLine[1], headers };
}

/** True when a comma-separated header value lists `wanted` (case-insensitive). */
function listsToken(value: string | undefined, wanted: string): boolean {
  return value?.split(",").some((t) => t.trim().toLowerCase() === wanted) ?? false;
}

/**
 * Checks an upgrade request and returns its Sec-WebSocket-Key, or throws HandshakeError:
 * 426 for a request that does not ask for a WebSocket, 400 for a broken upgrade.
 */
export function checkUpgrade(head: RequestHead): string {
  const h = head.headers;
  if (!listsToken(h.get("upgrade"), "websocket")) {
    throw new HandshakeError(426, "WebSocket signaling endpoint", { "Upgrade": "websocket" });
  }
  if (head.method !== "GET") throw new HandshakeError(400, "a WebSocket upgrade must be a GET");
  if (!h.has("host")) throw new HandshakeError(400, "missing Host header");
  if (!listsToken(h.get("connection"), "upgrade")) {
    throw new HandshakeError(400, "Connection header must include Upgrade");
  }
  if (h.get("sec-websocket-version") !== webSocketVersion) {
    throw new HandshakeError(400, `unsupported Sec-WebSocket-Version, ${webSocketVersion} only`, {
      "Sec-WebSocket-Version": webSocketVersion,
    });
  }
  const key = h.get("sec-websocket-key");
  if (key === undefined) throw new HandshakeError(400, "missing Sec-WebSocket-Key");
  if (!isNonce(key)) throw new HandshakeError(400, "Sec-WebSocket-Key is not 16 bytes in base64");
  return key;
}

/** True when `key` is base64 of 16 bytes (RFC 6455 §4.1: a random 16-byte nonce). */
function isNonce(key: string): boolean {
  if (!/^[A-Za-z0-9+/]{22}==$/.test(key)) return false;
  try {
    return atob(key).length === 16;
  } catch {
    return false;
  }
}

/** The Sec-WebSocket-Accept value for a client's key. */
export function acceptValue(key: string): string {
  // Synchronous: WebCrypto's digest is a round trip through the runtime per handshake.
  return createHash("sha1").update(key + acceptGuid).digest("base64");
}

/** The 101 response completing the handshake (no subprotocol, no extension). */
export function switchingProtocols(key: string): Uint8Array {
  return encoder.encode(
    "HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n" +
      `Sec-WebSocket-Accept: ${acceptValue(key)}\r\n\r\n`,
  );
}

/** A complete HTTP error response with a plain-text body; the connection closes after it. */
export function errorResponse(
  status: number,
  message: string,
  headers: Readonly<Record<string, string>> = {},
): Uint8Array {
  const body = encoder.encode(`${message}\n`);
  const fields = Object.entries({
    ...headers,
    "Content-Type": "text/plain; charset=utf-8",
    "Content-Length": String(body.length),
    "Connection": "close",
  }).map(([name, value]) => `${name}: ${value}\r\n`).join("");
  const head = encoder.encode(`HTTP/1.1 ${status} ${statusTexts[status] ?? ""}\r\n${fields}\r\n`);
  const response = new Uint8Array(head.length + body.length);
  response.set(head);
  response.set(body, head.length);
  return response;
}
