/**
 * One RTMP connection over a Deno TCP connection: handshake, the read loop that reassembles
 * messages and answers protocol control (acknowledgements, pings), and ordered writes with a
 * timeout so a peer that stops reading is dropped instead of holding its writer forever.
 * Writes issued while one is in flight go out together as one write, and one interval timer
 * shared by every connection watches them, so a player costs one write and no timer per frame.
 * With `fdSend` (the `ffi` transport, fd_send.ts) a write first goes out with one synchronous
 * send(2) on the socket's descriptor, and only what the socket does not take at once through
 * Deno's write; the callbacks of the writes done at once run together in one microtask.
 */
import { ParseError, TruncatedError } from "../../../core/errors.ts";
import { ChunkReader } from "./chunk_reader.ts";
import { joinChunkBytes, outChunkBytes, writeChunks } from "./chunk_writer.ts";
import { findDescriptor, sendNow } from "./fd_send.ts";
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

/**
 * Size of the buffer a connection first reads messages into, in bytes: what a player sends
 * (commands, acknowledgements, pings) takes a read or a few, and the buffer stays pinned
 * under the pending read for the connection's life, so players stay small. The handshake
 * reads into buffers of its own.
 */
export const readBufferMinBytes = 256;
/** Size the read buffer doubles up to while reads fill it (publishers), in bytes. */
export const readBufferMaxBytes = 64 * 1024;
/** Longest a single write may wait for the peer to take bytes, in milliseconds. */
export const writeTimeoutMs = 10_000;
/**
 * How often the connections with a write in flight are checked against their write timeout,
 * in milliseconds: a write is cut between its timeout and this much later.
 */
export const writeCheckIntervalMs = 500;
/** Window acknowledgement size announced to peers, in bytes (what nginx-rtmp announces). */
export const windowAckBytes = 5_000_000;

const noBytes: Uint8Array = new Uint8Array(0);

/** The peer closed the connection, or it was closed locally. */
export class RtmpClosedError extends Error {
  constructor(message = "RTMP connection closed") {
    super(message);
    this.name = "RtmpClosedError";
  }
}

/** Called once bytes are written, or with the error that closed the connection. */
export type WriteDone = (err?: RtmpClosedError) => void;

/** Options of an RtmpConn. */
export interface RtmpConnOptions {
  /** Longest a write may wait for the peer to take bytes, in milliseconds (`writeTimeoutMs`). */
  readonly writeTimeoutMs?: number;
  /**
   * Write with send(2) on the socket's descriptor once it is found (see fd_send.ts; the caller
   * checked `fdSendSupport`). Default false: Deno's writes only.
   */
  readonly fdSend?: boolean;
}

/** An RTMP connection: bytes in, messages out; messages in, chunks out. */
export class RtmpConn {
  /**
   * Open connections that have written: one interval timer checks all their writes. A timer
   * of each connection's own (re-armed while it wrote) held about half a KiB per idle player.
   */
  static #watched = new Set<RtmpConn>();
  static #checker: ReturnType<typeof setInterval> | undefined;
  /**
   * Callbacks of writes that send(2) took whole, run together in one microtask: a caller
   * (the fan-out) starts its next write from the callback, which must not recurse into this.
   */
  static #sentDone: WriteDone[] = [];
  static #sentDoneQueued = false;

  static #runSentDone = (): void => {
    const done = RtmpConn.#sentDone;
    RtmpConn.#sentDone = [];
    RtmpConn.#sentDoneQueued = false;
    for (const d of done) d();
  };

  /** Runs `done` (one callback or several) with the others of this turn's sends. */
  static #afterSend(done: WriteDone | WriteDone[]): void {
    if (Array.isArray(done)) RtmpConn.#sentDone.push(...done);
    else RtmpConn.#sentDone.push(done);
    if (!RtmpConn.#sentDoneQueued) {
      RtmpConn.#sentDoneQueued = true;
      queueMicrotask(RtmpConn.#runSentDone);
    }
  }

  /** Closes the watched connections whose write has waited longer than their timeout. */
  static #checkWrites = (): void => {
    const now = performance.now();
    for (const conn of RtmpConn.#watched) {
      if (conn.#writeStartMs >= 0 && now - conn.#writeStartMs >= conn.#writeTimeoutMs) conn.close();
    }
  };

  readonly #conn: Deno.Conn;
  readonly #reader = new ChunkReader();
  #buf = new Uint8Array(readBufferMinBytes);
  #peerWindowBytes = 0;
  #lastAckBytes = 0;
  /** Start of the write in flight (performance.now() ms), or -1 when none is. */
  #writeStartMs = -1;
  readonly #writeTimeoutMs: number;
  /**
   * Bytes given while a write was in flight, sent next as one write, and their callbacks;
   * made when first needed (players rarely queue).
   */
  #queued: Uint8Array[] | undefined;
  #queuedDone: WriteDone[] | undefined;
  /** Bytes of the write in flight, and how many of them the socket has taken. */
  #inFlight = noBytes;
  #inFlightOffset = 0;
  /**
   * Callbacks of the write in flight: the one of a lone write (a player's, so no list is
   * made per write), or those of queued writes sent together.
   */
  #inFlightDone: WriteDone | undefined;
  #inFlightJoined: WriteDone[] | undefined;
  #closed = false;
  /** The socket's descriptor for send(2) while the connection is open, else -1. */
  #fd = -1;

  constructor(conn: Deno.Conn, options: RtmpConnOptions = {}) {
    this.#conn = conn;
    this.#writeTimeoutMs = options.writeTimeoutMs ?? writeTimeoutMs;
    if (options.fdSend) {
      findDescriptor(conn as Deno.TcpConn, (fd) => {
        if (!this.#closed) this.#fd = fd;
      });
    }
  }

  /** Whether writes go out with send(2) on the socket's descriptor (found, and open). */
  get sendsOnDescriptor(): boolean {
    return this.#fd >= 0;
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
      yield* this.#handle(this.#take(n));
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

  /**
   * The messages completed by the `n` bytes just read. A view of the read buffer made here is
   * not held in the message loop's frame while it waits for the next read.
   */
  #take(n: number): RtmpMessage[] {
    const bytes = this.#buf.subarray(0, n);
    // The chunk reader copies what it keeps, so a full buffer can be swapped for a larger one.
    if (n === this.#buf.length && n < readBufferMaxBytes) this.#buf = new Uint8Array(2 * n);
    return this.#reader.push(bytes);
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
   * Writes bytes after the ones already given; settles when they are written. A write the
   * peer does not take within `writeTimeoutMs` closes the connection. `bytes` must not change
   * until then.
   */
  writeRaw(bytes: Uint8Array): Promise<void> {
    const { promise, resolve, reject } = Promise.withResolvers<void>();
    this.writeThen(bytes, (err) => err ? reject(err) : resolve());
    return promise;
  }

  /**
   * `writeRaw` with a callback instead of a promise, for players, which write dozens of times
   * a second: `done` runs once the bytes are written, or with the error.
   */
  writeThen(bytes: Uint8Array, done: WriteDone): void {
    if (this.#closed) {
      queueMicrotask(() => done(new RtmpClosedError()));
      return;
    }
    if (this.#writeStartMs >= 0) {
      (this.#queued ??= []).push(bytes);
      (this.#queuedDone ??= []).push(done);
      return;
    }
    if (this.#fd >= 0) {
      const n = sendNow(this.#fd, bytes, 0);
      if (n === bytes.length) {
        RtmpConn.#afterSend(done);
        return;
      }
      this.#inFlightDone = done;
      this.#write(bytes, n);
      return;
    }
    this.#inFlightDone = done;
    this.#write(bytes, 0);
  }

  // Writes chain bound handlers instead of running an async function each: players write
  // dozens of times a second, and each call's closures and frames were garbage to collect.
  // `offset`: bytes of `bytes` already sent.
  #write(bytes: Uint8Array, offset: number): void {
    this.#writeStartMs = performance.now();
    if (!RtmpConn.#watched.has(this)) {
      RtmpConn.#watched.add(this);
      RtmpConn.#checker ??= setInterval(RtmpConn.#checkWrites, writeCheckIntervalMs);
    }
    this.#inFlight = bytes;
    this.#inFlightOffset = offset;
    this.#conn.write(offset === 0 ? bytes : bytes.subarray(offset)).then(
      this.#wrote,
      this.#writeFailed,
    );
  }

  /** Continues a partial write; once all is written, starts what was queued meanwhile. */
  #wrote = (n: number): void => {
    this.#inFlightOffset += n;
    const bytes = this.#inFlight;
    if (this.#inFlightOffset < bytes.length) {
      this.#conn.write(bytes.subarray(this.#inFlightOffset)).then(this.#wrote, this.#writeFailed);
      return;
    }
    this.#writeDone(undefined);
  };

  #writeFailed = (err: unknown): void => {
    this.close();
    this.#writeDone(
      err instanceof RtmpClosedError ? err : new RtmpClosedError(`RTMP write failed: ${err}`),
    );
  };

  /**
   * Ends the write in flight: starts what was queued meanwhile (so writes its callbacks give
   * queue behind it), then runs the callbacks of the write that ended.
   */
  #writeDone(err: RtmpClosedError | undefined): void {
    this.#writeStartMs = -1;
    this.#inFlight = noBytes;
    const done = this.#inFlightDone;
    const joined = this.#inFlightJoined;
    this.#inFlightDone = undefined;
    this.#inFlightJoined = undefined;
    let failed: WriteDone[] | undefined;
    const queued = this.#queued;
    const queuedDone = this.#queuedDone;
    if (queued && queuedDone) {
      this.#queued = undefined;
      this.#queuedDone = undefined;
      if (this.#closed) failed = queuedDone;
      else {
        const bytes = queued.length === 1 ? queued[0] : joinChunkBytes(queued);
        // The socket took the last bytes, so it likely has room: try it at once.
        const sent = this.#fd >= 0 ? sendNow(this.#fd, bytes, 0) : 0;
        if (sent === bytes.length) RtmpConn.#afterSend(queuedDone);
        else {
          this.#inFlightJoined = queuedDone;
          this.#write(bytes, sent);
        }
      }
    }
    done?.(err);
    if (joined) { for (const d of joined) d(err); }
    if (failed) { for (const d of failed) d(err ?? new RtmpClosedError()); }
  }

  /** Closes the socket; pending reads end and pending writes fail. Idempotent. */
  close(): void {
    if (this.#closed) return;
    this.#closed = true;
    // Deno closes the descriptor now or soon; its number may then be another socket's.
    this.#fd = -1;
    if (RtmpConn.#watched.delete(this) && RtmpConn.#watched.size === 0) {
      clearInterval(RtmpConn.#checker);
      RtmpConn.#checker = undefined;
    }
    try {
      this.#conn.close();
    } catch {
      // Closed by the peer already.
    }
  }

  /**
   * Exactly `bytes` bytes, read straight into a buffer of that size: nothing past the
   * handshake is read here, so no leftover of it is kept for the message loop.
   */
  async #readExact(bytes: number): Promise<Uint8Array> {
    const out = new Uint8Array(bytes);
    for (let filled = 0; filled < bytes;) {
      const n = await this.#conn.read(out.subarray(filled));
      if (n === null) throw new TruncatedError("RTMP peer closed during the handshake");
      filled += n;
    }
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
