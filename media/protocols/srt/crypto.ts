/**
 * SRT passphrase encryption with WebCrypto only, as libsrt (haicrypt) does it on the wire:
 * - KEK = PBKDF2-HMAC-SHA1(passphrase, last 8 bytes of the 16-byte salt, 2048 iterations),
 *   as long as the stream key;
 * - the stream encrypting keys (SEK, even and odd) travel wrapped with AES key wrap
 *   (RFC 3394) under the KEK in a Key Material message; the wrap's integrity check is what
 *   tells a wrong passphrase;
 * - payloads are AES-CTR with the IV {zeros(80) | packet index(32) | block counter(16)}
 *   whose first 112 bits are xored with the first 14 salt bytes (haicrypt hcrypt_SetCtrIV;
 *   the draft's "(MSB(112, Salt) << 2) XOR PktSeqNo" formula is not what peers do).
 */

import {
  buildKeyMaterial,
  type KeyMaterial,
  KK_BOTH,
  KK_EVEN,
  KK_ODD,
  KM_CIPHER_AES_CTR,
  KM_PACKET_TYPE,
  KM_SALT_LENGTH_BYTES,
  KM_SE_SRT,
  KM_SIGN,
  KM_VERSION,
} from "./key_material.ts";

/** Raised when keys cannot be derived or used: wrong passphrase, missing key, bad cipher. */
export class SrtCryptoError extends Error {
  constructor(message: string, options?: ErrorOptions) {
    super(message, options);
    this.name = "SrtCryptoError";
  }
}

/** PBKDF2 iteration count libsrt uses. */
export const PBKDF2_ITERATIONS = 2048;
/** libsrt feeds PBKDF2 with the last 8 bytes of the salt. */
export const PBKDF2_SALT_BYTES = 8;
/** Shortest passphrase libsrt accepts (characters). */
export const PASSPHRASE_MIN_CHARS = 10;
/** Longest passphrase libsrt accepts (characters). */
export const PASSPHRASE_MAX_CHARS = 79;
/** Salt bytes xored into the AES-CTR IV (112 bits). */
const IV_SALT_BYTES = 14;
/** Offset of the 32-bit packet index in the IV. */
const IV_PACKET_INDEX_OFFSET = 10;
/** OpenSSL's CTR (libsrt's backend) counts with the whole 128-bit block. */
const CTR_COUNTER_BITS = 128;

/** KK value of one key: 1 even, 2 odd. */
export type KeyIndex = 1 | 2;

/** One stream encrypting key and the salt it was announced with. */
interface StreamKey {
  sek: Uint8Array;
  key: CryptoKey;
  salt: Uint8Array;
}

/** WebCrypto takes views of plain ArrayBuffers (a shared one is copied). */
function source(bytes: Uint8Array): Uint8Array<ArrayBuffer> {
  return bytes.buffer instanceof ArrayBuffer ? bytes as Uint8Array<ArrayBuffer> : bytes.slice();
}

function checkPassphrase(passphrase: string): void {
  if (passphrase.length < PASSPHRASE_MIN_CHARS || passphrase.length > PASSPHRASE_MAX_CHARS) {
    throw new SrtCryptoError(
      `passphrase has ${passphrase.length} characters, libsrt takes ${PASSPHRASE_MIN_CHARS}..${PASSPHRASE_MAX_CHARS}`,
    );
  }
}

function checkKeyLength(keyLength: number): void {
  if (keyLength !== 16 && keyLength !== 24 && keyLength !== 32) {
    throw new SrtCryptoError(`key length ${keyLength} bytes, want 16, 24 or 32`);
  }
}

/** KEK of `passphrase` for `salt` (the whole 16-byte KM salt), as an AES-KW key. */
export async function deriveKek(
  passphrase: string,
  salt: Uint8Array,
  keyLength: number,
): Promise<CryptoKey> {
  const bits = await pbkdf2Sha1(
    new TextEncoder().encode(passphrase),
    salt.slice(salt.length - PBKDF2_SALT_BYTES),
    PBKDF2_ITERATIONS,
    keyLength,
  );
  return await crypto.subtle.importKey("raw", source(bits), "AES-KW", false, [
    "wrapKey",
    "unwrapKey",
  ]);
}

/** PBKDF2-HMAC-SHA1 (RFC 8018), `lengthBytes` of output. */
export async function pbkdf2Sha1(
  password: Uint8Array,
  salt: Uint8Array,
  iterations: number,
  lengthBytes: number,
): Promise<Uint8Array> {
  const base = await crypto.subtle.importKey("raw", source(password), "PBKDF2", false, [
    "deriveBits",
  ]);
  const bits = await crypto.subtle.deriveBits(
    { name: "PBKDF2", hash: "SHA-1", salt: source(salt), iterations },
    base,
    lengthBytes * 8,
  );
  return new Uint8Array(bits);
}

/** Any-length carrier so WebCrypto wraps raw bytes (one SEK or two concatenated). */
const RAW_BYTES_ALGORITHM = { name: "HMAC", hash: "SHA-256" } as const;

/** RFC 3394 AES key wrap of `keys` (a multiple of 8 bytes) under `kek`. */
export async function wrapKeys(kek: CryptoKey, keys: Uint8Array): Promise<Uint8Array> {
  const carrier = await crypto.subtle.importKey("raw", source(keys), RAW_BYTES_ALGORITHM, true, [
    "sign",
  ]);
  return new Uint8Array(await crypto.subtle.wrapKey("raw", carrier, kek, "AES-KW"));
}

/**
 * RFC 3394 AES key unwrap.
 * @throws SrtCryptoError when the integrity check fails (a wrong passphrase).
 */
export async function unwrapKeys(kek: CryptoKey, wrapped: Uint8Array): Promise<Uint8Array> {
  let carrier: CryptoKey;
  try {
    carrier = await crypto.subtle.unwrapKey(
      "raw",
      source(wrapped),
      kek,
      "AES-KW",
      RAW_BYTES_ALGORITHM,
      true,
      ["sign"],
    );
  } catch (cause) {
    throw new SrtCryptoError("key unwrap integrity check failed: wrong passphrase", { cause });
  }
  return new Uint8Array(await crypto.subtle.exportKey("raw", carrier));
}

/** The AES-CTR initial counter block of packet `seq` under `salt` (hcrypt_SetCtrIV). */
export function packetIv(salt: Uint8Array, seq: number): Uint8Array {
  const iv = new Uint8Array(16);
  new DataView(iv.buffer).setUint32(IV_PACKET_INDEX_OFFSET, seq >>> 0);
  for (let i = 0; i < IV_SALT_BYTES; i++) iv[i] ^= salt[i];
  return iv;
}

async function importSek(sek: Uint8Array): Promise<CryptoKey> {
  return await crypto.subtle.importKey("raw", source(sek), "AES-CTR", false, [
    "encrypt",
    "decrypt",
  ]);
}

function otherKey(kk: KeyIndex): KeyIndex {
  return kk === KK_EVEN ? KK_ODD : KK_EVEN;
}

function keyName(kk: KeyIndex): string {
  return kk === KK_EVEN ? "even" : "odd";
}

/**
 * The encryption state of one SRT connection: both stream keys, the KEK to (un)wrap them,
 * and the Key Material message announcing them.
 *
 * Key refresh on the sending side follows libsrt's order: `refresh()` announces a new key
 * in the free slot (KM with both keys), `activateNewKey()` makes `encrypt` use it, and
 * `retireOldKey()` drops the old one (KM with the new key only). A receiver passes each
 * KMREQ it gets to `updateKeyMaterial()` and answers its bytes as the KMRSP.
 */
export class SrtCipher {
  readonly #passphrase: string;
  readonly #keyLength: number;
  #kek: CryptoKey;
  #kekSalt: Uint8Array;
  readonly #keys = new Map<KeyIndex, StreamKey>();
  #txKey: KeyIndex = KK_EVEN;
  #km: Uint8Array = new Uint8Array();

  private constructor(passphrase: string, keyLength: number, kek: CryptoKey, kekSalt: Uint8Array) {
    this.#passphrase = passphrase;
    this.#keyLength = keyLength;
    this.#kek = kek;
    this.#kekSalt = kekSalt;
  }

  /**
   * Unwraps the keys of a peer's Key Material message (a KMREQ) with `passphrase`.
   * @throws SrtCryptoError on a wrong passphrase or a cipher other than AES-CTR.
   */
  static async fromKeyMaterial(km: KeyMaterial, passphrase: string): Promise<SrtCipher> {
    checkPassphrase(passphrase);
    checkKeyLength(km.keyLength);
    const kek = await deriveKek(passphrase, km.salt, km.keyLength);
    const cipher = new SrtCipher(passphrase, km.keyLength, kek, km.salt.slice());
    await cipher.updateKeyMaterial(km);
    return cipher;
  }

  /** A new sender-side state: random salt and even key, announced by `keyMaterial()`. */
  static async create(passphrase: string, keyLengthBytes: 16 | 24 | 32): Promise<SrtCipher> {
    checkPassphrase(passphrase);
    checkKeyLength(keyLengthBytes);
    const salt = crypto.getRandomValues(new Uint8Array(KM_SALT_LENGTH_BYTES));
    const kek = await deriveKek(passphrase, salt, keyLengthBytes);
    const cipher = new SrtCipher(passphrase, keyLengthBytes, kek, salt);
    await cipher.#generateKey(KK_EVEN);
    cipher.#km = await cipher.#assemble(KK_EVEN);
    return cipher;
  }

  /** Stream key length in bytes (16, 24 or 32; the handshake's PBKEYLEN). */
  get keyLength(): number {
    return this.#keyLength;
  }

  /** KK of the key `encrypt` uses. */
  get txKey(): KeyIndex {
    return this.#txKey;
  }

  /** Whether the even (1) or odd (2) key is known. */
  hasKey(kk: KeyIndex): boolean {
    return this.#keys.has(kk);
  }

  /** The current Key Material message (KMREQ to send, or the KMRSP echoing a peer's). */
  keyMaterial(): Uint8Array {
    return this.#km.slice();
  }

  /**
   * Takes the keys a peer announces (a refresh KMREQ, possibly with both keys); keys the
   * message does not name stay usable for late packets.
   * @throws SrtCryptoError on a wrong passphrase, another key length, or another cipher.
   */
  async updateKeyMaterial(km: KeyMaterial): Promise<void> {
    if (km.cipher !== KM_CIPHER_AES_CTR) {
      throw new SrtCryptoError(`cipher ${km.cipher} unsupported, only AES-CTR (2)`);
    }
    if (km.keyLength !== this.#keyLength) {
      throw new SrtCryptoError(
        `key length ${km.keyLength} bytes, this connection has ${this.#keyLength}`,
      );
    }
    const kek = sameBytes(km.salt, this.#kekSalt)
      ? this.#kek
      : await deriveKek(this.#passphrase, km.salt, km.keyLength);
    const seks = await unwrapKeys(kek, km.wrappedKeys);
    this.#kek = kek;
    this.#kekSalt = km.salt.slice();
    const named: KeyIndex[] = [KK_EVEN, KK_ODD].filter((kk) =>
      km.keyBasedEncryption & kk
    ) as KeyIndex[];
    for (const [i, kk] of named.entries()) {
      const sek = seks.slice(i * km.keyLength, (i + 1) * km.keyLength);
      this.#keys.set(kk, { sek, key: await importSek(sek), salt: km.salt.slice() });
    }
    if (!named.includes(this.#txKey)) this.#txKey = named[named.length - 1];
    this.#km = buildKeyMaterial(km);
  }

  /**
   * Decrypts one data packet's payload with the key its KK bits name.
   * @throws SrtCryptoError when that key was never announced.
   */
  async decrypt(seq: number, kk: KeyIndex, payload: Uint8Array): Promise<Uint8Array> {
    const key = this.#keys.get(kk);
    if (!key) {
      throw new SrtCryptoError(`packet ${seq} uses the ${keyName(kk)} key, never announced`);
    }
    const out = await crypto.subtle.decrypt(
      { name: "AES-CTR", counter: source(packetIv(key.salt, seq)), length: CTR_COUNTER_BITS },
      key.key,
      source(payload),
    );
    return new Uint8Array(out);
  }

  /** Encrypts one data packet's payload with the active key; `kk` goes in its header. */
  async encrypt(seq: number, payload: Uint8Array): Promise<{ kk: KeyIndex; payload: Uint8Array }> {
    const kk = this.#txKey;
    const key = this.#keys.get(kk)!;
    const out = await crypto.subtle.encrypt(
      { name: "AES-CTR", counter: source(packetIv(key.salt, seq)), length: CTR_COUNTER_BITS },
      key.key,
      source(payload),
    );
    return { kk, payload: new Uint8Array(out) };
  }

  /**
   * Makes a new key in the slot `encrypt` does not use and returns the Key Material
   * message announcing both keys (send it as a KMREQ before `activateNewKey()`).
   */
  async refresh(): Promise<Uint8Array> {
    const fresh = otherKey(this.#txKey);
    await this.#generateKey(fresh);
    this.#km = await this.#assemble(KK_BOTH);
    return this.keyMaterial();
  }

  /** Switches `encrypt` to the key announced by the last `refresh()`. */
  activateNewKey(): void {
    const fresh = otherKey(this.#txKey);
    if (!this.#keys.has(fresh)) throw new SrtCryptoError("no refreshed key to activate");
    this.#txKey = fresh;
  }

  /** Drops the key `encrypt` no longer uses; returns the KM announcing the active key only. */
  async retireOldKey(): Promise<Uint8Array> {
    this.#keys.delete(otherKey(this.#txKey));
    this.#km = await this.#assemble(this.#txKey);
    return this.keyMaterial();
  }

  async #generateKey(kk: KeyIndex): Promise<void> {
    const sek = crypto.getRandomValues(new Uint8Array(this.#keyLength));
    this.#keys.set(kk, { sek, key: await importSek(sek), salt: this.#kekSalt.slice() });
  }

  /** KM message for the keys `kk` names, wrapped even first as libsrt orders them. */
  async #assemble(kk: number): Promise<Uint8Array> {
    const seks = [KK_EVEN, KK_ODD].filter((k) => kk & k).map((k) =>
      this.#keys.get(k as KeyIndex)!.sek
    );
    const plain = new Uint8Array(seks.length * this.#keyLength);
    seks.forEach((sek, i) => plain.set(sek, i * this.#keyLength));
    const wrappedKeys = await wrapKeys(this.#kek, plain);
    return buildKeyMaterial({
      version: KM_VERSION,
      packetType: KM_PACKET_TYPE,
      sign: KM_SIGN,
      keyBasedEncryption: kk,
      keyEncryptionKeyIndex: 0,
      cipher: KM_CIPHER_AES_CTR,
      auth: 0,
      streamEncapsulation: KM_SE_SRT,
      saltLength: KM_SALT_LENGTH_BYTES,
      keyLength: this.#keyLength,
      salt: this.#kekSalt,
      wrappedKeys,
    });
  }
}

function sameBytes(a: Uint8Array, b: Uint8Array): boolean {
  return a.length === b.length && a.every((v, i) => v === b[i]);
}
