/**
 * A non-blocking UDP socket driven through libc over FFI: datagrams queued from one memory
 * slab go out in `sendmmsg` batches, and a destination's consecutive equal-size datagrams
 * that lie back to back in the slab go out as one UDP GSO message (UDP_SEGMENT) where the
 * kernel has it (fastpath.md designs 3d/3e). A full socket buffer drops the datagram and
 * counts it against its destination; nothing ever waits.
 */
import { addressOf } from "../rtp/srtp/libcrypto.ts";
import { errno, type LibcUdp, libcUdp, linux } from "./libc_udp.ts";
import { afInet, afInet6, ipv4Bytes, writeSockaddr } from "./sockaddr.ts";

/** Options of UdpBatchSender.open. */
export interface UdpBatchSenderOptions {
  /** Memory the caller writes datagrams into (at least 4 KiB, so V8 never moves it). */
  data: Uint8Array;
  /** Address to bind (default 0.0.0.0); an IPv6 one gives a dual-stack socket. */
  bindHost?: string;
  /** Port to bind (default 0: any). */
  port?: number;
  /** SO_SNDBUF to ask for, in bytes (default: the system's). */
  sendBufferBytes?: number;
  /** Use UDP GSO when the kernel supports it (default true). */
  gso?: boolean;
  /** Messages per sendmmsg call (default 64). */
  batchMessages?: number;
  /**
   * A bound UDP socket of someone else's (the ICE mux) to send on instead of opening one:
   * datagrams then leave from the port the peers' ICE selected; it is never closed here.
   */
  fd?: number;
}

const mmsghdrBytes = 64;
const iovecBytes = 16;
/** CMSG_SPACE(sizeof(uint16_t)) on 64-bit Linux. */
const cmsgBytes = 24;
const destinationBytes = 32;
const destinationsPerChunk = 128;
/** Segments per GSO message (UDP_MAX_SEGMENTS is 64 on older kernels) and its byte limit. */
const maxGsoSegments = 64;
const maxGsoBytes = 65_000;

const hiWord = 4294967296;

/** Datagrams sent and dropped for one destination. */
export interface DestinationStats {
  sent: number;
  dropped: number;
}

/** One FFI UDP socket with its sendmmsg queue. */
export class UdpBatchSender {
  static #openSockets = 0;
  /** Local port the socket is bound to. */
  readonly port: number;
  /** AF_INET or AF_INET6. */
  readonly family: number;
  readonly #libc: LibcUdp;
  #fd: number;
  /** The socket was handed in (`fd` option): close leaves it open. */
  readonly #borrowed: boolean;
  #gso: boolean;
  readonly #batch: number;
  readonly #data: Uint8Array;
  readonly #dataAddress: number;
  readonly #control: Uint8Array;
  readonly #controlView: DataView;
  readonly #controlAddress: number;
  readonly #mmsgAddress: bigint;
  readonly #splitOffset: number;
  readonly #iovOffset: number;
  readonly #cmsgOffset: number;
  /** Per queued message. */
  readonly #msgDestination: Int32Array;
  readonly #msgSegments: Int32Array;
  readonly #msgSegmentBytes: Int32Array;
  readonly #msgBytes: Int32Array;
  readonly #msgEnd: Int32Array;
  readonly #msgClosed: Uint8Array;
  #queued = 0;
  /** Destination table in 4 KiB chunks, so addresses stay put as it grows. */
  readonly #chunks: Uint8Array[] = [];
  readonly #destLow: number[] = [];
  readonly #destHigh: number[] = [];
  readonly #destLength: number[] = [];
  readonly #sent: number[] = [];
  readonly #dropped: number[] = [];
  readonly #free: number[] = [];
  /** sendmmsg failures other than a full buffer, by errno (for diagnostics). */
  readonly errors = new Map<number, number>();

  private constructor(
    libc: LibcUdp,
    fd: number,
    family: number,
    port: number,
    options: UdpBatchSenderOptions,
  ) {
    this.#libc = libc;
    this.#fd = fd;
    this.#borrowed = options.fd !== undefined;
    this.family = family;
    this.port = port;
    this.#gso = (options.gso ?? true) && gsoSupported(libc, fd);
    this.#batch = options.batchMessages ?? 64;
    this.#data = options.data;
    this.#dataAddress = Number(addressOf(options.data));
    this.#iovOffset = this.#batch * mmsghdrBytes;
    this.#cmsgOffset = this.#iovOffset + this.#batch * iovecBytes;
    this.#splitOffset = this.#cmsgOffset + this.#batch * cmsgBytes;
    const bytes = this.#splitOffset + maxGsoSegments * (mmsghdrBytes + iovecBytes);
    this.#control = new Uint8Array(Math.max(4096, bytes));
    this.#controlView = new DataView(this.#control.buffer);
    this.#controlAddress = Number(addressOf(this.#control));
    this.#mmsgAddress = BigInt(this.#controlAddress);
    this.#msgDestination = new Int32Array(this.#batch);
    this.#msgSegments = new Int32Array(this.#batch);
    this.#msgSegmentBytes = new Int32Array(this.#batch);
    this.#msgBytes = new Int32Array(this.#batch);
    this.#msgEnd = new Int32Array(this.#batch);
    this.#msgClosed = new Uint8Array(this.#batch);
    const view = this.#controlView;
    for (let i = 0; i < this.#batch; i++) {
      const msg = i * mmsghdrBytes;
      this.#setPointer(msg + 16, this.#controlAddress + this.#iovOffset + i * iovecBytes);
      view.setUint32(msg + 24, 1, true);
      const cmsg = this.#cmsgOffset + i * cmsgBytes;
      view.setUint32(cmsg, 18, true); // CMSG_LEN(2)
      view.setInt32(cmsg + 8, linux.SOL_UDP, true);
      view.setInt32(cmsg + 12, linux.UDP_SEGMENT, true);
    }
    if (!this.#borrowed) UdpBatchSender.#openSockets++;
  }

  /**
   * Opens and binds the socket (or takes `options.fd`, reading its family and port); throws
   * when FFI or the bind fails.
   */
  static open(options: UdpBatchSenderOptions): UdpBatchSender {
    const { libc, error } = libcUdp();
    if (!libc) throw new Error(`libc over FFI is unavailable: ${error}`);
    if (options.data.byteLength < 4096) throw new RangeError("the data slab needs 4 KiB or more");
    if (options.fd !== undefined) return UdpBatchSender.#adopt(libc, options.fd, options);
    const host = options.bindHost ?? "0.0.0.0";
    const family = ipv4Bytes(host) ? afInet : afInet6;
    const fd = libc.socket(
      family,
      linux.SOCK_DGRAM | linux.SOCK_NONBLOCK | linux.SOCK_CLOEXEC,
      0,
    );
    if (fd < 0) throw new Error(`socket() failed, errno ${errno(libc)}`);
    const scratch = new Uint8Array(4096);
    const scratchAddress = addressOf(scratch);
    const scratchView = new DataView(scratch.buffer);
    const fail = (what: string): never => {
      const code = errno(libc);
      libc.close(fd);
      throw new Error(`${what} failed, errno ${code}`);
    };
    if (family === afInet6) {
      scratchView.setInt32(64, 0, true);
      libc.setsockopt(fd, linux.IPPROTO_IPV6, linux.IPV6_V6ONLY, scratchAddress + 64n, 4);
    }
    if (options.sendBufferBytes) {
      scratchView.setInt32(64, options.sendBufferBytes, true);
      libc.setsockopt(fd, linux.SOL_SOCKET, linux.SO_SNDBUF, scratchAddress + 64n, 4);
    }
    const length = writeSockaddr(scratch, family, host, options.port ?? 0);
    if (libc.bind(fd, scratchAddress, length) !== 0) fail(`bind ${host}:${options.port ?? 0}`);
    scratchView.setUint32(64, 32, true);
    if (libc.getsockname(fd, scratchAddress, scratchAddress + 64n) !== 0) fail("getsockname");
    const port = scratchView.getUint16(2);
    return new UdpBatchSender(libc, fd, family, port, options);
  }

  static #adopt(libc: LibcUdp, fd: number, options: UdpBatchSenderOptions): UdpBatchSender {
    const scratch = new Uint8Array(4096);
    const scratchAddress = addressOf(scratch);
    const view = new DataView(scratch.buffer);
    view.setUint32(128, 128, true);
    if (libc.getsockname(fd, scratchAddress, scratchAddress + 128n) !== 0) {
      throw new Error(`getsockname on fd ${fd} failed, errno ${errno(libc)}`);
    }
    const family = view.getUint16(0, true);
    if (family !== afInet && family !== afInet6) {
      throw new Error(`fd ${fd} is not an IPv4 or IPv6 socket (family ${family})`);
    }
    return new UdpBatchSender(libc, fd, family, view.getUint16(2), options);
  }

  /** FFI UDP sockets of this thread that are open (a gauge for leak checks). */
  static get openSockets(): number {
    return UdpBatchSender.#openSockets;
  }

  /** Whether datagram runs go out as UDP GSO messages. */
  get gso(): boolean {
    return this.#gso;
  }

  /** Registers `host`:`port` and returns its index for `queue`. Throws RangeError on a bad host. */
  addDestination(host: string, port: number): number {
    const index = this.#free.pop() ?? this.#destLength.length;
    const chunk = Math.floor(index / destinationsPerChunk);
    while (this.#chunks.length <= chunk) this.#chunks.push(new Uint8Array(4096));
    const offset = (index % destinationsPerChunk) * destinationBytes;
    const slot = this.#chunks[chunk].subarray(offset, offset + destinationBytes);
    try {
      this.#destLength[index] = writeSockaddr(slot, this.family, host, port);
    } catch (err) {
      this.#free.push(index);
      throw err;
    }
    const address = Number(addressOf(this.#chunks[chunk])) + offset;
    this.#destLow[index] = address >>> 0;
    this.#destHigh[index] = Math.floor(address / hiWord);
    this.#sent[index] = 0;
    this.#dropped[index] = 0;
    return index;
  }

  /** Forgets destination `index` after sending what is queued for it. */
  removeDestination(index: number): void {
    this.flush();
    this.#destLength[index] = 0;
    this.#free.push(index);
  }

  /** Datagrams sent and dropped for destination `index`. */
  stats(index: number): DestinationStats {
    return { sent: this.#sent[index] ?? 0, dropped: this.#dropped[index] ?? 0 };
  }

  /**
   * Queues the datagram in `data[offset, offset + length)` for destination `index`; the bytes
   * must stay unchanged until the next flush. Sends a full batch at once.
   */
  queue(index: number, offset: number, length: number): void {
    const last = this.#queued - 1;
    if (
      this.#gso && last >= 0 && this.#msgDestination[last] === index &&
      this.#msgClosed[last] === 0 && this.#msgEnd[last] === offset &&
      length <= this.#msgSegmentBytes[last] && this.#msgSegments[last] < maxGsoSegments &&
      this.#msgBytes[last] + length <= maxGsoBytes
    ) {
      this.#appendSegment(last, length);
      return;
    }
    if (this.#queued === this.#batch) this.flush();
    const i = this.#queued++;
    const view = this.#controlView;
    const msg = i * mmsghdrBytes;
    view.setUint32(msg, this.#destLow[index], true);
    view.setUint32(msg + 4, this.#destHigh[index], true);
    view.setUint32(msg + 8, this.#destLength[index], true);
    view.setUint32(msg + 32, 0, true);
    view.setUint32(msg + 36, 0, true);
    view.setUint32(msg + 40, 0, true);
    const iov = this.#iovOffset + i * iovecBytes;
    const address = this.#dataAddress + offset;
    view.setUint32(iov, address >>> 0, true);
    view.setUint32(iov + 4, Math.floor(address / hiWord), true);
    view.setUint32(iov + 8, length, true);
    this.#msgDestination[i] = index;
    this.#msgSegments[i] = 1;
    this.#msgSegmentBytes[i] = length;
    this.#msgBytes[i] = length;
    this.#msgEnd[i] = offset + length;
    this.#msgClosed[i] = 0;
  }

  #appendSegment(i: number, length: number): void {
    const view = this.#controlView;
    if (this.#msgSegments[i] === 1) {
      const msg = i * mmsghdrBytes;
      const cmsg = this.#cmsgOffset + i * cmsgBytes;
      this.#setPointer(msg + 32, this.#controlAddress + cmsg);
      view.setUint32(msg + 40, cmsgBytes, true);
      view.setUint16(cmsg + 16, this.#msgSegmentBytes[i], true);
    }
    this.#msgSegments[i]++;
    this.#msgBytes[i] += length;
    this.#msgEnd[i] += length;
    // Only the last segment may be shorter than the segment size.
    if (length < this.#msgSegmentBytes[i]) this.#msgClosed[i] = 1;
    view.setUint32(this.#iovOffset + i * iovecBytes + 8, this.#msgBytes[i], true);
  }

  /** Sends everything queued. Failed datagrams are dropped and counted, never retried. */
  flush(): void {
    const count = this.#queued;
    this.#queued = 0;
    if (count === 0 || this.#fd < 0) return;
    const libc = this.#libc;
    let i = 0;
    while (i < count) {
      const sent = libc.sendmmsg(
        this.#fd,
        this.#mmsgAddress + BigInt(i * mmsghdrBytes),
        count - i,
        0,
      );
      if (sent > 0) {
        for (let j = i; j < i + sent; j++) {
          this.#sent[this.#msgDestination[j]] += this.#msgSegments[j];
        }
        i += sent;
        continue;
      }
      const code = errno(libc);
      if (code === linux.EINTR) continue;
      const segmented = this.#msgSegments[i] > 1;
      if (segmented && code !== linux.EAGAIN) {
        // The path cannot segment (no checksum offload, MTU): send singly from now on.
        this.#gso = false;
        this.#sendSingly(i);
      } else {
        if (code !== linux.EAGAIN) this.errors.set(code, (this.errors.get(code) ?? 0) + 1);
        this.#dropped[this.#msgDestination[i]] += this.#msgSegments[i];
      }
      i++;
    }
  }

  /** Sends GSO message `i`'s segments as separate datagrams. */
  #sendSingly(i: number): void {
    const view = this.#controlView;
    const msg = i * mmsghdrBytes;
    const segments = this.#msgSegments[i];
    const size = this.#msgSegmentBytes[i];
    const base = view.getUint32(this.#iovOffset + i * iovecBytes, true) +
      view.getUint32(this.#iovOffset + i * iovecBytes + 4, true) * hiWord;
    const iovBase = this.#splitOffset + maxGsoSegments * mmsghdrBytes;
    for (let k = 0; k < segments; k++) {
      const split = this.#splitOffset + k * mmsghdrBytes;
      this.#control.copyWithin(split, msg, msg + 16);
      this.#control.fill(0, split + 16, split + mmsghdrBytes);
      const iov = iovBase + k * iovecBytes;
      this.#setPointer(split + 16, this.#controlAddress + iov);
      view.setUint32(split + 24, 1, true);
      this.#setPointer(iov, base + k * size);
      const bytes = k === segments - 1 ? this.#msgBytes[i] - k * size : size;
      view.setUint32(iov + 8, bytes, true);
      view.setUint32(iov + 12, 0, true);
    }
    const sent = Math.max(
      0,
      this.#libc.sendmmsg(this.#fd, BigInt(this.#controlAddress + this.#splitOffset), segments, 0),
    );
    this.#sent[this.#msgDestination[i]] += sent;
    this.#dropped[this.#msgDestination[i]] += segments - sent;
  }

  #setPointer(offset: number, address: number): void {
    this.#controlView.setUint32(offset, address >>> 0, true);
    this.#controlView.setUint32(offset + 4, Math.floor(address / hiWord), true);
  }

  /** Closes the socket (a borrowed one stays open); what is still queued is dropped. */
  close(): void {
    if (this.#fd < 0) return;
    if (!this.#borrowed) {
      this.#libc.close(this.#fd);
      UdpBatchSender.#openSockets--;
    }
    this.#fd = -1;
    this.#queued = 0;
  }

  /** The data slab (kept referenced here so its address stays valid). */
  get data(): Uint8Array {
    return this.#data;
  }
}

/** Whether the kernel knows UDP_SEGMENT (Linux 4.18+): getsockopt answers instead of ENOPROTOOPT. */
function gsoSupported(libc: LibcUdp, fd: number): boolean {
  const scratch = new Uint8Array(4096);
  const view = new DataView(scratch.buffer);
  view.setUint32(8, 4, true);
  const address = addressOf(scratch);
  return libc.getsockopt(fd, linux.SOL_UDP, linux.UDP_SEGMENT, address, address + 8n) === 0;
}
