/**
 * A server-side WebSocket on an upgraded connection: reads frames with the message limit
 * enforced (FrameReader), answers pings, runs the closing handshake (RFC 6455 §7), fails the
 * connection on a protocol error, and queues writes so a client that does not read only fills
 * its own queue (its owner sees `bufferedAmount` and cuts it off).
 */
import { turns } from "../../core/turn_budget.ts";
import { concatBytes } from "./bytes.ts";
import { encodeClose, encodeFrame, encodeText } from "./frame_writer.ts";
import {
  closeCodes,
  decodeUtf8,
  FrameReader,
  opcodes,
  WebSocketProtocolError,
} from "./frame_reader.ts";
import { writeAll } from "./upgrade.ts";

/** Bytes read from the connection at a time; a small buffer keeps idle sockets cheap. */
export const readChunkBytes = 4096;

/** `open`: messages flow; `closing`: a close frame was sent or received; `closed`: TCP is gone. */
export type SocketState = "open" | "closing" | "closed";

/** How the socket ended. */
export interface SocketCloseInfo {
  /** The close code (1005 when the close frame had none, 1006 without a close frame). */
  readonly code: number;
  readonly reason: string;
  /** True when this side started the close (our `close()` or a protocol failure). */
  readonly byServer: boolean;
}

/** Options of a socket. */
export interface SocketOptions {
  /** Largest data message accepted until changed through `maxMessageBytes`. */
  maxMessageBytes: number;
  /** Time the client has to finish the closing handshake before TCP is cut, in ms. */
  closeTimeoutMs: number;
}

/** A close code a peer may put on the wire (RFC 6455 §7.4.1, §7.4.2; IANA 1012-1014). */
function isSendableCode(code: number): boolean {
  return (code >= 1000 && code <= 1003) || (code >= 1007 && code <= 1014) ||
    (code >= 3000 && code <= 4999);
}

/** One WebSocket connection, server side. */
export class ServerWebSocket {
  /** Called with every whole data message while the socket is open. */
  onmessage?: (data: string | Uint8Array) => void;
  /** Resolves once the TCP connection is closed, with how the socket ended. */
  readonly closed: Promise<SocketCloseInfo>;

  readonly #conn: Deno.Conn;
  readonly #reader: FrameReader;
  readonly #closeTimeoutMs: number;
  readonly #closed = Promise.withResolvers<SocketCloseInfo>();
  #state: SocketState = "open";
  #closeInfo?: SocketCloseInfo;
  #closeTimer?: ReturnType<typeof setTimeout>;
  /** Input is ignored once the connection failed: only EOF (or the timer) is awaited. */
  #discarding = false;
  #queue: Uint8Array[] = [];
  #buffered = 0;
  #writing = false;
  /** What to do once everything queued is written (after a close frame). */
  #afterFlush?: () => void;

  constructor(conn: Deno.Conn, options: SocketOptions) {
    this.#conn = conn;
    this.#closeTimeoutMs = options.closeTimeoutMs;
    this.closed = this.#closed.promise;
    this.#reader = new FrameReader(options.maxMessageBytes, {
      message: (data) => {
        if (this.#state === "open") this.onmessage?.(data);
      },
      control: (opcode, payload) => this.#onControl(opcode, payload),
    });
  }

  /** Where the socket stands. */
  get state(): SocketState {
    return this.#state;
  }

  /** Bytes queued for sending and not yet taken by the kernel. */
  get bufferedAmount(): number {
    return this.#buffered;
  }

  /** Largest data message accepted from now on, in bytes. */
  set maxMessageBytes(bytes: number) {
    this.#reader.maxMessageBytes = bytes;
  }

  /** Starts reading; `received` are bytes that came after the upgrade request. */
  start(received: Uint8Array): void {
    void this.#readLoop(received);
  }

  /** Sends a text message; dropped unless open. */
  send(text: string): void {
    if (this.#state === "open") this.#enqueue(encodeText(text));
  }

  /** Sends a binary message (the MSE media transport); dropped unless open. */
  sendBinary(data: Uint8Array): void {
    if (this.#state === "open") this.#enqueue(encodeFrame(opcodes.binary, data));
  }

  /**
   * Starts the closing handshake: our close frame, then the client's answer closes TCP, or
   * the close timeout does.
   */
  close(code: number, reason: string): void {
    if (this.#state !== "open") return;
    this.#beginClose({ code, reason, byServer: true });
    this.#enqueue(encodeClose(code, reason));
  }

  async #readLoop(received: Uint8Array): Promise<void> {
    const buffer = new Uint8Array(readChunkBytes);
    try {
      if (received.length > 0) this.#receive(received);
      while (this.#state !== "closed") {
        const n = await this.#conn.read(buffer);
        if (n === null) break;
        // Messages of many clients at once are handled in slices (core/turn_budget.ts).
        const turn = turns.admit();
        if (turn) await turn;
        this.#receive(buffer.subarray(0, n));
      }
    } catch {
      // Reset by the peer or closed by us: either way the connection is over.
    }
    this.#destroy();
  }

  #receive(bytes: Uint8Array): void {
    if (this.#discarding) return;
    try {
      this.#reader.push(bytes);
    } catch (err) {
      if (err instanceof WebSocketProtocolError) this.#fail(err.code, err.message);
      else this.#fail(closeCodes.internalError, `internal error: ${(err as Error).message}`);
    }
  }

  #onControl(opcode: number, payload: Uint8Array): void {
    if (opcode === opcodes.ping) {
      if (this.#state === "open") this.#enqueue(encodeFrame(opcodes.pong, payload));
      return;
    }
    if (opcode !== opcodes.close) return; // A pong: our keepalive is the JSON ping.
    if (this.#state !== "open") {
      // The answer to our close frame: the handshake is complete.
      this.#destroy();
      return;
    }
    if (payload.length === 1) {
      throw new WebSocketProtocolError(closeCodes.protocolError, "close payload of 1 byte");
    }
    let code: number = closeCodes.noStatus;
    let reason = "";
    if (payload.length >= 2) {
      code = new DataView(payload.buffer, payload.byteOffset).getUint16(0);
      if (!isSendableCode(code)) {
        throw new WebSocketProtocolError(closeCodes.protocolError, `invalid close code ${code}`);
      }
      reason = decodeUtf8(payload.subarray(2));
    }
    this.#beginClose({ code, reason, byServer: false });
    // Echo the code (§5.5.1); the server closes TCP first once the echo is written (§7.1.1).
    this.#afterFlush = () => this.#destroy();
    const echo = code === closeCodes.noStatus
      ? encodeFrame(opcodes.close, new Uint8Array())
      : encodeClose(code, "");
    this.#enqueue(echo);
  }

  /** Fails the connection (§7.1.7): our close frame, then no more input is read. */
  #fail(code: number, reason: string): void {
    if (this.#state !== "open") {
      this.#destroy();
      return;
    }
    this.#beginClose({ code, reason, byServer: true });
    this.#discarding = true;
    // Half-close after the close frame, and keep draining input until the client closes or
    // the timer fires: closing with unread input would reset the connection and could drop
    // our close frame before the client reads it.
    this.#afterFlush = () => {
      this.#conn.closeWrite().catch(() => this.#destroy());
    };
    this.#enqueue(encodeClose(code, reason));
  }

  #beginClose(info: SocketCloseInfo): void {
    this.#state = "closing";
    this.#closeInfo = info;
    this.#closeTimer = setTimeout(() => this.#destroy(), this.#closeTimeoutMs);
  }

  #enqueue(bytes: Uint8Array): void {
    this.#queue.push(bytes);
    this.#buffered += bytes.length;
    if (!this.#writing) void this.#flush();
  }

  async #flush(): Promise<void> {
    this.#writing = true;
    try {
      while (this.#queue.length > 0 && this.#state !== "closed") {
        const chunk = this.#queue.length === 1 ? this.#queue[0] : concatBytes(this.#queue);
        this.#queue = [];
        await writeAll(this.#conn, chunk);
        this.#buffered -= chunk.length;
      }
    } catch {
      this.#destroy();
      return;
    } finally {
      this.#writing = false;
    }
    if (this.#state === "closing") this.#afterFlush?.();
  }

  /** Closes TCP (once) and reports how the socket ended. */
  #destroy(): void {
    if (this.#state === "closed") return;
    this.#state = "closed";
    clearTimeout(this.#closeTimer);
    this.#queue = [];
    this.#buffered = 0;
    try {
      this.#conn.close();
    } catch {
      // Already closed by the runtime.
    }
    this.#closed.resolve(
      this.#closeInfo ?? { code: closeCodes.abnormal, reason: "", byServer: false },
    );
  }
}
