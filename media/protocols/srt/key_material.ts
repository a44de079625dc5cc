/**
 * SRT Key Material message (draft-sharabayko-srt §3.2.2; libsrt haicrypt "KMmsg"): the
 * passphrase-wrapped stream encrypting keys a peer sends in the KMREQ/KMRSP handshake
 * extensions (types 3/4) and in KMREQ/KMRSP user-defined control packets on key refresh.
 *
 * ```text
 * word0  S(1)=0 V(3)=1 PT(4)=2 | Sign(16)=0x2029 | Resv(6) KK(2)
 * word1  KEKI(32)
 * word2  Cipher(8) Auth(8) SE(8) Resv(8)
 * word3  Resv(16) SLen/4(8) KLen/4(8)
 * ...    Salt (SLen bytes), then the RFC 3394 wrap: ICV (8 bytes) | even SEK | odd SEK
 * ```
 *
 * Pure parsing, no sockets and no crypto.
 */

/** Raised on a Key Material message that is truncated or whose fields disagree. */
export class KeyMaterialError extends Error {
  constructor(message: string) {
    super(message);
    this.name = "KeyMaterialError";
  }
}

/** KK bit: the message carries the even key. */
export const KK_EVEN = 1;
/** KK bit: the message carries the odd key. */
export const KK_ODD = 2;
/** KK value of a message carrying both keys (even first in the wrap). */
export const KK_BOTH = 3;
/** Cipher field of AES-CTR, the only cipher libsrt uses by default. */
export const KM_CIPHER_AES_CTR = 2;
/** Version field value libsrt writes and checks. */
export const KM_VERSION = 1;
/** Packet type field of a Key Material message. */
export const KM_PACKET_TYPE = 2;
/** "HAI" PnP vendor signature libsrt writes and checks. */
export const KM_SIGN = 0x2029;
/** Stream encapsulation field libsrt writes (2 = SRT). */
export const KM_SE_SRT = 2;
/** Salt length libsrt writes and accepts (bytes). */
export const KM_SALT_LENGTH_BYTES = 16;
/** Fixed header before the salt (bytes). */
export const KM_HEADER_BYTES = 16;
/** RFC 3394 integrity check value prefixed to the wrapped keys (bytes). */
export const KEY_WRAP_ICV_BYTES = 8;

/** A parsed Key Material message. */
export interface KeyMaterial {
  /** V: 1. */
  version: number;
  /** PT: 2 (keying material). */
  packetType: number;
  /** Sign: 0x2029. */
  sign: number;
  /** KK: 1 even key, 2 odd key, 3 both (even first). */
  keyBasedEncryption: number;
  /** KEKI: 0, the default stream key. */
  keyEncryptionKeyIndex: number;
  /** Cipher: 2 = AES-CTR. */
  cipher: number;
  /** Auth: 0 none. */
  auth: number;
  /** SE: 2 = SRT. */
  streamEncapsulation: number;
  /** Salt length in bytes (16). */
  saltLength: number;
  /** Length of one stream encrypting key in bytes (16, 24 or 32). */
  keyLength: number;
  /** The salt (saltLength bytes). */
  salt: Uint8Array;
  /** RFC 3394 wrap output: 8-byte ICV then 1 or 2 wrapped keys of keyLength bytes. */
  wrappedKeys: Uint8Array;
}

/** How many keys the KK field announces (0 when KK is 0). */
export function keyCount(kk: number): number {
  return (kk & KK_EVEN ? 1 : 0) + (kk & KK_ODD ? 1 : 0);
}

function checkConsistent(km: KeyMaterial): void {
  if (km.version !== KM_VERSION) throw new KeyMaterialError(`version ${km.version}, want 1`);
  if (km.packetType !== KM_PACKET_TYPE) {
    throw new KeyMaterialError(`packet type ${km.packetType}, want 2`);
  }
  if (km.sign !== KM_SIGN) throw new KeyMaterialError(`sign 0x${km.sign.toString(16)}`);
  for (
    const [name, value] of [["cipher", km.cipher], ["auth", km.auth], [
      "SE",
      km.streamEncapsulation,
    ]] as const
  ) {
    if (!Number.isInteger(value) || value < 0 || value > 0xff) {
      throw new KeyMaterialError(`${name} ${value}`);
    }
  }
  const keys = keyCount(km.keyBasedEncryption);
  if (keys === 0 || km.keyBasedEncryption > KK_BOTH) {
    throw new KeyMaterialError(`KK ${km.keyBasedEncryption} names no key`);
  }
  if (km.keyLength !== 16 && km.keyLength !== 24 && km.keyLength !== 32) {
    throw new KeyMaterialError(`key length ${km.keyLength}`);
  }
  if (km.saltLength !== KM_SALT_LENGTH_BYTES || km.salt.length !== km.saltLength) {
    throw new KeyMaterialError(`salt length ${km.saltLength} (${km.salt.length} bytes)`);
  }
  const wrapBytes = KEY_WRAP_ICV_BYTES + keys * km.keyLength;
  if (km.wrappedKeys.length !== wrapBytes) {
    throw new KeyMaterialError(`wrapped keys ${km.wrappedKeys.length} bytes, want ${wrapBytes}`);
  }
}

/**
 * Parses a Key Material message that fills `bytes` exactly.
 * @throws KeyMaterialError when truncated, too long, or a field is out of range.
 */
export function parseKeyMaterial(bytes: Uint8Array): KeyMaterial {
  if (bytes.length < KM_HEADER_BYTES) {
    throw new KeyMaterialError(`${bytes.length} bytes, shorter than the header`);
  }
  if (bytes[0] & 0x80) throw new KeyMaterialError("S bit set");
  const saltLength = bytes[14] * 4;
  const keyLength = bytes[15] * 4;
  const kk = bytes[3] & 0x03;
  const saltEnd = KM_HEADER_BYTES + saltLength;
  const expected = saltEnd + KEY_WRAP_ICV_BYTES + keyCount(kk) * keyLength;
  if (bytes.length !== expected) {
    throw new KeyMaterialError(`${bytes.length} bytes, fields announce ${expected}`);
  }
  const view = new DataView(bytes.buffer, bytes.byteOffset, bytes.byteLength);
  const km: KeyMaterial = {
    version: (bytes[0] >> 4) & 0x07,
    packetType: bytes[0] & 0x0f,
    sign: view.getUint16(1),
    keyBasedEncryption: kk,
    keyEncryptionKeyIndex: view.getUint32(4),
    cipher: bytes[8],
    auth: bytes[9],
    streamEncapsulation: bytes[10],
    saltLength,
    keyLength,
    salt: bytes.slice(KM_HEADER_BYTES, saltEnd),
    wrappedKeys: bytes.slice(saltEnd),
  };
  checkConsistent(km);
  return km;
}

/**
 * Serializes a Key Material message.
 * @throws KeyMaterialError when the fields disagree (lengths, KK, version).
 */
export function buildKeyMaterial(km: KeyMaterial): Uint8Array {
  checkConsistent(km);
  const out = new Uint8Array(KM_HEADER_BYTES + km.saltLength + km.wrappedKeys.length);
  const view = new DataView(out.buffer);
  out[0] = (km.version << 4) | km.packetType;
  view.setUint16(1, km.sign);
  out[3] = km.keyBasedEncryption;
  view.setUint32(4, km.keyEncryptionKeyIndex);
  out[8] = km.cipher;
  out[9] = km.auth;
  out[10] = km.streamEncapsulation;
  out[14] = km.saltLength / 4;
  out[15] = km.keyLength / 4;
  out.set(km.salt, KM_HEADER_BYTES);
  out.set(km.wrappedKeys, KM_HEADER_BYTES + km.saltLength);
  return out;
}
