/**
 * SrtpProtector on OpenSSL's libcrypto over FFI (fastpath.md design 3d): one EVP_CIPHER_CTX
 * (and one HMAC_CTX for AES-CM) per context, keyed once; per packet only the IV is set and
 * the payload encrypted in place, so a packet costs a handful of fast FFI calls and no
 * allocation.
 */
import { SrtpNativeKeys } from "./srtp_native_keys.ts";
import type { SrtpProfile } from "./srtp_profile.ts";
import {
  badPacket,
  type SrtpBackend,
  type SrtpProtector,
  type SrtpProtectorInit,
  srtpTrailerBytes,
} from "./srtp_protector.ts";
import { RolloverCounters } from "./srtp_rollover.ts";
import { rtpHeaderLength } from "./rtp_header_length.ts";
import { addressOf, evpCtrlGcmGetTag, type Libcrypto, libcrypto } from "./libcrypto.ts";

/**
 * Scratch memory shared by every protector of this thread (each call uses it only while it
 * runs): IV, output lengths, the HMAC digest. 4 KiB so V8 keeps it off its moving heap; held
 * here so its address stays valid.
 */
const scratch = new Uint8Array(4096);
const scratchView = new DataView(scratch.buffer);
const ivOffset = 0;
const outLengthOffset = 32;
const macOffset = 64;
const finalOffset = 128;
let scratchAddress = 0n;
let ivAddress = 0n;
let outLengthAddress = 0n;
let macAddress = 0n;
let finalAddress = 0n;

/** BigInts of 0..65535, so sizes passed as u64 allocate nothing per packet. */
const sizeBigInts: bigint[] = Array.from({ length: 65536 }, (_, i) => BigInt(i));

function ensureScratch(): void {
  if (scratchAddress !== 0n) return;
  scratchAddress = addressOf(scratch);
  ivAddress = scratchAddress + BigInt(ivOffset);
  outLengthAddress = scratchAddress + BigInt(outLengthOffset);
  macAddress = scratchAddress + BigInt(macOffset);
  finalAddress = scratchAddress + BigInt(finalOffset);
}

/** Whether the FFI backend can run here, or why not. */
export function ffiSrtpAvailable(): { ok: boolean; reason?: string } {
  const { crypto, error } = libcrypto();
  return crypto ? { ok: true } : { ok: false, reason: error };
}

/** SRTP protection with libcrypto over FFI. */
export class FfiSrtpProtector implements SrtpProtector {
  readonly profile: SrtpProfile;
  readonly tagBytes: number;
  readonly backend: SrtpBackend = "ffi";
  readonly #crypto: Libcrypto;
  readonly #keys: SrtpNativeKeys;
  readonly #rocs = new RolloverCounters();

  /** Derives the session keys of `init` and keys the native contexts; throws without libcrypto. */
  constructor(init: SrtpProtectorInit) {
    const { crypto, error } = libcrypto();
    if (!crypto) throw new Error(`libcrypto over FFI is unavailable: ${error}`);
    ensureScratch();
    this.#crypto = crypto;
    this.#keys = new SrtpNativeKeys(crypto, init, "encrypt");
    this.profile = init.profile;
    this.tagBytes = this.#keys.tagBytes;
  }

  protect(packet: Uint8Array, length: number, address?: bigint): number {
    const keys = this.#keys;
    if (keys.cipher === 0n) {
      throw new Error("the SRTP protector is closed");
    }
    const headerBytes = rtpHeaderLength(packet, length);
    if (headerBytes < 0 || packet.length < length + srtpTrailerBytes) {
      throw badPacket(length, packet.length, this.tagBytes);
    }
    const base = address ?? addressOf(packet);
    const sequence = (packet[2] << 8) | packet[3];
    const ssrc = ((packet[8] << 24) | (packet[9] << 16) | (packet[10] << 8) | packet[11]) >>> 0;
    const roc = this.#rocs.rocFor(ssrc, sequence);
    const crypto = this.#crypto;
    const ctx = keys.cipher;
    const salt = keys.saltWords;
    const payloadAddress = base + sizeBigInts[headerBytes];
    const payloadBytes = length - headerBytes;
    if (keys.aead) {
      // RFC 7714 §8.1: IV = (00 00 || SSRC || ROC || SEQ) XOR salt, 12 bytes.
      scratchView.setUint32(ivOffset, (salt[0] ^ (ssrc >>> 16)) >>> 0);
      scratchView.setUint32(ivOffset + 4, (salt[1] ^ ((ssrc << 16) | (roc >>> 16))) >>> 0);
      scratchView.setUint32(ivOffset + 8, (salt[2] ^ ((roc << 16) | sequence)) >>> 0);
      crypto.EVP_EncryptInit_ex(ctx, 0n, 0n, 0n, ivAddress);
      crypto.EVP_EncryptUpdate(ctx, 0n, outLengthAddress, base, headerBytes);
      crypto.EVP_EncryptUpdate(ctx, payloadAddress, outLengthAddress, payloadAddress, payloadBytes);
      crypto.EVP_EncryptFinal_ex(ctx, finalAddress, outLengthAddress);
      crypto.EVP_CIPHER_CTX_ctrl(ctx, evpCtrlGcmGetTag, 16, base + sizeBigInts[length]);
      return length + 16;
    }
    // RFC 3711 §4.1.1: IV = (salt << 16) XOR (SSRC << 64) XOR (index << 16), 16 bytes.
    scratchView.setUint32(ivOffset, salt[0]);
    scratchView.setUint32(ivOffset + 4, (salt[1] ^ ssrc) >>> 0);
    scratchView.setUint32(ivOffset + 8, (salt[2] ^ roc) >>> 0);
    scratchView.setUint32(ivOffset + 12, (salt[3] ^ (sequence << 16)) >>> 0);
    crypto.EVP_EncryptInit_ex(ctx, 0n, 0n, 0n, ivAddress);
    crypto.EVP_EncryptUpdate(ctx, payloadAddress, outLengthAddress, payloadAddress, payloadBytes);
    // The tag authenticates packet || ROC: the ROC goes where the tag will be.
    packet[length] = roc >>> 24;
    packet[length + 1] = (roc >>> 16) & 0xff;
    packet[length + 2] = (roc >>> 8) & 0xff;
    packet[length + 3] = roc & 0xff;
    const hmac = keys.hmac;
    crypto.HMAC_Init_ex(hmac, 0n, 0, 0n, 0n);
    crypto.HMAC_Update(hmac, base, sizeBigInts[length + 4]);
    crypto.HMAC_Final(hmac, macAddress, outLengthAddress);
    packet.set(scratch.subarray(macOffset, macOffset + this.tagBytes), length);
    return length + this.tagBytes;
  }

  rolloverCounter(ssrc: number): number {
    return this.#rocs.current(ssrc);
  }

  close(): void {
    this.#keys.close();
  }
}
