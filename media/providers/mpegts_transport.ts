/**
 * How MPEG-TS bytes reach an MPEG-TS ingest: a transport owns the socket of one allocated
 * port (UDP datagrams, or the SRT listener of that port), admits or refuses senders by
 * address, and hands the ingest the TS bytes of the sender it admitted.
 */

/** The transports of `/mpegts/startup`, as requests name them. */
export type MpegtsTransportKind = "udp" | "srt";

/** A sender: its address and port. */
export interface MpegtsPeer {
  readonly address: string;
  readonly port: number;
}

/** What a transport tells its ingest. */
export interface MpegtsTransportHandlers {
  /** TS bytes (whole 188-byte packets for UDP and SRT) from the current sender. */
  data(bytes: Uint8Array, peer: MpegtsPeer): void;
  /**
   * Another sender took over: a new SRT connection, or UDP datagrams from another address or
   * port after the previous sender fell silent. Its TS starts afresh (new continuity
   * counters, its own timeline).
   */
  peer(peer: MpegtsPeer): void;
  /** A sender refused at a handshake (SRT: address not allowed, wrong or no passphrase). */
  refused(peer: MpegtsPeer, reason: string): void;
}

/** One allocated port receiving MPEG-TS. */
export interface MpegtsTransport {
  readonly kind: MpegtsTransportKind;
  /** The port it receives on. */
  readonly port: number;
  /**
   * Senders refused: UDP datagrams from an address not allowed, SRT callers refused at the
   * handshake (address not allowed, wrong or no passphrase).
   */
  readonly refused: number;
  /** Starts delivering to `handlers`. */
  start(handlers: MpegtsTransportHandlers): void;
  /** Closes the socket; nothing is delivered afterwards. Idempotent. */
  close(): Promise<void>;
}

/** Decides whether a sender's address may send (the `allowedList`). */
export type AddressFilter = (address: string) => boolean;
