/**
 * A UDP socket for SRT: node:dgram (Deno.listenDatagram still needs --unstable-net, which the
 * server's start task does not pass), with a close that waits for queued sends, so a shutdown
 * sent just before closing still leaves.
 */
import dgram from "node:dgram";
import { enlargeReceiveBuffer } from "./receive_buffer.ts";

/** Kernel receive buffer asked for, bytes: libsrt's default (see receive_buffer.ts). */
const receiveBufferBytes = 12 * 1024 * 1024;
/**
 * Buffer each read of Deno's node:dgram allocates, bytes (its `recvBufferSize`, 64 KiB by
 * default): an SRT datagram is at most an MTU.
 */
const datagramBufferBytes = 2048;

/** Sender address of a received datagram. */
export interface DatagramSource {
  hostname: string;
  port: number;
}

/** A bound UDP socket. */
export class DatagramSocket {
  /** The bound port. */
  readonly port: number;
  /** Kernel receive buffer granted, bytes; undefined when it could not be set (no FFI). */
  receiveBufferBytes: number | undefined;
  #socket: dgram.Socket;
  #lastSend: Promise<void> | undefined;
  #closing: Promise<void> | undefined;

  private constructor(socket: dgram.Socket) {
    this.#socket = socket;
    this.port = socket.address().port;
  }

  /** Binds `hostname:port` (0: any free port); datagrams go to `onDatagram`. */
  static async bind(
    hostname: string,
    port: number,
    onDatagram: (data: Uint8Array, source: DatagramSource) => void,
  ): Promise<DatagramSocket> {
    const socket = dgram.createSocket({
      type: hostname.includes(":") ? "udp6" : "udp4",
      recvBufferSize: datagramBufferBytes,
    });
    await new Promise<void>((resolve, reject) => {
      socket.once("error", reject);
      socket.bind(port, hostname, () => {
        socket.off("error", reject);
        resolve();
      });
    });
    socket.on("error", () => {}); // ICMP unreachable on send: the peer's timers handle it
    socket.on("message", (msg: Uint8Array, info: dgram.RemoteInfo) => {
      onDatagram(msg, { hostname: info.address, port: info.port });
    });
    const datagramSocket = new DatagramSocket(socket);
    datagramSocket.receiveBufferBytes = enlargeReceiveBuffer(
      datagramSocket.port,
      receiveBufferBytes,
    );
    return datagramSocket;
  }

  /** Queues one datagram. */
  send(data: Uint8Array, port: number, hostname: string): void {
    if (this.#closing) return;
    this.#lastSend = new Promise((resolve) =>
      this.#socket.send(data, port, hostname, () => resolve())
    );
  }

  /** Closes once the queued datagrams left. Idempotent. */
  close(): Promise<void> {
    this.#closing ??= (async () => {
      await this.#lastSend;
      await new Promise<void>((resolve) => this.#socket.close(() => resolve()));
    })();
    return this.#closing;
  }
}
