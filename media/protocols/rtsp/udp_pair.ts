/**
 * A pair of UDP sockets for one RTP stream: RTP on an even port, RTCP on the next one
 * (RFC 3550 §11), taken from the configured media port range.
 */
import dgram from "node:dgram";
import { RtspError } from "./errors.ts";

/** Where UDP sockets are bound and which ports they may take. */
export interface UdpPortRange {
  /** Address the sockets bind (the server's bind address). */
  hostname: string;
  /** Lowest port (inclusive). */
  min: number;
  /** Highest port (inclusive). */
  max: number;
}

/** Next even port to try, per range: spreads pairs so a freed pair is not retaken at once. */
const cursors = new Map<string, number>();

function bind(socket: dgram.Socket, port: number, hostname: string): Promise<boolean> {
  return new Promise((resolve) => {
    const onError = () => resolve(false);
    socket.once("error", onError);
    socket.bind(port, hostname, () => {
      socket.off("error", onError);
      resolve(true);
    });
  });
}

function close(socket: dgram.Socket): Promise<void> {
  return new Promise((resolve) => {
    try {
      socket.close(() => resolve());
    } catch {
      resolve(); // not bound, or closed already
    }
  });
}

/** Two bound sockets; datagrams from addresses other than `peer` are ignored. */
export class UdpPortPair {
  readonly rtpPort: number;
  #rtp: dgram.Socket;
  #rtcp: dgram.Socket;
  #closing: Promise<void> | undefined;

  private constructor(rtpPort: number, rtp: dgram.Socket, rtcp: dgram.Socket) {
    this.rtpPort = rtpPort;
    this.#rtp = rtp;
    this.#rtcp = rtcp;
  }

  /** Binds the first free pair of the range; none free is an RtspError. */
  static async open(range: UdpPortRange): Promise<UdpPortPair> {
    const first = range.min + (range.min & 1);
    const key = `${range.hostname}:${range.min}-${range.max}`;
    const pairs = Math.max(0, Math.floor((range.max - first + 1) / 2));
    let port = cursors.get(key) ?? first;
    for (let tried = 0; tried < pairs; tried++) {
      if (port + 1 > range.max) port = first;
      const family = range.hostname.includes(":") ? "udp6" : "udp4";
      const rtp = dgram.createSocket(family);
      const rtcp = dgram.createSocket(family);
      const next = port + 2;
      if (await bind(rtp, port, range.hostname)) {
        if (await bind(rtcp, port + 1, range.hostname)) {
          cursors.set(key, next > range.max ? first : next);
          return new UdpPortPair(port, rtp, rtcp);
        }
      }
      await close(rtp);
      await close(rtcp);
      port = next;
    }
    throw new RtspError(`no free UDP port pair in ${range.min}-${range.max}`);
  }

  /** Delivers the datagrams from `peer` (an IP address) to the handlers. */
  listen(
    peer: string,
    onRtp: (data: Uint8Array) => void,
    onRtcp: (data: Uint8Array) => void,
  ): void {
    this.#rtp.on("message", (msg: Uint8Array, info: dgram.RemoteInfo) => {
      if (info.address === peer) onRtp(msg);
    });
    this.#rtcp.on("message", (msg: Uint8Array, info: dgram.RemoteInfo) => {
      if (info.address === peer) onRtcp(msg);
    });
  }

  /**
   * Sends a datagram from the RTP socket (`rtcp` false) or the RTCP one to `address`:`port`;
   * a failed send is dropped, as a lost datagram would be.
   */
  send(data: Uint8Array, rtcp: boolean, port: number, address: string): void {
    if (this.#closing) return;
    (rtcp ? this.#rtcp : this.#rtp).send(data, port, address, () => {});
  }

  /** Closes both sockets. Idempotent. */
  close(): Promise<void> {
    this.#closing ??= Promise.all([close(this.#rtp), close(this.#rtcp)]).then(() => {});
    return this.#closing;
  }
}
