/**
 * SRTP unprotection for the WebRTC bench's receivers, on libcrypto over FFI: the inverse of
 * media/rtp/srtp/srtp_ffi.ts (AES-CM with HMAC-SHA1, RFC 3711; AES-GCM, RFC 7714). Every
 * packet's authentication tag is checked and its payload decrypted in place, so a receiver
 * counts only packets the server protected correctly. The decrypt symbols live here, not in
 * media/rtp/srtp/libcrypto.ts: only the bench unprotects SRTP.
 */
import { deriveSrtpSessionKeys } from "../../media/rtp/srtp/srtp_kdf.ts";
import {
  type SrtpMasterKeys,
  type SrtpProfile,
  srtpProfileSizes,
} from "../../media/rtp/srtp/srtp_profile.ts";
import { RolloverCounters } from "../../media/rtp/srtp/srtp_rollover.ts";
import { rtpHeaderLength } from "../../media/rtp/srtp/rtp_header_length.ts";
import { addressOf, pointerValue } from "../../media/rtp/srtp/libcrypto.ts";

const symbols = {
  EVP_CIPHER_CTX_new: { parameters: [], result: "pointer" },
  EVP_CIPHER_CTX_free: { parameters: ["pointer"], result: "void" },
  EVP_aes_128_ctr: { parameters: [], result: "pointer" },
  EVP_aes_128_gcm: { parameters: [], result: "pointer" },
  EVP_aes_256_gcm: { parameters: [], result: "pointer" },
  EVP_sha1: { parameters: [], result: "pointer" },
  // (ctx, cipher, engine, key, iv)
  EVP_DecryptInit_ex: { parameters: ["u64", "u64", "u64", "u64", "u64"], result: "i32" },
  // (ctx, out, &outl, in, inl)
  EVP_DecryptUpdate: { parameters: ["u64", "u64", "u64", "u64", "i32"], result: "i32" },
  EVP_DecryptFinal_ex: { parameters: ["u64", "u64", "u64"], result: "i32" },
  EVP_CIPHER_CTX_ctrl: { parameters: ["u64", "i32", "i32", "u64"], result: "i32" },
  HMAC_CTX_new: { parameters: [], result: "pointer" },
  HMAC_CTX_free: { parameters: ["pointer"], result: "void" },
  HMAC_Init_ex: { parameters: ["u64", "u64", "i32", "u64", "u64"], result: "i32" },
  HMAC_Update: { parameters: ["u64", "u64", "u64"], result: "i32" },
  HMAC_Final: { parameters: ["u64", "u64", "u64"], result: "i32" },
} as const;

type Crypto = Deno.DynamicLibrary<typeof symbols>["symbols"];

/** `EVP_CTRL_GCM_SET_TAG` of openssl/evp.h. */
const evpCtrlGcmSetTag = 0x11;

let loaded: Crypto | undefined;

function crypto(): Crypto {
  loaded ??= Deno.dlopen("libcrypto.so.3", symbols).symbols;
  return loaded;
}

/**
 * Per-thread scratch (IV, output length, HMAC digest, the tag under check); 4 KiB so V8
 * keeps it off its moving heap.
 */
const scratch = new Uint8Array(4096);
const scratchView = new DataView(scratch.buffer);
const ivOffset = 0;
const outLengthOffset = 32;
const macOffset = 64;
const tagOffset = 128;
const finalOffset = 192;
let scratchAddress = 0n;

/** Unprotects the SRTP packets of one direction of one DTLS-SRTP association. */
export class SrtpUnprotector {
  readonly tagBytes: number;
  readonly #crypto: Crypto;
  readonly #aead: boolean;
  readonly #rocs = new RolloverCounters();
  readonly #saltWords: Uint32Array;
  #cipherCtx: Deno.PointerValue;
  #hmacCtx: Deno.PointerValue = null;
  readonly #cipher: bigint;
  readonly #hmac: bigint = 0n;

  /** Keys the contexts with the session keys derived from `keys`; throws without libcrypto. */
  constructor(profile: SrtpProfile, keys: SrtpMasterKeys) {
    const c = crypto();
    this.#crypto = c;
    if (scratchAddress === 0n) scratchAddress = addressOf(scratch);
    const size = srtpProfileSizes(profile);
    this.tagBytes = size.tagBytes;
    this.#aead = size.aead;
    const session = deriveSrtpSessionKeys(profile, keys);
    const salt = new Uint8Array(16);
    salt.set(session.salt);
    const view = new DataView(salt.buffer);
    this.#saltWords = Uint32Array.from([0, 4, 8, 12], (at) => view.getUint32(at));
    this.#cipherCtx = c.EVP_CIPHER_CTX_new();
    this.#cipher = pointerValue(this.#cipherCtx);
    const cipher = size.aead
      ? (size.keyBytes === 32 ? c.EVP_aes_256_gcm() : c.EVP_aes_128_gcm())
      : c.EVP_aes_128_ctr();
    const key = new Uint8Array(4096);
    key.set(session.cipherKey);
    if (c.EVP_DecryptInit_ex(this.#cipher, pointerValue(cipher), 0n, addressOf(key), 0n) !== 1) {
      this.close();
      throw new Error("EVP_DecryptInit_ex failed");
    }
    if (!size.aead) {
      this.#hmacCtx = c.HMAC_CTX_new();
      this.#hmac = pointerValue(this.#hmacCtx);
      const authKey = new Uint8Array(4096);
      authKey.set(session.authKey);
      const md = pointerValue(c.EVP_sha1());
      if (c.HMAC_Init_ex(this.#hmac, addressOf(authKey), 20, md, 0n) !== 1) {
        this.close();
        throw new Error("HMAC_Init_ex failed");
      }
    }
  }

  /**
   * Checks and decrypts the SRTP packet of `length` bytes at `packet` (native memory at
   * `address`, which must not move); returns the RTP packet's length, or -1 when it fails
   * authentication or is no RTP packet.
   */
  unprotect(packet: Uint8Array, length: number, address: bigint): number {
    const rtpLength = length - this.tagBytes;
    const headerBytes = rtpHeaderLength(packet, rtpLength);
    if (headerBytes < 0) return -1;
    const c = this.#crypto;
    const ctx = this.#cipher;
    const salt = this.#saltWords;
    const sequence = (packet[2] << 8) | packet[3];
    const ssrc = ((packet[8] << 24) | (packet[9] << 16) | (packet[10] << 8) | packet[11]) >>> 0;
    // The receiver's estimate of the index (RFC 3711 §3.3.1) is the sender's rule applied to
    // what arrives; a forged packet could move it, which a bench does not need to resist.
    const roc = this.#rocs.rocFor(ssrc, sequence);
    const payload = address + BigInt(headerBytes);
    const payloadBytes = rtpLength - headerBytes;
    const outLength = scratchAddress + BigInt(outLengthOffset);
    const iv = scratchAddress + BigInt(ivOffset);
    if (this.#aead) {
      scratchView.setUint32(ivOffset, (salt[0] ^ (ssrc >>> 16)) >>> 0);
      scratchView.setUint32(ivOffset + 4, (salt[1] ^ ((ssrc << 16) | (roc >>> 16))) >>> 0);
      scratchView.setUint32(ivOffset + 8, (salt[2] ^ ((roc << 16) | sequence)) >>> 0);
      c.EVP_DecryptInit_ex(ctx, 0n, 0n, 0n, iv);
      c.EVP_DecryptUpdate(ctx, 0n, outLength, address, headerBytes);
      c.EVP_DecryptUpdate(ctx, payload, outLength, payload, payloadBytes);
      c.EVP_CIPHER_CTX_ctrl(ctx, evpCtrlGcmSetTag, 16, address + BigInt(rtpLength));
      const ok = c.EVP_DecryptFinal_ex(ctx, scratchAddress + BigInt(finalOffset), outLength);
      return ok === 1 ? rtpLength : -1;
    }
    // The tag covers packet || ROC: keep the received tag aside, put the ROC in its place.
    const tagBytes = this.tagBytes;
    scratch.set(packet.subarray(rtpLength, length), tagOffset);
    packet[rtpLength] = roc >>> 24;
    packet[rtpLength + 1] = (roc >>> 16) & 0xff;
    packet[rtpLength + 2] = (roc >>> 8) & 0xff;
    packet[rtpLength + 3] = roc & 0xff;
    c.HMAC_Init_ex(this.#hmac, 0n, 0, 0n, 0n);
    c.HMAC_Update(this.#hmac, address, BigInt(rtpLength + 4));
    c.HMAC_Final(this.#hmac, scratchAddress + BigInt(macOffset), outLength);
    for (let i = 0; i < tagBytes; i++) {
      if (scratch[macOffset + i] !== scratch[tagOffset + i]) return -1;
    }
    scratchView.setUint32(ivOffset, salt[0]);
    scratchView.setUint32(ivOffset + 4, (salt[1] ^ ssrc) >>> 0);
    scratchView.setUint32(ivOffset + 8, (salt[2] ^ roc) >>> 0);
    scratchView.setUint32(ivOffset + 12, (salt[3] ^ (sequence << 16)) >>> 0);
    c.EVP_DecryptInit_ex(ctx, 0n, 0n, 0n, iv);
    c.EVP_DecryptUpdate(ctx, payload, outLength, payload, payloadBytes);
    return rtpLength;
  }

  /** Frees the native contexts (safe twice). */
  close(): void {
    if (this.#cipherCtx !== null) this.#crypto.EVP_CIPHER_CTX_free(this.#cipherCtx);
    if (this.#hmacCtx !== null) this.#crypto.HMAC_CTX_free(this.#hmacCtx);
    this.#cipherCtx = null;
    this.#hmacCtx = null;
  }
}
