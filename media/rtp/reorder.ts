/**
 * Puts the RTP packets of one SSRC back in sequence order (UDP may reorder them) within a
 * small window, drops duplicates and late packets, and counts the sequence numbers that
 * never came.
 */
import type { RtpPacket } from "./packet.ts";

/** Packets held while waiting for a missing one; beyond that the gap is given up as lost. */
export const reorderWindowPackets = 32;

/** Sequence-order restorer of one RTP stream. */
export class RtpReorderBuffer {
  /** Sequence numbers skipped as lost so far. */
  lost = 0;
  /** Packets dropped as duplicates or as arriving after their place was passed. */
  discarded = 0;
  #slots: (RtpPacket | undefined)[] = new Array(reorderWindowPackets);
  #held = 0;
  #expected = -1;
  #emit: (packet: RtpPacket, afterGap: boolean) => void;
  #gap = false;

  /** `emit` receives packets in order; `afterGap` is true for the first one after a loss. */
  constructor(emit: (packet: RtpPacket, afterGap: boolean) => void) {
    this.#emit = emit;
  }

  /** Offers one packet. */
  push(packet: RtpPacket): void {
    const seq = packet.sequenceNumber;
    if (this.#expected < 0) this.#expected = seq;
    // Distance ahead of the expected number, in the 16-bit sequence space, signed.
    const ahead = ((seq - this.#expected + 0x8000) & 0xffff) - 0x8000;
    if (ahead < 0) {
      this.discarded++;
      return;
    }
    if (ahead >= reorderWindowPackets) {
      this.#flushAll();
      this.lost += (seq - this.#expected) & 0xffff;
      this.#gap = true;
      this.#expected = seq;
    }
    if (seq === this.#expected) {
      this.#deliver(packet);
      this.#drain();
      return;
    }
    const slot = seq % reorderWindowPackets;
    if (this.#slots[slot] !== undefined) {
      this.discarded++;
      return;
    }
    this.#slots[slot] = packet;
    this.#held++;
  }

  /** Packets held behind a gap. */
  get held(): number {
    return this.#held;
  }

  /** Gives up waiting: delivers everything held, in order, counting the holes as lost. */
  flush(): void {
    this.#flushAll();
  }

  /** Forgets the expected sequence (a new session starts its own numbering). */
  reset(): void {
    this.#slots.fill(undefined);
    this.#held = 0;
    this.#expected = -1;
  }

  #deliver(packet: RtpPacket): void {
    this.#expected = (packet.sequenceNumber + 1) & 0xffff;
    const gap = this.#gap;
    this.#gap = false;
    this.#emit(packet, gap);
  }

  #drain(): void {
    while (this.#held > 0) {
      const slot = this.#expected % reorderWindowPackets;
      const next = this.#slots[slot];
      if (next === undefined || next.sequenceNumber !== this.#expected) return;
      this.#slots[slot] = undefined;
      this.#held--;
      this.#deliver(next);
    }
  }

  /** Delivers everything held, in order, counting the holes between as lost. */
  #flushAll(): void {
    while (this.#held > 0) {
      const slot = this.#expected % reorderWindowPackets;
      const next = this.#slots[slot];
      if (next !== undefined && next.sequenceNumber === this.#expected) {
        this.#slots[slot] = undefined;
        this.#held--;
        this.#deliver(next);
      } else {
        this.lost++;
        this.#gap = true;
        this.#expected = (this.#expected + 1) & 0xffff;
      }
    }
  }
}
