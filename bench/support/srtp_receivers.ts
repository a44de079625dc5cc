/**
 * Verifying receivers for the WebRTC bench that cost far less than werift's JS SRTP: every
 * werift peer of this process gets, in each of its ICE UDP transports, a socket opened
 * through libc over FFI instead of a node:dgram one (werift binds, gathers, checks and
 * nominates on it as usual, so the server sees a real peer and the 5-tuple it selected is
 * this socket's). The socket is read only by a Worker of the pool (srtp_receiver_worker.ts):
 * SRTP is authenticated, decrypted and counted there once the subscriber's keys are handed
 * over (`useKeys`), and STUN, DTLS and SRTCP come back to werift on this thread.
 */
import { Buffer } from "node:buffer";
import { EventEmitter } from "node:events";
import { UdpTransport } from "werift";
import { addressOf } from "../../media/rtp/srtp/libcrypto.ts";
import { srtpProfileFromDtlsId } from "../../media/rtp/srtp/srtp_profile.ts";
import { errno, type LibcUdp, libcUdp, linux } from "../../media/send_engine/libc_udp.ts";
import { afInet, sockaddrIn6Bytes, writeSockaddr } from "../../media/send_engine/sockaddr.ts";
import type { ReceiverCounts, ReceiverReply, ReceiverRequest } from "./srtp_receiver_messages.ts";

/** Receive buffer asked for each socket, in bytes (capped by net.core.rmem_max). */
const receiveBufferBytes = 1024 * 1024;

/** What werift's UdpTransport uses of a node:dgram socket, on an FFI socket a Worker reads. */
export class ReceiverSocket extends EventEmitter {
  readonly fd: number;
  readonly host: string;
  readonly port: number;
  readonly #pool: SrtpReceiverPool;
  readonly #libc: LibcUdp;
  readonly #name = new Uint8Array(sockaddrIn6Bytes);
  #nameLength = 0;
  #lastKey = "";
  #closed = false;

  constructor(pool: SrtpReceiverPool, libc: LibcUdp, host: string) {
    super();
    this.#pool = pool;
    this.#libc = libc;
    const fd = libc.socket(afInet, linux.SOCK_DGRAM | linux.SOCK_NONBLOCK | linux.SOCK_CLOEXEC, 0);
    if (fd < 0) throw new Error(`socket() failed, errno ${errno(libc)}`);
    const scratch = new Uint8Array(4096);
    const view = new DataView(scratch.buffer);
    const address = addressOf(scratch);
    view.setInt32(64, receiveBufferBytes, true);
    libc.setsockopt(fd, linux.SOL_SOCKET, linux.SO_RCVBUF, address + 64n, 4);
    const length = writeSockaddr(scratch, afInet, host, 0);
    view.setUint32(64, sockaddrIn6Bytes, true);
    if (libc.bind(fd, address, length) !== 0 || libc.getsockname(fd, address, address + 64n)) {
      const code = errno(libc);
      libc.close(fd);
      throw new Error(`bind ${host} failed, errno ${code}`);
    }
    this.fd = fd;
    this.host = host;
    this.port = view.getUint16(2);
  }

  /** Sends one datagram (STUN, DTLS, SRTCP from werift). */
  send(data: Uint8Array, port: number, address: string, callback?: (e: Error | null) => void) {
    if (this.#closed) return;
    const key = `${address}:${port}`;
    if (key !== this.#lastKey) {
      this.#nameLength = writeSockaddr(this.#name, afInet, address, port);
      this.#lastKey = key;
    }
    this.#libc.sendto(
      this.fd,
      data,
      BigInt(data.byteLength),
      linux.MSG_DONTWAIT,
      this.#name,
      this.#nameLength,
    );
    if (callback) queueMicrotask(() => callback(null));
  }

  /** The bound address, as node:dgram's `address()` gives it. */
  address(): { address: string; port: number; family: "IPv4" } {
    return { address: this.host, port: this.port, family: "IPv4" };
  }

  /** Takes the socket off its Worker, closes it and emits "close" (once). */
  close(callback?: () => void): void {
    if (this.#closed) return;
    this.#closed = true;
    this.#pool.remove(this);
    this.#libc.close(this.fd);
    if (callback) this.once("close", callback);
    queueMicrotask(() => this.emit("close"));
  }

  /** Emits a datagram the Worker passed back. */
  deliver(data: Uint8Array, address: string, port: number): void {
    if (this.#closed) return;
    this.emit("message", Buffer.from(data.buffer, data.byteOffset, data.byteLength), {
      address,
      port,
      family: "IPv4",
      size: data.byteLength,
    });
  }
}

/** The fields of werift's UdpTransport the socket swap touches. */
interface WeriftUdpTransport {
  socket: EventEmitter & { close(): void };
  options: { interfaceAddresses?: { udp4?: string } };
  init(): Promise<void>;
}

/** The parts of a werift peer connection `useKeys` reads. */
interface WeriftPeer {
  dtlsTransports: {
    srtp?: {
      config: { profile: number; keys: { remoteMasterKey: Buffer; remoteMasterSalt: Buffer } };
    };
    iceTransport: {
      connection: { nominated?: { protocol: { transport?: { socket?: unknown } } } };
    };
  }[];
}

/** Worker threads reading the subscribers' sockets; one pool per process. */
export class SrtpReceiverPool {
  readonly #libc: LibcUdp;
  readonly #workers: Worker[] = [];
  readonly #workerOf = new Map<number, Worker>();
  readonly #sockets = new Map<number, ReceiverSocket>();
  readonly #pending = new Map<number, (counts: ReceiverCounts) => void>();
  #nextWorker = 0;
  /** Called as each Worker reports its loop ended. */
  #stopped = () => {};
  #nextId = 0;

  /** Starts `workers` Workers; `stampOffset`: where each payload's send time sits. */
  constructor(workers: number, stampOffset: number) {
    const { libc, error } = libcUdp();
    if (!libc) throw new Error(error);
    this.#libc = libc;
    for (let i = 0; i < workers; i++) {
      const worker = new Worker(new URL("./srtp_receiver_worker.ts", import.meta.url), {
        type: "module",
      });
      worker.onmessage = (event: MessageEvent<ReceiverReply>) => this.#onReply(event.data);
      this.#post(worker, { type: "init", stampOffset });
      this.#workers.push(worker);
    }
  }

  /**
   * Makes every werift UdpTransport of this process bind a ReceiverSocket of this pool (on
   * its interface address, 127.0.0.1 when none is set).
   */
  install(): void {
    const transport = UdpTransport.prototype as unknown as WeriftUdpTransport;
    const socket = (host: string) => this.socket(host);
    transport.init = function (this: WeriftUdpTransport) {
      // werift's constructor made a dgram socket and listens to it: its listener moves to
      // the receiver socket, and the dgram socket, never bound, is closed.
      const dgram = this.socket;
      const listeners = dgram.listeners("message") as ((...args: unknown[]) => void)[];
      dgram.removeAllListeners("message");
      dgram.close();
      const bound = socket(this.options.interfaceAddresses?.udp4 ?? "127.0.0.1");
      for (const listener of listeners) bound.on("message", listener);
      this.socket = bound;
      return Promise.resolve();
    };
  }

  /** A new socket on `host`, read by the next Worker. */
  socket(host: string): ReceiverSocket {
    const socket = new ReceiverSocket(this, this.#libc, host);
    const worker = this.#workers[this.#nextWorker++ % this.#workers.length];
    this.#workerOf.set(socket.fd, worker);
    this.#sockets.set(socket.fd, socket);
    this.#post(worker, { type: "add", fd: socket.fd });
    return socket;
  }

  /**
   * Hands the SRTP keys of `pc` (a connected werift peer on a pool socket) to the Worker of
   * its nominated socket: from then on its SRTP is counted there. False when the peer has no
   * keys or no pool socket yet.
   */
  useKeys(pc: unknown): boolean {
    const dtls = (pc as WeriftPeer).dtlsTransports[0];
    const config = dtls?.srtp?.config;
    const socket = dtls?.iceTransport.connection.nominated?.protocol.transport?.socket;
    const profile = config && srtpProfileFromDtlsId(config.profile);
    if (!profile || !(socket instanceof ReceiverSocket)) return false;
    const worker = this.#workerOf.get(socket.fd);
    if (!worker) return false;
    this.#post(worker, {
      type: "keys",
      fd: socket.fd,
      profile,
      masterKey: new Uint8Array(config.keys.remoteMasterKey),
      masterSalt: new Uint8Array(config.keys.remoteMasterSalt),
    });
    return true;
  }

  /** Takes `socket` off its Worker. */
  remove(socket: ReceiverSocket): void {
    const worker = this.#workerOf.get(socket.fd);
    this.#workerOf.delete(socket.fd);
    this.#sockets.delete(socket.fd);
    if (worker) this.#post(worker, { type: "remove", fd: socket.fd });
  }

  /** The Workers' counts added up, and their latency samples since the last call. */
  async counts(): Promise<ReceiverCounts> {
    const all = await Promise.all(this.#workers.map((worker) => {
      const id = this.#nextId++;
      return new Promise<ReceiverCounts>((resolve) => {
        this.#pending.set(id, resolve);
        this.#post(worker, { type: "stats", id });
      });
    }));
    return {
      received: all.reduce((n, c) => n + c.received, 0),
      failed: all.reduce((n, c) => n + c.failed, 0),
      gaps: all.reduce((n, c) => n + c.gaps, 0),
      waiting: all.reduce((n, c) => n + c.waiting, 0),
      silent: all.reduce((n, c) => n + c.silent, 0),
      latencies: all.flatMap((c) => c.latencies),
    };
  }

  /** Ends the Workers once their loops have stopped (close the sockets first). */
  async close(): Promise<void> {
    const stopped = new Promise<void>((resolve) => {
      let left = this.#workers.length;
      this.#stopped = () => {
        if (--left === 0) resolve();
      };
      if (left === 0) resolve();
    });
    for (const worker of this.#workers) this.#post(worker, { type: "stop" });
    await stopped;
    for (const worker of this.#workers) worker.terminate();
    this.#workers.length = 0;
  }

  #post(worker: Worker, request: ReceiverRequest): void {
    worker.postMessage(request);
  }

  #onReply(reply: ReceiverReply): void {
    if (reply.type === "datagram") {
      this.#sockets.get(reply.fd)?.deliver(reply.data, reply.address, reply.port);
    } else if (reply.type === "stats") {
      this.#pending.get(reply.id)?.(reply);
      this.#pending.delete(reply.id);
    } else {
      this.#stopped();
    }
  }
}
