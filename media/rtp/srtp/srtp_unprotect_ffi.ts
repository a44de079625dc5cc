/**
 * SRTP unprotection (the receiving side) on OpenSSL's libcrypto over FFI: authenticates and
 * decrypts the SRTP packets a peer sends us (AES-CM with HMAC-SHA1, RFC 3711; AES-GCM,
 * RFC 7714). The server receives far more than it decrypts elsewhere (an SFU participant
 * sends three simulcast layers and audio), and werift's JavaScript SRTP (node:crypto objects
 * made per packet) was the largest part of the main thread's receive work; here a packet
 * costs a copy into native scratch memory and a handful of FFI calls on contexts keyed once.
 *
 * The receiver's packet index (RFC 3711 §3.3.1) is estimated per SSRC from the highest
 * sequence number seen, and moved forward only by a packet that passes authentication, so a
 * forged or damaged packet cannot shift it.
 */
import { SrtpNativeKeys } from "./srtp_native_keys.ts";
import type { SrtpProfile } from "./srtp_profile.ts";
import type { SrtpProtectorInit } from "./srtp_protector.ts";
import { rtpHeaderLength } from "./rtp_header_length.ts";
import { addressOf, evpCtrlGcmSetTag, type Libcrypto, libcrypto } from "./libcrypto.ts";

/** Whether FFI unprotection can run in this process, or why not. */
export function ffiSrtpUnprotectAvailable(): { ok: boolean; reason?: string } {
  const { crypto, error } = libcrypto();
  return crypto ? { ok: true } : { ok: false, reason: error };
}

/** Largest SRTP packet unprotected: a UDP datagram's payload. */
export const maxSrtpPacketBytes = 65_535;

/**
 * Native scratch memory of this thread (each call uses it only while it runs): the packet
 * under work, IV, output length, the digest and the received tag. Large, so V8 keeps it off
 * its moving heap; held here so its address stays valid.
 */
const packetOffset = 0;
const ivOffset = maxSrtpPacketBytes + 64;
const outLengthOffset = ivOffset + 32;
const macOffset = outLengthOffset + 32;
const tagOffset = macOffset + 64;
const finalOffset = tagOffset + 64;
const scratch = new Uint8Array(finalOffset + 64);
const scratchView = new DataView(scratch.buffer);
let scratchAddress = 0n;
let ivAddress = 0n;
let outLengthAddress = 0n;
let macAddress = 0n;
let finalAddress = 0n;

/** BigInts of 0..65599, so offsets and sizes passed as u64 allocate nothing per packet. */
const sizeBigInts: bigint[] = Array.from({ length: 65_600 }, (_, i) => BigInt(i));

function ensureScratch(): void {
  if (scratchAddress !== 0n) return;
  scratchAddress = addressOf(scratch);
  ivAddress = scratchAddress + BigInt(ivOffset);
  outLengthAddress = scratchAddress + BigInt(outLengthOffset);
  macAddress = scratchAddress + BigInt(macOffset);
  finalAddress = scratchAddress + BigInt(finalOffset);
}

/** The receiver's index state of one SSRC. */
interface ReceivedIndex {
  roc: number;
  /** Highest sequence number authenticated so far (s_l). */
  highest: number;
}

const half = 0x8000;

/** Authenticates and decrypts the SRTP packets of one direction of one DTLS-SRTP association. */
export class FfiSrtpUnprotector {
  readonly profile: SrtpProfile;
  /** Bytes of the tag after each packet. */
  readonly tagBytes: number;
  readonly #crypto: Libcrypto;
  readonly #keys: SrtpNativeKeys;
  readonly #indexes = new Map<number, ReceivedIndex>();

  /** Derives the session keys of `init` (the remote side's master key and salt). */
  constructor(init: SrtpProtectorInit) {
    const { crypto, error } = libcrypto();
    if (!crypto) throw new Error(`libcrypto over FFI is unavailable: ${error}`);
    ensureScratch();
    this.#crypto = crypto;
    this.#keys = new SrtpNativeKeys(crypto, init, "decrypt");
    this.profile = init.profile;
    this.tagBytes = this.#keys.tagBytes;
  }

  /**
   * Authenticates and decrypts the SRTP packet in `packet` (all of it) in place; returns the
   * length of the RTP packet now at its start, or -1 when it is no RTP packet, fails
   * authentication, or this unprotector is closed (the packet is then left as it was).
   */
  unprotect(packet: Uint8Array): number {
    const length = packet.length;
    const rtpLength = length - this.tagBytes;
    const keys = this.#keys;
    if (keys.cipher === 0n || length > maxSrtpPacketBytes) return -1;
    const headerBytes = rtpHeaderLength(packet, rtpLength);
    if (headerBytes < 0) return -1;
    const sequence = (packet[2] << 8) | packet[3];
    const ssrc = ((packet[8] << 24) | (packet[9] << 16) | (packet[10] << 8) | packet[11]) >>> 0;
    const state = this.#indexes.get(ssrc);
    const roc = state ? estimateRoc(state, sequence) : 0;
    const c = this.#crypto;
    const ctx = keys.cipher;
    const salt = keys.saltWords;
    scratch.set(packet, packetOffset);
    const base = scratchAddress;
    const payload = base + sizeBigInts[headerBytes];
    const payloadBytes = rtpLength - headerBytes;
    if (keys.aead) {
      // RFC 7714 §8.1: IV = (00 00 || SSRC || ROC || SEQ) XOR salt; the header is the AAD.
      scratchView.setUint32(ivOffset, (salt[0] ^ (ssrc >>> 16)) >>> 0);
      scratchView.setUint32(ivOffset + 4, (salt[1] ^ ((ssrc << 16) | (roc >>> 16))) >>> 0);
      scratchView.setUint32(ivOffset + 8, (salt[2] ^ ((roc << 16) | sequence)) >>> 0);
      c.EVP_DecryptInit_ex(ctx, 0n, 0n, 0n, ivAddress);
      c.EVP_DecryptUpdate(ctx, 0n, outLengthAddress, base, headerBytes);
      c.EVP_DecryptUpdate(ctx, payload, outLengthAddress, payload, payloadBytes);
      c.EVP_CIPHER_CTX_ctrl(ctx, evpCtrlGcmSetTag, 16, base + sizeBigInts[rtpLength]);
      if (c.EVP_DecryptFinal_ex(ctx, finalAddress, outLengthAddress) !== 1) return -1;
    } else {
      // RFC 3711 §4.2: the tag covers packet || ROC: the received tag is kept aside and the
      // ROC written where it was (a tag has at least the 4 bytes the ROC takes).
      const tagBytes = this.tagBytes;
      scratch.copyWithin(tagOffset, rtpLength, length);
      scratch[rtpLength] = roc >>> 24;
      scratch[rtpLength + 1] = (roc >>> 16) & 0xff;
      scratch[rtpLength + 2] = (roc >>> 8) & 0xff;
      scratch[rtpLength + 3] = roc & 0xff;
      c.HMAC_Init_ex(keys.hmac, 0n, 0, 0n, 0n);
      c.HMAC_Update(keys.hmac, base, sizeBigInts[rtpLength + 4]);
      c.HMAC_Final(keys.hmac, macAddress, outLengthAddress);
      // Compared without an early exit, so the time taken says nothing of where it differs.
      let differ = 0;
      for (let i = 0; i < tagBytes; i++) differ |= scratch[macOffset + i] ^ scratch[tagOffset + i];
      if (differ !== 0) return -1;
      // RFC 3711 §4.1.1: IV = (salt << 16) XOR (SSRC << 64) XOR (index << 16).
      scratchView.setUint32(ivOffset, salt[0]);
      scratchView.setUint32(ivOffset + 4, (salt[1] ^ ssrc) >>> 0);
      scratchView.setUint32(ivOffset + 8, (salt[2] ^ roc) >>> 0);
      scratchView.setUint32(ivOffset + 12, (salt[3] ^ (sequence << 16)) >>> 0);
      c.EVP_DecryptInit_ex(ctx, 0n, 0n, 0n, ivAddress);
      c.EVP_DecryptUpdate(ctx, payload, outLengthAddress, payload, payloadBytes);
    }
    if (!state) this.#indexes.set(ssrc, { roc, highest: sequence });
    else if (roc > state.roc || (roc === state.roc && sequence > state.highest)) {
      state.roc = roc;
      state.highest = sequence;
    }
    packet.set(scratch.subarray(packetOffset + headerBytes, packetOffset + rtpLength), headerBytes);
    return rtpLength;
  }

  /** Frees the native contexts; later packets fail (safe twice). */
  close(): void {
    this.#keys.close();
  }
}

/** RFC 3711 §3.3.1: the ROC the sender most likely used for `sequence`. */
function estimateRoc(state: ReceivedIndex, sequence: number): number {
  const { roc, highest } = state;
  let guess = roc;
  if (highest < half) {
    if (sequence - highest > half) guess = roc - 1;
  } else if (highest - half > sequence) {
    guess = roc + 1;
  }
  // Before the first wrap there is no earlier cycle: such a packet belongs to ROC 0.
  return guess < 0 ? 0 : guess >>> 0;
}
