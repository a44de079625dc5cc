/**
 * SrtpProtector on OpenSSL's libcrypto over FFI (fastpath.md design 3d): one EVP_CIPHER_CTX
 * (and one HMAC_CTX for AES-CM) per context, keyed once; per packet only the IV is set and
 * the payload encrypted in place, so a packet costs a handful of fast FFI calls and no
 * allocation.
 */
import { deriveSrtpSessionKeys } from "./srtp_kdf.ts";
import { type SrtpProfile, srtpProfileSizes } from "./srtp_profile.ts";
import {
  badPacket,
  type SrtpBackend,
  type SrtpProtector,
  type SrtpProtectorInit,
  srtpTrailerBytes,
} from "./srtp_protector.ts";
import { RolloverCounters } from "./srtp_rollover.ts";
import { rtpHeaderLength } from "./rtp_header_length.ts";
import {
  addressOf,
  evpCtrlGcmGetTag,
  type Libcrypto,
  libcrypto,
  pointerValue,
} from "./libcrypto.ts";

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
  readonly #aead: boolean;
  readonly #rocs = new RolloverCounters();
  /** Session salt as big-endian words, XORed into each IV. */
  readonly #saltWords: Uint32Array;
  #cipherCtx: Deno.PointerValue;
  #hmacCtx: Deno.PointerValue = null;
  #cipherAddress: bigint;
  #hmacAddress = 0n;

  /** Derives the session keys of `init` and keys the native contexts; throws without libcrypto. */
  constructor(init: SrtpProtectorInit) {
    const { crypto, error } = libcrypto();
    if (!crypto) throw new Error(`libcrypto over FFI is unavailable: ${error}`);
    ensureScratch();
    this.#crypto = crypto;
    const size = srtpProfileSizes(init.profile);
    this.profile = init.profile;
    this.tagBytes = size.tagBytes;
    this.#aead = size.aead;
    const keys = deriveSrtpSessionKeys(init.profile, init);
    const salt = new Uint8Array(16);
    salt.set(keys.salt);
    const saltView = new DataView(salt.buffer);
    this.#saltWords = Uint32Array.of(
      saltView.getUint32(0),
      saltView.getUint32(4),
      saltView.getUint32(8),
      saltView.getUint32(12),
    );
    this.#cipherCtx = crypto.EVP_CIPHER_CTX_new();
    this.#cipherAddress = pointerValue(this.#cipherCtx);
    if (this.#cipherAddress === 0n) throw new Error("EVP_CIPHER_CTX_new failed");
    const cipher = size.aead
      ? (size.keyBytes === 32 ? crypto.EVP_aes_256_gcm() : crypto.EVP_aes_128_gcm())
      : crypto.EVP_aes_128_ctr();
    // Key buffers are copied by OpenSSL during init, so short-lived copies are fine.
    const key = new Uint8Array(4096);
    key.set(keys.cipherKey);
    const ok = crypto.EVP_EncryptInit_ex(
      this.#cipherAddress,
      pointerValue(cipher),
      0n,
      addressOf(key),
      0n,
    );
    if (ok !== 1) {
      this.close();
      throw new Error("EVP_EncryptInit_ex failed");
    }
    if (!size.aead) {
      this.#hmacCtx = crypto.HMAC_CTX_new();
      this.#hmacAddress = pointerValue(this.#hmacCtx);
      const authKey = new Uint8Array(4096);
      authKey.set(keys.authKey);
      const hmacOk = this.#hmacAddress !== 0n && crypto.HMAC_Init_ex(
            this.#hmacAddress,
            addressOf(authKey),
            keys.authKey.length,
            pointerValue(crypto.EVP_sha1()),
            0n,
          ) === 1;
      if (!hmacOk) {
        this.close();
        throw new Error("HMAC_Init_ex failed");
      }
    }
  }

  protect(packet: Uint8Array, length: number, address?: bigint): number {
    if (this.#cipherAddress === 0n) {
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
    const ctx = this.#cipherAddress;
    const salt = this.#saltWords;
    const payloadAddress = base + sizeBigInts[headerBytes];
    const payloadBytes = length - headerBytes;
    if (this.#aead) {
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
    const hmac = this.#hmacAddress;
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
    if (this.#cipherCtx !== null) this.#crypto.EVP_CIPHER_CTX_free(this.#cipherCtx);
    if (this.#hmacCtx !== null) this.#crypto.HMAC_CTX_free(this.#hmacCtx);
    this.#cipherCtx = null;
    this.#hmacCtx = null;
    this.#cipherAddress = 0n;
    this.#hmacAddress = 0n;
  }
}
