/**
 * The native contexts of one SRTP direction on libcrypto, keyed once with the session keys
 * derived from a DTLS-SRTP association's master key and salt (RFC 3711 §4.3): an
 * EVP_CIPHER_CTX (AES-CM, or AES-GCM per RFC 7714) and, for AES-CM, an HMAC_CTX (SHA-1).
 * The protector (encrypting) and the unprotector (decrypting) share this keying; per packet
 * they set only the IV.
 */
import { deriveSrtpSessionKeys } from "./srtp_kdf.ts";
import { type SrtpProfile, srtpProfileSizes } from "./srtp_profile.ts";
import type { SrtpProtectorInit } from "./srtp_protector.ts";
import { addressOf, type Libcrypto, pointerValue } from "./libcrypto.ts";

/** Keyed cipher (and HMAC) contexts of one direction. */
export class SrtpNativeKeys {
  readonly profile: SrtpProfile;
  /** Bytes of the authentication tag after each packet. */
  readonly tagBytes: number;
  /** AES-GCM (the tag comes from the cipher) rather than AES-CM with HMAC-SHA1. */
  readonly aead: boolean;
  /** Session salt as big-endian words, XORed into each IV. */
  readonly saltWords: Uint32Array;
  /** Address of the cipher context as a u64 argument; 0n once closed. */
  cipher = 0n;
  /** Address of the HMAC context as a u64 argument; 0n for AES-GCM and once closed. */
  hmac = 0n;
  readonly #crypto: Libcrypto;
  #cipherCtx: Deno.PointerValue = null;
  #hmacCtx: Deno.PointerValue = null;

  /** Derives the session keys of `init` and keys contexts that `direction` the payloads. */
  constructor(crypto: Libcrypto, init: SrtpProtectorInit, direction: "encrypt" | "decrypt") {
    this.#crypto = crypto;
    const size = srtpProfileSizes(init.profile);
    this.profile = init.profile;
    this.tagBytes = size.tagBytes;
    this.aead = size.aead;
    const session = deriveSrtpSessionKeys(init.profile, init);
    const salt = new Uint8Array(16);
    salt.set(session.salt);
    const view = new DataView(salt.buffer);
    this.saltWords = Uint32Array.from([0, 4, 8, 12], (at) => view.getUint32(at));
    this.#cipherCtx = crypto.EVP_CIPHER_CTX_new();
    this.cipher = pointerValue(this.#cipherCtx);
    if (this.cipher === 0n) throw new Error("EVP_CIPHER_CTX_new failed");
    const cipher = size.aead
      ? (size.keyBytes === 32 ? crypto.EVP_aes_256_gcm() : crypto.EVP_aes_128_gcm())
      : crypto.EVP_aes_128_ctr();
    // OpenSSL copies the keys during init, so short-lived buffers are fine; 4 KiB keeps them
    // off V8's moving heap while their address is passed.
    const key = new Uint8Array(4096);
    key.set(session.cipherKey);
    const cipherAddress = pointerValue(cipher);
    const keyed = direction === "encrypt"
      ? crypto.EVP_EncryptInit_ex(this.cipher, cipherAddress, 0n, addressOf(key), 0n)
      : crypto.EVP_DecryptInit_ex(this.cipher, cipherAddress, 0n, addressOf(key), 0n);
    if (keyed !== 1) {
      this.close();
      throw new Error(`EVP_${direction === "encrypt" ? "Encrypt" : "Decrypt"}Init_ex failed`);
    }
    if (!size.aead) {
      this.#hmacCtx = crypto.HMAC_CTX_new();
      this.hmac = pointerValue(this.#hmacCtx);
      const authKey = new Uint8Array(4096);
      authKey.set(session.authKey);
      const md = pointerValue(crypto.EVP_sha1());
      const ok = this.hmac !== 0n &&
        crypto.HMAC_Init_ex(this.hmac, addressOf(authKey), session.authKey.length, md, 0n) === 1;
      if (!ok) {
        this.close();
        throw new Error("HMAC_Init_ex failed");
      }
    }
  }

  /** Frees the native contexts (safe twice). */
  close(): void {
    if (this.#cipherCtx !== null) this.#crypto.EVP_CIPHER_CTX_free(this.#cipherCtx);
    if (this.#hmacCtx !== null) this.#crypto.HMAC_CTX_free(this.#hmacCtx);
    this.#cipherCtx = null;
    this.#hmacCtx = null;
    this.cipher = 0n;
    this.hmac = 0n;
  }
}
