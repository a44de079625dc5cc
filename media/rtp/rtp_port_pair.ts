/**
 * The UDP sockets of one RTP session: RTP on an even port, RTCP on the next (RFC 3550 §11),
 * taken from a PortPool, with each datagram's source given to the handler (symmetric RTP
 * answers there). node:dgram, since Deno.listenDatagram needs --unstable-net.
 */
import dgram from "node:dgram";
import type { PortPool } from "../providers/port_pool.ts";

/**
 * Buffer each read of Deno's node:dgram allocates, in bytes (64 KiB by default); an RTP
 * packet of ours or of a SIP phone fits an MTU.
 */
const datagramBufferBytes = 2048;

/** Where a datagram came from or goes to. */
export interface UdpEndpoint {
  host: string;
  port: number;
}

/** Receives one datagram and its source. */
export type DatagramHandler = (data: Uint8Array, source: UdpEndpoint) => void;

function bound(hostname: string, port: number): Promise<dgram.Socket | undefined> {
  const socket = dgram.createSocket({
    type: hostname.includes(":") ? "udp6" : "udp4",
    recvBufferSize: datagramBufferBytes,
  });
  return new Promise((resolve) => {
    const onError = () => {
      closed(socket).then(() => resolve(undefined));
    };
    socket.once("error", onError);
    socket.bind(port, hostname, () => {
      socket.off("error", onError);
      // A send to a closed port comes back as ICMP unreachable: a lost datagram, no more.
      socket.on("error", () => {});
      resolve(socket);
    });
  });
}

function closed(socket: dgram.Socket): Promise<void> {
  return new Promise((resolve) => {
    try {
      socket.close(() => resolve());
    } catch {
      resolve(); // closed already
    }
  });
}

/**
 * Sends of one socket in order: Deno's node:dgram sends the burst that follows a socket's
 * very first send in reverse order (tested: 10 datagrams arrive 9..0), which would turn the
 * first video picture into packets a receiver drops as late. So the sends made while the
 * first one is in flight wait for it, then go in order.
 */
class OrderedSender {
  #socket: dgram.Socket;
  #waiting: { data: Uint8Array; to: UdpEndpoint }[] | undefined;
  #started = false;

  constructor(socket: dgram.Socket) {
    this.#socket = socket;
  }

  send(data: Uint8Array, to: UdpEndpoint): void {
    if (this.#waiting) {
      this.#waiting.push({ data, to });
      return;
    }
    const first = !this.#started;
    if (first) {
      this.#started = true;
      this.#waiting = [];
    }
    try {
      this.#socket.send(data, to.port, to.host, first ? () => this.#release() : () => {});
    } catch {
      // A bad address or port is a lost datagram, not a broken call.
      if (first) this.#release();
    }
  }

  #release(): void {
    const waiting = this.#waiting ?? [];
    this.#waiting = undefined;
    for (const next of waiting) this.send(next.data, next.to);
  }

  /** Drops what waits (the socket is closing). */
  clear(): void {
    if (this.#waiting) this.#waiting.length = 0;
  }
}

/** A bound RTP/RTCP pair. */
export class RtpPortPair {
  /** The RTP port (even); RTCP is on the next one. */
  readonly rtpPort: number;
  /** Receives RTP datagrams. */
  onRtp: DatagramHandler = () => {};
  /** Receives RTCP datagrams. */
  onRtcp: DatagramHandler = () => {};
  #rtp: dgram.Socket;
  #rtcp: dgram.Socket;
  #rtpSender: OrderedSender;
  #rtcpSender: OrderedSender;
  #pool: PortPool;
  #closing: Promise<void> | undefined;

  private constructor(pool: PortPool, rtpPort: number, rtp: dgram.Socket, rtcp: dgram.Socket) {
    this.#pool = pool;
    this.rtpPort = rtpPort;
    this.#rtp = rtp;
    this.#rtcp = rtcp;
    this.#rtpSender = new OrderedSender(rtp);
    this.#rtcpSender = new OrderedSender(rtcp);
    rtp.on("message", (msg: Uint8Array, info: dgram.RemoteInfo) => {
      this.onRtp(msg, { host: info.address, port: info.port });
    });
    rtcp.on("message", (msg: Uint8Array, info: dgram.RemoteInfo) => {
      this.onRtcp(msg, { host: info.address, port: info.port });
    });
  }

  /**
   * Binds an even port of `pool` and the odd one after it on `hostname`; undefined when no
   * such pair is free. The pool holds the even port (a concurrent take of the odd one fails
   * its bind).
   */
  static async open(hostname: string, pool: PortPool): Promise<RtpPortPair | undefined> {
    const taken = await pool.take(async (port) => {
      if (port % 2 !== 0 || port + 1 > pool.max) return undefined;
      const rtp = await bound(hostname, port);
      if (!rtp) return undefined;
      const rtcp = await bound(hostname, port + 1);
      if (rtcp) return { rtp, rtcp };
      await closed(rtp);
      return undefined;
    });
    return taken && new RtpPortPair(pool, taken.port, taken.value.rtp, taken.value.rtcp);
  }

  /** Sends a datagram from the RTP socket (`rtcp` false) or the RTCP one; dropped once closing. */
  send(data: Uint8Array, rtcp: boolean, to: UdpEndpoint): void {
    if (this.#closing) return;
    (rtcp ? this.#rtcpSender : this.#rtpSender).send(data, to);
  }

  /** Closes both sockets and gives the port back to the pool. Idempotent. */
  close(): Promise<void> {
    this.#rtpSender.clear();
    this.#rtcpSender.clear();
    this.#closing ??= Promise.all([closed(this.#rtp), closed(this.#rtcp)]).then(() =>
      this.#pool.release(this.rtpPort)
    );
    return this.#closing;
  }
}
