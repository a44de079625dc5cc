/**
 * The interface of the RTP depacketizers: packets of one payload format in, access units
 * out. A unit's `pts` and `dts` hold its 32-bit RTP timestamp; the caller maps them onto the
 * stream's timeline.
 */
import type { MediaFrame } from "../frame.ts";
import type { RtpPacket } from "./packet.ts";

/** Largest access unit a depacketizer assembles, in bytes; a bigger one is dropped. */
export const maxAccessUnitBytes = 8 * 1024 * 1024;

/** Turns the packets of one track, in sequence order, into MediaFrames. */
export interface Depacketizer {
  /**
   * Feeds one packet; complete units are passed to `emit`. Malformed payloads throw a
   * ParseError after dropping the unit they belonged to.
   */
  push(packet: RtpPacket, emit: (frame: MediaFrame) => void): void;
  /** Drops a partly assembled unit (packets were lost). */
  reset(): void;
}
