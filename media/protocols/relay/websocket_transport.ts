/**
 * The relay over WebSocket binary messages: the origin's side is a socket from
 * `Deno.upgradeWebSocket`, the edge dials with Deno's WebSocket client.
 *
 * Checked on Deno 2.9: the server-side socket reports `bufferedAmount` (it grows once the
 * kernel's socket buffers are full: about 3.8 MB on loopback before the first byte counts),
 * so it is the backpressure measure; Deno's client takes handshake headers with the
 * non-standard `new WebSocket(url, { headers })`; a refused upgrade surfaces only as an
 * error event whose message ends in "Invalid status code: 403", which is where the status
 * is read from.
 */
import { BadGatewayError, ForbiddenError, NotFoundError } from "../../../core/errors.ts";
import { redactText } from "../../../core/redact.ts";
import type { RelayTransport } from "./relay_transport.ts";

/** Longest close reason a WebSocket close frame carries, in UTF-8 bytes (RFC 6455 5.5). */
const maxCloseReasonBytes = 123;
const encoder = new TextEncoder();

/** A RelayTransport over an open WebSocket. */
class WebSocketTransport implements RelayTransport {
  readonly closed: Promise<string>;
  #socket: WebSocket;
  #handler: ((message: Uint8Array) => void) | undefined;
  #closed = Promise.withResolvers<string>();
  #done = false;

  constructor(socket: WebSocket) {
    this.#socket = socket;
    this.closed = this.#closed.promise;
    socket.binaryType = "arraybuffer";
    // Text messages are not part of the protocol: ignored.
    socket.addEventListener("message", (event) => {
      if (event.data instanceof ArrayBuffer) this.#handler?.(new Uint8Array(event.data));
    });
    let failure = "";
    socket.addEventListener("error", (event) => failure = (event as ErrorEvent).message ?? "");
    socket.addEventListener("close", (event) => {
      // Without a close frame (a reset, a dead peer) Deno reports code 0 or 1006.
      if (event.code === 0 || event.code === 1006) {
        this.#finish(`connection lost${failure ? ` (${failure})` : ""}`);
      } else {
        const why = event.reason ? `${event.code}: ${event.reason}` : `${event.code}`;
        this.#finish(`connection closed by the peer (${why})`);
      }
    });
    if (socket.readyState >= WebSocket.CLOSING) this.#finish("connection closed");
  }

  get bufferedBytes(): number {
    return this.#socket.bufferedAmount;
  }

  send(message: Uint8Array): void {
    if (!this.#done) this.#socket.send(message);
  }

  onMessage(handler: (message: Uint8Array) => void): void {
    this.#handler = handler;
  }

  close(reason: string): void {
    if (this.#done) return;
    this.#finish(reason);
    // Queued messages go first, then the close frame. `closed` does not wait for the close
    // handshake: a peer that stopped reading would never complete it.
    if (this.#socket.readyState < WebSocket.CLOSING) this.#socket.close(1000, closeReason(reason));
  }

  #finish(reason: string): void {
    if (this.#done) return;
    this.#done = true;
    this.#handler = undefined;
    this.#closed.resolve(reason);
  }
}

/** `reason` cut to what a close frame holds, on a character boundary. */
function closeReason(reason: string): string {
  let cut = reason;
  while (encoder.encode(cut).length > maxCloseReasonBytes) cut = cut.slice(0, -1);
  return cut;
}

/**
 * The transport of a socket from `Deno.upgradeWebSocket`, once it is open. A socket that
 * closes before opening gives a transport that is already closed.
 */
export async function openWebSocketTransport(socket: WebSocket): Promise<RelayTransport> {
  if (socket.readyState === WebSocket.CONNECTING) {
    await new Promise<void>((resolve) => {
      socket.addEventListener("open", () => resolve(), { once: true });
      socket.addEventListener("close", () => resolve(), { once: true });
    });
  }
  return new WebSocketTransport(socket);
}

/** What a dial may add to the WebSocket handshake. */
export interface DialOptions {
  /** Handshake headers (a node token, for instance). */
  headers?: Record<string, string>;
  /** Aborting gives up the dial; the rejection is the signal's reason. */
  signal?: AbortSignal;
}

/**
 * Dials `url` (ws:// or wss://). A refused upgrade rejects with ForbiddenError (403),
 * NotFoundError (404) or BadGatewayError (any other status, or no answer); the messages name
 * the URL with its secrets redacted.
 */
export function dialWebSocketTransport(
  url: string,
  options: DialOptions = {},
): Promise<RelayTransport> {
  const { signal } = options;
  if (signal?.aborted) return Promise.reject(signal.reason);
  let socket: WebSocket;
  try {
    socket = new WebSocket(url, { headers: options.headers });
  } catch (err) {
    return Promise.reject(
      new BadGatewayError(redactText(`relay URL ${url}: ${(err as Error).message}`)),
    );
  }
  return new Promise((resolve, reject) => {
    let failure = "";
    const onAbort = () => socket.close();
    const onError = (event: Event) => failure = (event as ErrorEvent).message ?? "";
    const settle = (outcome: () => void) => {
      signal?.removeEventListener("abort", onAbort);
      socket.removeEventListener("error", onError);
      outcome();
    };
    signal?.addEventListener("abort", onAbort, { once: true });
    socket.addEventListener("error", onError);
    socket.addEventListener("open", () => settle(() => resolve(new WebSocketTransport(socket))), {
      once: true,
    });
    socket.addEventListener("close", () => {
      settle(() => reject(signal?.aborted ? signal.reason : refusal(url, failure)));
    }, { once: true });
  });
}

/** The typed error of a failed dial, from the error event's message. */
function refusal(url: string, failure: string): Error {
  const status = Number(/status code:? (\d{3})/i.exec(failure)?.[1]);
  const message = redactText(`relay ${url}: ${failure || "connection failed"}`);
  if (status === 403) return new ForbiddenError(message);
  if (status === 404) return new NotFoundError(message);
  return new BadGatewayError(message);
}
