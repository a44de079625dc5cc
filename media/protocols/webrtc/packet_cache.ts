/**
 * The recent RTP packets of one publisher track, shared by all its players: a NACK from any
 * player is answered from here, so players keep no copies of their own.
 */
import type { RtpPacket } from "werift";

/** Packets kept per track for retransmission (about 2 s of 640x480 video). */
export const nackCachePackets = 512;

/** A ring of packets indexed by sequence number. */
export class PacketCache {
  readonly #slots: (RtpPacket | undefined)[] = new Array(nackCachePackets);

  /** Keeps a packet, replacing the one `nackCachePackets` sequence numbers older. */
  put(packet: RtpPacket): void {
    this.#slots[packet.header.sequenceNumber % nackCachePackets] = packet;
  }

  /** The packet with this sequence number, if still kept. */
  get(sequenceNumber: number): RtpPacket | undefined {
    const packet = this.#slots[sequenceNumber % nackCachePackets];
    return packet?.header.sequenceNumber === sequenceNumber ? packet : undefined;
  }

  /** Drops every packet. */
  clear(): void {
    this.#slots.fill(undefined);
  }
}
