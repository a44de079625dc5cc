/**
 * MPEG-TS over SRT: one SRT listener on the allocated port, callers refused at the handshake
 * when their address is not allowed or their passphrase is not the configured one (counted,
 * never a connection). The newest caller is the
 * sender: a caller reconnecting while its old connection has not timed out yet takes over at
 * once, and the old connection is closed.
 */
import { RejectReason } from "../protocols/srt/handshake.ts";
import { type SrtAcceptInfo, SrtListener } from "../protocols/srt/listener.ts";
import type { SrtConnection } from "../protocols/srt/connection.ts";
import type {
  AddressFilter,
  MpegtsPeer,
  MpegtsTransport,
  MpegtsTransportHandlers,
} from "./mpegts_transport.ts";

/** An SRT listener receiving MPEG-TS from one caller at a time. */
export class SrtMpegtsTransport implements MpegtsTransport {
  readonly kind = "srt";
  readonly port: number;
  #listener: SrtListener | undefined;
  #allows: AddressFilter;
  #refused = 0;
  #handlers: MpegtsTransportHandlers | undefined;
  #current: SrtConnection | undefined;
  #closing: Promise<void> | undefined;

  private constructor(port: number, allows: AddressFilter) {
    this.port = port;
    this.#allows = allows;
  }

  /**
   * Listens on `hostname:port`, callers encrypting with `passphrase` when one is given;
   * undefined when the port is taken.
   */
  static async open(
    hostname: string,
    port: number,
    allows: AddressFilter,
    passphrase?: string,
  ): Promise<SrtMpegtsTransport | undefined> {
    const transport = new SrtMpegtsTransport(port, allows);
    try {
      transport.#listener = await SrtListener.listen({
        hostname,
        port,
        passphrase,
        accept: (info) => transport.#accept(info),
        onConnection: (connection) => transport.#connected(connection),
        onReject: (info, _reason, message) => {
          transport.#refused++;
          transport.#handlers?.refused(
            { address: info.peer.hostname, port: info.peer.port },
            message,
          );
        },
      });
    } catch {
      return undefined; // bound by another socket
    }
    return transport;
  }

  /** Callers refused at the handshake. */
  get refused(): number {
    return this.#refused;
  }

  start(handlers: MpegtsTransportHandlers): void {
    this.#handlers = handlers;
  }

  close(): Promise<void> {
    this.#closing ??= this.#listener?.close() ?? Promise.resolve();
    return this.#closing;
  }

  #accept(info: SrtAcceptInfo) {
    if (this.#allows(info.peer.hostname)) return { accept: true } as const;
    return {
      accept: false,
      reason: RejectReason.forbidden,
      message: `${info.peer.hostname} is not in mpegts.allowedList`,
    } as const;
  }

  #connected(connection: SrtConnection): void {
    const previous = this.#current;
    this.#current = connection;
    previous?.close().catch(() => {});
    const peer: MpegtsPeer = { address: connection.peer.hostname, port: connection.peer.port };
    this.#handlers?.peer(peer);
    connection.onPayload = (payload) => {
      if (this.#current === connection) this.#handlers?.data(payload, peer);
    };
    connection.closed.then(() => {
      if (this.#current === connection) this.#current = undefined;
    });
  }
}
