/**
 * The RTMP handshake (RTMP 1.0 §5.2), simple form: C0/S0 carry the version, C1/S1 a time and
 * 1528 bytes of random data, C2/S2 echo the peer's C1/S1. A zero version field in S1 makes
 * ffmpeg and nginx-rtmp skip the digest (FP9) variant, so no digest is computed here.
 */
import { ParseError, TruncatedError } from "../../../core/errors.ts";

/** The only RTMP version spoken (plain, unencrypted RTMP). */
export const rtmpVersion = 3;
/** Size of C1, S1, C2 and S2, in bytes. */
export const handshakePacketBytes = 1536;
/** Longest a handshake may take before the connection is dropped, in milliseconds. */
export const handshakeTimeoutMs = 5_000;

/** C0+C1 (client) or S0+S1 (server): version byte, then a 1536-byte packet with random data. */
export function buildHandshakeHello(timeMs: number): Uint8Array {
  const out = new Uint8Array(1 + handshakePacketBytes);
  out[0] = rtmpVersion;
  new DataView(out.buffer).setUint32(1, timeMs >>> 0);
  // Bytes 5..8 stay zero: the simple handshake.
  crypto.getRandomValues(out.subarray(9));
  return out;
}

/**
 * Checks a C0+C1 or S0+S1 received from the peer and returns its 1536-byte packet, which the
 * other side echoes as C2/S2. Too few bytes is a TruncatedError, another version a ParseError.
 */
export function parseHandshakeHello(data: Uint8Array): Uint8Array {
  if (data.length < 1) throw new TruncatedError("RTMP handshake: no version byte");
  if (data[0] !== rtmpVersion) {
    throw new ParseError(`RTMP handshake: version ${data[0]}, expected ${rtmpVersion}`);
  }
  if (data.length < 1 + handshakePacketBytes) {
    throw new TruncatedError("RTMP handshake: C1/S1 cut");
  }
  return data.subarray(1, 1 + handshakePacketBytes);
}

/** The echo (C2/S2) of the peer's C1/S1: the same bytes, as the spec's simple form allows. */
export function buildHandshakeEcho(peerPacket: Uint8Array): Uint8Array {
  if (peerPacket.length !== handshakePacketBytes) {
    throw new ParseError("RTMP handshake: packet to echo has the wrong size");
  }
  return peerPacket.slice();
}

/** Checks a C2/S2 from the peer: exactly one packet's worth of bytes (content not verified, as in common servers). */
export function checkHandshakeEcho(data: Uint8Array): void {
  if (data.length < handshakePacketBytes) throw new TruncatedError("RTMP handshake: C2/S2 cut");
}
