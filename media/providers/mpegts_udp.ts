/**
 * MPEG-TS over plain UDP: one socket on the allocated port, each datagram one or more TS
 * packets (ffmpeg sends 7, `pkt_size=1316`). There is no connection, so a sender is an
 * address and port; a datagram from another one takes over only once the current sender has
 * been silent for `peerSwitchSilenceMs`, so two senders on one port cannot interleave. The
 * socket is SRT's (libsrt's kernel receive buffer, reads of at most 2 KiB): MPEG-TS senders
 * send datagrams of 7 TS packets (1316 bytes), 1328 with RTP; larger ones would be cut.
 */
import { DatagramSocket } from "../protocols/srt/datagram_socket.ts";
import type {
  AddressFilter,
  MpegtsPeer,
  MpegtsTransport,
  MpegtsTransportHandlers,
} from "./mpegts_transport.ts";

/** Silence of the current sender after which another one may take over, in milliseconds. */
export const peerSwitchSilenceMs = 300;

/** A bound UDP socket receiving MPEG-TS. */
export class UdpMpegtsTransport implements MpegtsTransport {
  readonly kind = "udp";
  readonly port: number;
  #socket: DatagramSocket | undefined;
  #allows: AddressFilter;
  #handlers: MpegtsTransportHandlers | undefined;
  #refused = 0;
  #foreign = 0;
  #peer: MpegtsPeer | undefined;
  #lastDataMs = 0;

  private constructor(port: number, allows: AddressFilter) {
    this.port = port;
    this.#allows = allows;
  }

  /** Binds `hostname:port`; undefined when the port is taken. */
  static async open(
    hostname: string,
    port: number,
    allows: AddressFilter,
  ): Promise<UdpMpegtsTransport | undefined> {
    const transport = new UdpMpegtsTransport(port, allows);
    try {
      transport.#socket = await DatagramSocket.bind(
        hostname,
        port,
        (data, from) => transport.#datagram(data, from.hostname, from.port),
      );
    } catch {
      return undefined; // bound by another socket
    }
    return transport;
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
    this.#handlers = handlers;
  }

  close(): Promise<void> {
    return this.#socket?.close() ?? Promise.resolve();
  }

  #datagram(data: Uint8Array, address: string, port: number): void {
    const handlers = this.#handlers;
    if (!handlers) return;
    if (!this.#allows(address)) {
      this.#refused++;
      return;
    }
    const now = performance.now();
    const current = this.#peer;
    if (!current || current.address !== address || current.port !== port) {
      if (current && now - this.#lastDataMs < peerSwitchSilenceMs) {
        this.#foreign++;
        return;
      }
      this.#peer = { address, port };
      handlers.peer(this.#peer);
    }
    this.#lastDataMs = now;
    handlers.data(data, this.#peer!);
  }
}
