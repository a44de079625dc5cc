/**
 * The SRTP sender side of one subscriber: protects RTP packets in place with the session keys
 * of one DTLS-SRTP association. Two implementations share this interface: OpenSSL's libcrypto
 * over FFI (srtp_ffi.ts, the fast one) and node:crypto (srtp_portable.ts), picked by
 * createSrtpProtector.
 */
import type { SrtpMasterKeys, SrtpProfile } from "./srtp_profile.ts";

/** Protects RTP packets of one SRTP context (any number of SSRCs), keeping their ROCs. */
export interface SrtpProtector {
  readonly profile: SrtpProfile;
  /** Bytes the tag adds after the packet. */
  readonly tagBytes: number;
  /** Which implementation this is. */
  readonly backend: SrtpBackend;
  /**
   * Protects the RTP packet in `packet[0, length)` in place and returns its SRTP length
   * (`length + tagBytes`); `packet` must have room for the tag (and at least 4 spare bytes).
   * `address` is `packet`'s native address when the caller holds it (the FFI backend then
   * skips looking it up). Throws RangeError on a packet that is not RTP or has no room.
   */
  protect(packet: Uint8Array, length: number, address?: bigint): number;
  /** The ROC `ssrc` is at (for handing a stream to another protector). */
  rolloverCounter(ssrc: number): number;
  /** Frees native state; later calls throw. */
  close(): void;
}

/** Implementations of SrtpProtector. */
export type SrtpBackend = "ffi" | "portable";

/** Spare bytes a packet buffer needs after the RTP packet: the largest tag, the ROC. */
export const srtpTrailerBytes = 16;

/** Options of createSrtpProtector. */
export interface SrtpProtectorOptions {
  /** `auto` (default): FFI when libcrypto loads, else portable. */
  backend?: SrtpBackend | "auto";
}

/** What every backend's constructor takes. */
export interface SrtpProtectorInit extends SrtpMasterKeys {
  profile: SrtpProfile;
}

/** Error thrown for a packet the protector cannot handle. */
export function badPacket(length: number, room: number, tagBytes: number): RangeError {
  return new RangeError(
    `cannot protect a ${length}-byte RTP packet in ${room} bytes (tag ${tagBytes} bytes)`,
  );
}
