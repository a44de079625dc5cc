/**
 * The ICE mux: one UDP socket, opened through libc over FFI, that every server-side WebRTC
 * peer shares. Browsers accept media only from the ICE-selected local candidate; with one
 * socket for all peers, the send engine's Workers can `sendmmsg` SRTP from that very
 * address on this socket's process-wide `fd`, batching across subscribers, and operators
 * open one UDP port.
 *
 * Demultiplexing: a datagram from a remote address bound to a peer's socket goes to it. From
 * an unknown address only a STUN Binding request whose USERNAME starts with a registered
 * local ufrag is routed, and its address is then bound to that peer (a browser checks from
 * each of its candidates; each gets bound). A peer's own send to a new address binds it too,
 * so the answers to its checks come back. Anything else is dropped and counted.
 *
 * The socket is non-blocking (so the engine's sends never wait): the receive loop waits in a
 * `poll` run on a thread of its own with a short timeout, so `close` can end it, then drains
 * the socket with `recvmmsg` in batches.
 */
import { Buffer } from "node:buffer";
import { EventEmitter } from "node:events";
import { addressOf } from "../../rtp/srtp/libcrypto.ts";
import { errno, type LibcUdp, libcUdp, linux } from "../../send_engine/libc_udp.ts";
import {
  afInet,
  afInet6,
  ipv4Bytes,
  readSockaddr,
  sockaddrIn6Bytes,
  writeSockaddr,
} from "../../send_engine/sockaddr.ts";
import { bindingRequestUsername, localUfragOf, looksLikeStun } from "./stun_username.ts";

/** Longest wait of one `poll`, in ms: how long `close` may wait for the loop to end. */
const pollTimeoutMs = 100;
/** Datagrams one `recvmmsg` takes. */
const batchDatagrams = 32;
/** `recvmmsg` calls per wake before the loop yields to the event loop (a flood never starves it). */
const roundsPerWake = 8;
/** Room for one datagram; a longer one is truncated, counted malformed and dropped. */
const slotBytes = 8192;
/** Socket buffers asked for, in bytes (the kernel caps them at net.core.[rw]mem_max). */
const socketBufferBytes = 4 * 1024 * 1024;

const mmsghdrBytes = 64;
const iovecBytes = 16;
const nameSlotBytes = 32;
const iovOffset = batchDatagrams * mmsghdrBytes;
const nameOffset = iovOffset + batchDatagrams * iovecBytes;
const pollOffset = nameOffset + batchDatagrams * nameSlotBytes;
/** At least 4 KiB, so V8 keeps the control memory off its heap and never moves it. */
const controlBytes = Math.max(4096, pollOffset + 8);

/** What `IceMux.open` takes. */
export interface IceMuxOptions {
  /** Address to bind: an IPv4 one gives an IPv4 socket, an IPv6 one a dual-stack socket. */
  host: string;
  /** Port to bind; 0 takes an ephemeral one. */
  port: number;
}

/** Counters of an IceMux (monotonic). */
export interface IceMuxCounters {
  /** Datagrams received and delivered to a peer. */
  datagramsIn: number;
  /** Datagrams sent for werift (STUN, DTLS, SRTCP, werift-path SRTP). */
  datagramsOut: number;
  /** Datagrams from an address no peer is bound to that were not a Binding request of one. */
  droppedUnknownSource: number;
  /** Datagrams truncated or from an address family the mux does not know. */
  droppedMalformed: number;
  /** Sends dropped because the socket buffer was full or the address was not an IP. */
  sendDropped: number;
}

/** A sender's address as text and its `address:port` key. */
interface RemoteKey {
  address: string;
  port: number;
  family: "IPv4" | "IPv6";
  key: string;
}

/** IPv4 senders whose text the mux keeps. */
const maxCachedRemotes = 4096;

/** Address details werift's UdpTransport reads from a "message" event. */
interface RemoteInfo {
  address: string;
  port: number;
  family: "IPv4" | "IPv6";
  size: number;
}

/** One ICE mux socket. */
export class IceMux {
  static #open = 0;
  /** The socket's descriptor: process-wide, so Workers may `sendmmsg` on it. */
  readonly fd: number;
  /** Bound address. */
  readonly host: string;
  /** Bound port. */
  readonly port: number;
  /** AF_INET or AF_INET6: the family of the sockaddrs a sender writes for this socket. */
  readonly family: number;
  readonly #libc: LibcUdp;
  readonly #control = new Uint8Array(controlBytes);
  readonly #controlView = new DataView(this.#control.buffer);
  /** Native address of the control memory (it never moves: see controlBytes). */
  readonly #controlAddress: bigint;
  readonly #data = new Uint8Array(batchDatagrams * slotBytes);
  readonly #byUfrag = new Map<string, MuxSocket[]>();
  readonly #byRemote = new Map<string, MuxSocket>();
  readonly #sockets = new Set<MuxSocket>();
  /** Text of recent IPv4 senders, by address * 65536 + port. */
  readonly #ipv4Remotes = new Map<number, RemoteKey>();
  readonly #counters: IceMuxCounters = {
    datagramsIn: 0,
    datagramsOut: 0,
    droppedUnknownSource: 0,
    droppedMalformed: 0,
    sendDropped: 0,
  };
  #closing = false;
  readonly #loop: Promise<void>;
  #closed: Promise<void> | undefined;

  private constructor(libc: LibcUdp, fd: number, host: string, port: number, family: number) {
    this.#libc = libc;
    this.fd = fd;
    this.host = host;
    this.port = port;
    this.family = family;
    const view = this.#controlView;
    this.#controlAddress = addressOf(this.#control);
    const controlAddress = Number(this.#controlAddress);
    const dataAddress = Number(addressOf(this.#data));
    for (let i = 0; i < batchDatagrams; i++) {
      const msg = i * mmsghdrBytes;
      setPointer(view, msg, controlAddress + nameOffset + i * nameSlotBytes);
      setPointer(view, msg + 16, controlAddress + iovOffset + i * iovecBytes);
      view.setUint32(msg + 24, 1, true);
      setPointer(view, iovOffset + i * iovecBytes, dataAddress + i * slotBytes);
      view.setUint32(iovOffset + i * iovecBytes + 8, slotBytes, true);
    }
    view.setInt32(pollOffset, fd, true);
    view.setInt16(pollOffset + 4, linux.POLLIN, true);
    IceMux.#open++;
    this.#loop = this.#receive();
  }

  /**
   * Opens and binds the socket and starts receiving. Throws Deno.errors.AddrInUse when the
   * port is taken, an Error when libc cannot be loaded over FFI or the socket calls fail.
   */
  static open(options: IceMuxOptions): IceMux {
    const { libc, error } = libcUdp();
    if (!libc) throw new Error(`ICE mux: libc over FFI is unavailable: ${error}`);
    const family = ipv4Bytes(options.host) ? afInet : afInet6;
    const scratch = new Uint8Array(4096);
    // Throws RangeError before a socket exists when the host is no IP address.
    const nameLength = writeSockaddr(scratch, family, options.host, options.port);
    const fd = libc.socket(family, linux.SOCK_DGRAM | linux.SOCK_NONBLOCK | linux.SOCK_CLOEXEC, 0);
    if (fd < 0) throw new Error(`ICE mux: socket() failed, errno ${errno(libc)}`);
    const scratchAddress = addressOf(scratch);
    const view = new DataView(scratch.buffer);
    const setInt = (level: number, option: number, value: number) => {
      view.setInt32(64, value, true);
      libc.setsockopt(fd, level, option, scratchAddress + 64n, 4);
    };
    if (family === afInet6) setInt(linux.IPPROTO_IPV6, linux.IPV6_V6ONLY, 0);
    setInt(linux.SOL_SOCKET, linux.SO_RCVBUF, socketBufferBytes);
    setInt(linux.SOL_SOCKET, linux.SO_SNDBUF, socketBufferBytes);
    const where = `${options.host}:${options.port}`;
    if (libc.bind(fd, scratchAddress, nameLength) !== 0) {
      const code = errno(libc);
      libc.close(fd);
      if (code === linux.EADDRINUSE) {
        throw new Deno.errors.AddrInUse(`ICE mux: UDP ${where} is already in use`);
      }
      throw new Error(`ICE mux: bind ${where} failed, errno ${code}`);
    }
    view.setUint32(64, sockaddrIn6Bytes, true);
    if (libc.getsockname(fd, scratchAddress, scratchAddress + 64n) !== 0) {
      const code = errno(libc);
      libc.close(fd);
      throw new Error(`ICE mux: getsockname failed, errno ${code}`);
    }
    return new IceMux(libc, fd, options.host, view.getUint16(2), family);
  }

  /**
   * Opens the mux on the first port of `portMin`..`portMax` that is free; throws
   * Deno.errors.AddrInUse when none is.
   */
  static openInRange(host: string, portMin: number, portMax: number): IceMux {
    for (let port = portMin; port <= portMax; port++) {
      try {
        return IceMux.open({ host, port });
      } catch (err) {
        if (!(err instanceof Deno.errors.AddrInUse)) throw err;
      }
    }
    throw new Deno.errors.AddrInUse(`ICE mux: no free UDP port in ${portMin}-${portMax}`);
  }

  /** ICE mux sockets of this process that are open (a gauge for leak checks). */
  static get openCount(): number {
    return IceMux.#open;
  }

  /** A copy of the counters. */
  get counters(): IceMuxCounters {
    return { ...this.#counters };
  }

  /** Peer sockets open on the mux. */
  get socketCount(): number {
    return this.#sockets.size;
  }

  /** A dgram-like socket for one werift transport; it gets datagrams once it has a ufrag. */
  socket(): MuxSocket {
    if (this.#closing) throw new Error("ICE mux is closed");
    const socket = new MuxSocket(this);
    this.#sockets.add(socket);
    return socket;
  }

  /** Stops receiving and closes the socket; resolves once both are done (safe twice). */
  close(): Promise<void> {
    this.#closed ??= (async () => {
      this.#closing = true;
      await this.#loop;
      this.#libc.close(this.fd);
      IceMux.#open--;
      this.#byUfrag.clear();
      this.#byRemote.clear();
      this.#sockets.clear();
    })();
    return this.#closed;
  }

  /** Routes Binding requests naming `ufrag` as local ufrag to `socket`. */
  registerUfrag(socket: MuxSocket, ufrag: string): void {
    const sockets = this.#byUfrag.get(ufrag) ?? [];
    if (!sockets.includes(socket)) sockets.push(socket);
    this.#byUfrag.set(ufrag, sockets);
  }

  /** Forgets every ufrag and remote of `socket`. */
  unregister(socket: MuxSocket, ufrags: Iterable<string>, remotes: Iterable<string>): void {
    this.#sockets.delete(socket);
    for (const ufrag of ufrags) {
      const sockets = this.#byUfrag.get(ufrag)?.filter((s) => s !== socket) ?? [];
      if (sockets.length) this.#byUfrag.set(ufrag, sockets);
      else this.#byUfrag.delete(ufrag);
    }
    for (const remote of remotes) {
      if (this.#byRemote.get(remote) === socket) this.#byRemote.delete(remote);
    }
  }

  /**
   * Sends one datagram to the sockaddr `name` for `socket`, binding that remote to it when
   * no peer has it; a full socket buffer drops it (counted). Never throws.
   */
  sendFrom(socket: MuxSocket, data: Uint8Array, name: Uint8Array, nameLength: number, key: string) {
    if (this.#closing) return;
    if (!this.#byRemote.has(key)) this.#bind(key, socket);
    const sent = this.#libc.sendto(
      this.fd,
      data,
      BigInt(data.byteLength),
      linux.MSG_DONTWAIT,
      name,
      nameLength,
    );
    if (sent < 0) this.#counters.sendDropped++;
    else this.#counters.datagramsOut++;
  }

  /** Counts a send that could not be made (no IP address). */
  countSendDropped(): void {
    this.#counters.sendDropped++;
  }

  #bind(key: string, socket: MuxSocket): void {
    this.#byRemote.set(key, socket);
    socket.remotes.add(key);
  }

  async #receive(): Promise<void> {
    const pollAddress = addressOf(this.#control) + BigInt(pollOffset);
    while (!this.#closing) {
      const ready = await this.#libc.poll(pollAddress, 1n, pollTimeoutMs);
      if (this.#closing) return;
      if (ready > 0) this.#drain();
    }
  }

  /** Reads what the socket holds, `roundsPerWake` batches at most. */
  #drain(): void {
    const view = this.#controlView;
    const mmsgAddress = this.#controlAddress;
    for (let round = 0; round < roundsPerWake; round++) {
      for (let i = 0; i < batchDatagrams; i++) {
        view.setUint32(i * mmsghdrBytes + 8, nameSlotBytes, true);
        view.setInt32(i * mmsghdrBytes + 48, 0, true);
      }
      const count = this.#libc.recvmmsg(
        this.fd,
        mmsgAddress,
        batchDatagrams,
        linux.MSG_DONTWAIT,
        0n,
      );
      if (count <= 0) return;
      for (let i = 0; i < count; i++) this.#dispatch(i);
      if (count < batchDatagrams) return;
    }
  }

  /** Hands datagram `i` of the batch to its peer, or drops it. */
  #dispatch(i: number): void {
    const view = this.#controlView;
    const msg = i * mmsghdrBytes;
    const length = view.getUint32(msg + 56, true);
    if ((view.getInt32(msg + 48, true) & linux.MSG_TRUNC) !== 0) {
      this.#counters.droppedMalformed++;
      return;
    }
    const nameStart = nameOffset + i * nameSlotBytes;
    const remote = this.#remoteAt(nameStart);
    if (!remote) {
      this.#counters.droppedMalformed++;
      return;
    }
    const key = remote.key;
    const data = this.#data.subarray(i * slotBytes, i * slotBytes + length);
    let socket = this.#byRemote.get(key);
    if (looksLikeStun(data)) {
      // A Binding request naming a peer's ufrag goes to that peer even from a bound address:
      // a browser's port may have been freed and taken again by another of its connections.
      const username = bindingRequestUsername(data);
      const ufrag = username === undefined ? undefined : localUfragOf(username);
      const named = ufrag === undefined ? undefined : this.#byUfrag.get(ufrag)?.[0];
      if (named && named !== socket) {
        this.#byRemote.get(key)?.remotes.delete(key);
        this.#bind(key, named);
        socket = named;
      }
    }
    if (!socket) {
      this.#counters.droppedUnknownSource++;
      return;
    }
    this.#counters.datagramsIn++;
    socket.deliver(Buffer.from(data), {
      address: remote.address,
      port: remote.port,
      family: remote.family,
      size: length,
    });
  }

  /**
   * The sender of the datagram whose sockaddr is at `nameStart` of the control memory. An
   * IPv4 sender's text is looked up by its address and port as one number, so a datagram
   * costs no string building (at SFU rates, thousands a second from a few senders).
   */
  #remoteAt(nameStart: number): RemoteKey | undefined {
    const view = this.#controlView;
    if (view.getUint16(nameStart, true) === afInet) {
      const number = view.getUint32(nameStart + 4) * 65536 + view.getUint16(nameStart + 2);
      let remote = this.#ipv4Remotes.get(number);
      if (!remote) {
        const text = readSockaddr(this.#control.subarray(nameStart, nameStart + nameSlotBytes))!;
        remote = { ...text, key: `${text.address}:${text.port}` };
        // Bounded: senders come and go (browsers' ports); a rebuild costs one string each.
        if (this.#ipv4Remotes.size >= maxCachedRemotes) this.#ipv4Remotes.clear();
        this.#ipv4Remotes.set(number, remote);
      }
      return remote;
    }
    const text = readSockaddr(this.#control.subarray(nameStart, nameStart + nameSlotBytes));
    return text && { ...text, key: `${text.address}:${text.port}` };
  }
}

/**
 * What werift's UdpTransport uses of a node:dgram socket (`send`, `address`, `close`, the
 * "message" and "close" events), backed by the mux.
 */
export class MuxSocket extends EventEmitter {
  /** Local ufrags registered for this socket. */
  readonly ufrags = new Set<string>();
  /** Remote `address:port` keys bound to this socket. */
  readonly remotes = new Set<string>();
  readonly #mux: IceMux;
  readonly #name = new Uint8Array(sockaddrIn6Bytes);
  #nameLength = 0;
  #nameKey = "";
  #lastAddress = "";
  #lastPort = -1;
  #closed = false;

  constructor(mux: IceMux) {
    super();
    this.#mux = mux;
  }

  /** The mux this socket sends on. */
  get mux(): IceMux {
    return this.#mux;
  }

  /** Lets Binding requests naming `ufrag` (this transport's local ufrag) reach this socket. */
  addUfrag(ufrag: string): void {
    if (this.#closed || this.ufrags.has(ufrag)) return;
    this.ufrags.add(ufrag);
    this.#mux.registerUfrag(this, ufrag);
  }

  /** Sends `data` to `address`:`port`; `callback` gets an error when it is not an IP address. */
  send(
    data: Uint8Array,
    port: number,
    address: string,
    callback?: (error: Error | null) => void,
  ): void {
    if (this.#closed) return;
    if (port !== this.#lastPort || address !== this.#lastAddress) {
      try {
        this.#nameLength = writeSockaddr(this.#name, this.#mux.family, address, port);
      } catch (err) {
        this.#mux.countSendDropped();
        if (callback) queueMicrotask(() => callback(err as Error));
        return;
      }
      this.#lastAddress = address;
      this.#lastPort = port;
      this.#nameKey = `${address}:${port}`;
    }
    this.#mux.sendFrom(this, data, this.#name, this.#nameLength, this.#nameKey);
    if (callback) queueMicrotask(() => callback(null));
  }

  /** The mux's address, as node:dgram's `address()` gives it. */
  address(): { address: string; port: number; family: "IPv4" | "IPv6" } {
    return {
      address: this.#mux.host,
      port: this.#mux.port,
      family: this.#mux.family === afInet ? "IPv4" : "IPv6",
    };
  }

  /** Unregisters from the mux and emits "close" (once). */
  close(callback?: () => void): void {
    if (this.#closed) return;
    this.#closed = true;
    this.#mux.unregister(this, this.ufrags, this.remotes);
    this.ufrags.clear();
    this.remotes.clear();
    if (callback) this.once("close", callback);
    queueMicrotask(() => this.emit("close"));
  }

  /** Emits a received datagram (called by the mux). */
  deliver(data: Buffer, info: RemoteInfo): void {
    if (!this.#closed) this.emit("message", data, info);
  }
}

/** Writes a 64-bit little-endian pointer. */
function setPointer(view: DataView, offset: number, address: number): void {
  view.setUint32(offset, address >>> 0, true);
  view.setUint32(offset + 4, Math.floor(address / 4294967296), true);
}
