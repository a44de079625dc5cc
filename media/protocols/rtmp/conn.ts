/**
 * One RTMP connection over a Deno TCP connection: handshake, the read loop that reassembles
 * messages and answers protocol control (acknowledgements, pings), and serialized writes with
 * a timeout so a peer that stops reading is dropped instead of holding its writer forever.
 */
import { ParseError, TruncatedError } from "../../../core/errors.ts";
import { ChunkReader } from "./chunk_reader.ts";
import { outChunkBytes, writeChunks } from "./chunk_writer.ts";
import {
  buildHandshakeEcho,
  buildHandshakeHello,
  checkHandshakeEcho,
  handshakePacketBytes,
  handshakeTimeoutMs,
  parseHandshakeHello,
} from "./handshake.ts";
import {
  buildAcknowledgement,
  buildSetChunkSize,
  buildUserControl,
  ChunkStreamId,
  MessageType,
  parseUserControl,
  parseWindowAckSize,
  type RtmpMessage,
  UserControlEvent,
} from "./message.ts";

/** Size of the buffer each connection reads into, in bytes. */
export const readBufferBytes = 16 * 1024;
/** Longest a single write may wait for the peer to take bytes, in milliseconds. */
export const writeTimeoutMs = 10_000;
/** Window acknowledgement size announced to peers, in bytes (what nginx-rtmp announces). */
export const windowAckBytes = 5_000_000;

/** The peer closed the connection, or it was closed locally. */
export class RtmpClosedError extends Error {
  constructor(message = "RTMP connection closed") {
    super(message);
    this.name = "RtmpClosedError";
  }
}

/** An RTMP connection: bytes in, messages out; messages in, chunks out. */
export class RtmpConn {
  readonly #conn: Deno.Conn;
  readonly #reader = new ChunkReader();
  readonly #buf = new Uint8Array(readBufferBytes);
  #pending: Uint8Array = new Uint8Array(0);
  #peerWindowBytes = 0;
  #lastAckBytes = 0;
  #writeChain: Promise<void> = Promise.resolve();
  #closed = false;

  constructor(conn: Deno.Conn) {
    this.#conn = conn;
  }

  /** True once `close()` ran or the peer went away. */
  get closed(): boolean {
    return this.#closed;
  }

  /** Remote address, for logs. */
  get remote(): string {
    const addr = this.#conn.remoteAddr as Deno.NetAddr;
    return `${addr.hostname}:${addr.port}`;
  }

  /** Server side of the handshake: read C0+C1, send S0+S1+S2, read C2. */
  async acceptHandshake(): Promise<void> {
    await this.#withTimeout(async () => {
      const c1 = parseHandshakeHello(await this.#readExact(1 + handshakePacketBytes));
      const s0s1 = buildHandshakeHello(0);
      const reply = new Uint8Array(s0s1.length + handshakePacketBytes);
      reply.set(s0s1);
      reply.set(buildHandshakeEcho(c1), s0s1.length);
      await this.writeRaw(reply);
      checkHandshakeEcho(await this.#readExact(handshakePacketBytes));
    });
  }

  /** Client side of the handshake: send C0+C1, read S0+S1+S2, send C2. */
  async connectHandshake(): Promise<void> {
    await this.#withTimeout(async () => {
      await this.writeRaw(buildHandshakeHello(0));
      const s1 = parseHandshakeHello(await this.#readExact(1 + handshakePacketBytes));
      checkHandshakeEcho(await this.#readExact(handshakePacketBytes));
      await this.writeRaw(buildHandshakeEcho(s1));
    });
  }

  /** Sends Set Chunk Size so every later message goes out in chunks of `outChunkBytes`. */
  announceChunkSize(): Promise<void> {
    return this.send(ChunkStreamId.control, {
      type: MessageType.setChunkSize,
      streamId: 0,
      timestamp: 0,
      payload: buildSetChunkSize(outChunkBytes),
    });
  }

  /**
   * Messages from the peer until it closes. Window size, acknowledgements and pings are
   * handled here; they are yielded too, so callers may log them. Malformed chunking throws
   * ParseError.
   */
  async *messages(): AsyncGenerator<RtmpMessage> {
    if (this.#pending.length > 0) {
      const first = this.#pending;
      this.#pending = new Uint8Array(0);
      yield* this.#handle(this.#reader.push(first));
    }
    for (;;) {
      let n: number | null;
      try {
        n = await this.#conn.read(this.#buf);
      } catch (err) {
        if (this.#closed) return;
        throw err;
      }
      if (n === null) {
        this.close();
        return;
      }
      yield* this.#handle(this.#reader.push(this.#buf.subarray(0, n)));
      const received = this.#reader.bytesReceived;
      if (this.#peerWindowBytes > 0 && received - this.#lastAckBytes >= this.#peerWindowBytes) {
        this.#lastAckBytes = received;
        this.send(ChunkStreamId.control, {
          type: MessageType.acknowledgement,
          streamId: 0,
          timestamp: 0,
          payload: buildAcknowledgement(received),
        }).catch(() => {});
      }
    }
  }

  *#handle(messages: RtmpMessage[]): Generator<RtmpMessage> {
    for (const message of messages) {
      if (message.type === MessageType.windowAckSize) {
        this.#peerWindowBytes = parseWindowAckSize(message.payload);
      } else if (message.type === MessageType.userControl) {
        const { event, value } = parseUserControl(message.payload);
        if (event === UserControlEvent.pingRequest) {
          this.send(ChunkStreamId.control, {
            type: MessageType.userControl,
            streamId: 0,
            timestamp: 0,
            payload: buildUserControl(UserControlEvent.pingResponse, value),
          }).catch(() => {});
        }
      }
      yield message;
    }
  }

  /** Sends one message on chunk stream `csid`. */
  send(csid: number, message: RtmpMessage): Promise<void> {
    return this.writeRaw(writeChunks(csid, message, outChunkBytes));
  }

  /**
   * Writes bytes after the ones already queued. A write the peer does not take within
   * `writeTimeoutMs` closes the connection.
   */
  writeRaw(bytes: Uint8Array): Promise<void> {
    const next = this.#writeChain.then(() => this.#writeAll(bytes));
    this.#writeChain = next.catch(() => {});
    return next;
  }

  async #writeAll(bytes: Uint8Array): Promise<void> {
    if (this.#closed) throw new RtmpClosedError();
    const timer = setTimeout(() => this.close(), writeTimeoutMs);
    try {
      let offset = 0;
      while (offset < bytes.length) offset += await this.#conn.write(bytes.subarray(offset));
    } catch (err) {
      this.close();
      throw this.#closed ? new RtmpClosedError(`RTMP write failed: ${err}`) : err;
    } finally {
      clearTimeout(timer);
    }
  }

  /** Closes the socket; pending reads end and pending writes fail. Idempotent. */
  close(): void {
    if (this.#closed) return;
    this.#closed = true;
    try {
      this.#conn.close();
    } catch {
      // Closed by the peer already.
    }
  }

  async #readExact(bytes: number): Promise<Uint8Array> {
    while (this.#pending.length < bytes) {
      const n = await this.#conn.read(this.#buf);
      if (n === null) throw new TruncatedError("RTMP peer closed during the handshake");
      const merged = new Uint8Array(this.#pending.length + n);
      merged.set(this.#pending);
      merged.set(this.#buf.subarray(0, n), this.#pending.length);
      this.#pending = merged;
    }
    const out = this.#pending.subarray(0, bytes);
    this.#pending = this.#pending.subarray(bytes);
    return out;
  }

  async #withTimeout(fn: () => Promise<void>): Promise<void> {
    const timer = setTimeout(() => this.close(), handshakeTimeoutMs);
    try {
      await fn();
    } catch (err) {
      if (this.#closed) throw new ParseError("RTMP handshake timed out or was cut", { cause: err });
      throw err;
    } finally {
      clearTimeout(timer);
    }
  }
}
