/**
 * MPEG-TS over plain UDP: one socket on the allocated port, each datagram one or more TS
 * packets (ffmpeg sends 7, `pkt_size=1316`). There is no connection, so a sender is an
 * address and port; a datagram from another one takes over only once the current sender has
 * been silent for `peerSwitchSilenceMs`, so two senders on one port cannot interleave.
 */
import dgram from "node:dgram";
import type {
  AddressFilter,
  MpegtsPeer,
  MpegtsTransport,
  MpegtsTransportHandlers,
} from "./mpegts_transport.ts";

/** Silence of the current sender after which another one may take over, in milliseconds. */
export const peerSwitchSilenceMs = 300;
/** Receive buffer asked of the kernel, in bytes: a second of 30 Mbit/s in bursts. */
const receiveBufferBytes = 4 * 1024 * 1024;

/** A bound UDP socket receiving MPEG-TS. */
export class UdpMpegtsTransport implements MpegtsTransport {
  readonly kind = "udp";
  readonly port: number;
  #socket: dgram.Socket;
  #allows: AddressFilter;
  #refused = 0;
  #foreign = 0;
  #peer: MpegtsPeer | undefined;
  #lastDataMs = 0;
  #closing: Promise<void> | undefined;

  private constructor(socket: dgram.Socket, port: number, allows: AddressFilter) {
    this.#socket = socket;
    this.port = port;
    this.#allows = allows;
  }

  /** Binds `hostname:port`; undefined when the port is taken. */
  static open(
    hostname: string,
    port: number,
    allows: AddressFilter,
  ): Promise<UdpMpegtsTransport | undefined> {
    const socket = dgram.createSocket(hostname.includes(":") ? "udp6" : "udp4");
    return new Promise((resolve) => {
      const onError = () => {
        socket.close();
        resolve(undefined);
      };
      socket.once("error", onError);
      socket.bind(port, hostname, () => {
        socket.off("error", onError);
        try {
          socket.setRecvBufferSize(receiveBufferBytes);
        } catch {
          // The kernel's cap (net.core.rmem_max) stays: fine for a few Mbit/s.
        }
        resolve(new UdpMpegtsTransport(socket, port, allows));
      });
    });
  }

  /** Datagrams refused because their address is not in the allowed list. */
  get refused(): number {
    return this.#refused;
  }

  /** Datagrams dropped because another sender was still sending on the port. */
  get foreign(): number {
    return this.#foreign;
  }

  start(handlers: MpegtsTransportHandlers): void {
    // Errors of a bound UDP socket are per datagram (ICMP unreachable): nothing to end.
    this.#socket.on("error", () => {});
    this.#socket.on("message", (msg: Uint8Array, info: dgram.RemoteInfo) => {
      if (!this.#allows(info.address)) {
        this.#refused++;
        return;
      }
      const now = performance.now();
      const current = this.#peer;
      if (!current || current.address !== info.address || current.port !== info.port) {
        if (current && now - this.#lastDataMs < peerSwitchSilenceMs) {
          this.#foreign++;
          return;
        }
        this.#peer = { address: info.address, port: info.port };
        handlers.peer(this.#peer);
      }
      this.#lastDataMs = now;
      handlers.data(msg, this.#peer!);
    });
  }

  close(): Promise<void> {
    this.#closing ??= new Promise((resolve) => {
      try {
        this.#socket.close(() => resolve());
      } catch {
        resolve(); // closed already
      }
    });
    return this.#closing;
  }
}
