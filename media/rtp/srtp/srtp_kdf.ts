/**
 * The SRTP key derivation function (RFC 3711 §4.3.1, AES-CM PRF; RFC 6188 for 256-bit keys,
 * RFC 7714 §12 for AEAD): session cipher key, salt and authentication key from the master
 * key and salt, key derivation rate 0. Runs once per subscriber, so node:crypto is enough.
 */
import { createCipheriv } from "node:crypto";
import { BadRequestError } from "../../../core/errors.ts";
import { type SrtpMasterKeys, type SrtpProfile, srtpProfileSizes } from "./srtp_profile.ts";

/** Session keys of the SRTP (not SRTCP) direction. */
export interface SrtpSessionKeys {
  /** Session cipher key (16 or 32 bytes). */
  cipherKey: Uint8Array;
  /** Session salt: 14 bytes for AES-CM, 12 for AEAD. */
  salt: Uint8Array;
  /** HMAC-SHA1 key (20 bytes); unused by AEAD profiles. */
  authKey: Uint8Array;
}

/** KDF labels of RFC 3711 §4.3.1 for SRTP. */
const labelCipher = 0x00;
const labelAuth = 0x01;
const labelSalt = 0x02;

/** `bytes` of AES-CM keystream of the PRF for `label`. */
function prf(
  masterKey: Uint8Array,
  masterSalt: Uint8Array,
  label: number,
  bytes: number,
): Uint8Array {
  // x = (label || index/kdr) XOR master salt, the salt right-aligned in 14 bytes; a 12-byte
  // AEAD salt is zero-extended on the right as libsrtp does (RFC 7714 §12).
  const x = new Uint8Array(16);
  x.set(masterSalt.subarray(0, 14));
  x[7] ^= label;
  const blocks = Math.ceil(bytes / 16);
  const input = new Uint8Array(blocks * 16);
  for (let i = 0; i < blocks; i++) {
    input.set(x, i * 16);
    input[i * 16 + 14] = i >> 8;
    input[i * 16 + 15] = i & 0xff;
  }
  const cipher = createCipheriv(`aes-${masterKey.length * 8}-ecb`, masterKey, null);
  cipher.setAutoPadding(false);
  const out = new Uint8Array(cipher.update(input));
  return out.slice(0, bytes);
}

/** Derives the SRTP session keys of `profile` from one direction's master key and salt. */
export function deriveSrtpSessionKeys(
  profile: SrtpProfile,
  keys: SrtpMasterKeys,
): SrtpSessionKeys {
  const size = srtpProfileSizes(profile);
  if (keys.masterKey.length !== size.keyBytes) {
    throw new BadRequestError(
      "masterKey",
      `${profile} needs a ${size.keyBytes}-byte master key, got ${keys.masterKey.length}`,
    );
  }
  if (keys.masterSalt.length !== size.saltBytes) {
    throw new BadRequestError(
      "masterSalt",
      `${profile} needs a ${size.saltBytes}-byte master salt, got ${keys.masterSalt.length}`,
    );
  }
  return {
    cipherKey: prf(keys.masterKey, keys.masterSalt, labelCipher, size.keyBytes),
    salt: prf(keys.masterKey, keys.masterSalt, labelSalt, size.saltBytes),
    authKey: size.aead ? new Uint8Array(0) : prf(keys.masterKey, keys.masterSalt, labelAuth, 20),
  };
}
