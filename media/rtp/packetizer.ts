/**
 * The interface of the RTP packetizers: one MediaFrame in, the payloads of its packets out.
 * Sequence numbers, SSRC and the timestamp base belong to the sender, not the packetizer.
 */
import type { MediaFrame } from "../frame.ts";

/**
 * Largest RTP payload a packetizer makes, in bytes: 1200 leaves room for the RTP, SRTP, UDP
 * and IP headers within the 1280-byte IPv6 minimum MTU, as browsers do.
 */
export const rtpMaxPayloadBytes = 1200;

/**
 * Receives one packet: its payload (a view the receiver must not modify), the marker bit, and
 * the offset of
 * its timestamp from the frame's pts, in the track's clock (non-zero only for a frame
 * split over several timestamps, as G.711).
 */
export type PacketSink = (payload: Uint8Array, marker: boolean, timestampOffset: number) => void;

/** Turns the frames of one track into RTP payloads. */
export interface Packetizer {
  /** Packetizes one frame; malformed frames throw a ParseError before any packet is emitted. */
  packetize(frame: MediaFrame, emit: PacketSink): void;
}
