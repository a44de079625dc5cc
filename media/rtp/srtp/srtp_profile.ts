/**
 * SRTP protection profiles (RFC 5764 §4.1.2, RFC 7714 §14): key, salt and tag sizes, and the
 * DTLS-SRTP profile numbers werift reports after its handshake.
 */

/** Profiles the send engine protects with. */
export type SrtpProfile =
  | "AES_CM_128_HMAC_SHA1_80"
  | "AES_CM_128_HMAC_SHA1_32"
  | "AEAD_AES_128_GCM"
  | "AEAD_AES_256_GCM";

/** Sizes that follow from a profile. */
export interface SrtpProfileSizes {
  /** Master (and session) cipher key, in bytes. */
  keyBytes: number;
  /** Master salt, in bytes (14 for AES-CM, 12 for AEAD). */
  saltBytes: number;
  /** Authentication tag appended to each packet, in bytes. */
  tagBytes: number;
  /** AEAD (AES-GCM, RFC 7714) rather than AES-CM with HMAC-SHA1 (RFC 3711). */
  aead: boolean;
}

const sizes: Record<SrtpProfile, SrtpProfileSizes> = {
  AES_CM_128_HMAC_SHA1_80: { keyBytes: 16, saltBytes: 14, tagBytes: 10, aead: false },
  AES_CM_128_HMAC_SHA1_32: { keyBytes: 16, saltBytes: 14, tagBytes: 4, aead: false },
  AEAD_AES_128_GCM: { keyBytes: 16, saltBytes: 12, tagBytes: 16, aead: true },
  AEAD_AES_256_GCM: { keyBytes: 32, saltBytes: 12, tagBytes: 16, aead: true },
};

/** Key, salt and tag sizes of `profile`. */
export function srtpProfileSizes(profile: SrtpProfile): SrtpProfileSizes {
  return sizes[profile];
}

/** DTLS-SRTP protection profile numbers (IANA "DTLS-SRTP Protection Profiles"). */
const byDtlsId: Record<number, SrtpProfile> = {
  0x0001: "AES_CM_128_HMAC_SHA1_80",
  0x0002: "AES_CM_128_HMAC_SHA1_32",
  0x0007: "AEAD_AES_128_GCM",
  0x0008: "AEAD_AES_256_GCM",
};

/** The profile of a DTLS-SRTP profile number (werift's `srtpProfile`), or undefined. */
export function srtpProfileFromDtlsId(id: number): SrtpProfile | undefined {
  return byDtlsId[id];
}

/** Master key and salt of one direction of an SRTP association (from the DTLS exporter). */
export interface SrtpMasterKeys {
  masterKey: Uint8Array;
  masterSalt: Uint8Array;
}
