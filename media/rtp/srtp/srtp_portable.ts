/**
 * SrtpProtector on node:crypto: the fallback where libcrypto cannot be loaded over FFI. It is
 * ~20x slower than srtp_ffi.ts (one cipher object per packet; see fastpath.md) but gives the
 * same bytes.
 */
import { createCipheriv, createHmac } from "node:crypto";
import { deriveSrtpSessionKeys, type SrtpSessionKeys } from "./srtp_kdf.ts";
import { srtpProfileSizes } from "./srtp_profile.ts";
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

/** SRTP protection with node:crypto. */
export class PortableSrtpProtector implements SrtpProtector {
  readonly profile: SrtpProfile;
  readonly tagBytes: number;
  readonly backend: SrtpBackend = "portable";
  readonly #aead: boolean;
  readonly #keys: SrtpSessionKeys;
  readonly #cipherName: string;
  readonly #rocs = new RolloverCounters();
  #closed = false;

  /** Derives the session keys of `init`. */
  constructor(init: SrtpProtectorInit) {
    const size = srtpProfileSizes(init.profile);
    this.profile = init.profile;
    this.tagBytes = size.tagBytes;
    this.#aead = size.aead;
    this.#keys = deriveSrtpSessionKeys(init.profile, init);
    this.#cipherName = `aes-${size.keyBytes * 8}-${size.aead ? "gcm" : "ctr"}`;
  }

  protect(packet: Uint8Array, length: number): number {
    if (this.#closed) throw new Error("the SRTP protector is closed");
    const headerBytes = rtpHeaderLength(packet, length);
    if (headerBytes < 0 || packet.length < length + srtpTrailerBytes) {
      throw badPacket(length, packet.length, this.tagBytes);
    }
    const view = new DataView(packet.buffer, packet.byteOffset, packet.byteLength);
    const sequence = view.getUint16(2);
    const ssrc = view.getUint32(8);
    const roc = this.#rocs.rocFor(ssrc, sequence);
    const salt = this.#keys.salt;
    const payload = packet.subarray(headerBytes, length);
    if (this.#aead) {
      const iv = new Uint8Array(12);
      const ivView = new DataView(iv.buffer);
      ivView.setUint32(2, ssrc);
      ivView.setUint32(6, roc);
      ivView.setUint16(10, sequence);
      for (let i = 0; i < 12; i++) iv[i] ^= salt[i];
      const cipher = createCipheriv(this.#cipherName as "aes-128-gcm", this.#keys.cipherKey, iv);
      cipher.setAAD(packet.subarray(0, headerBytes));
      payload.set(cipher.update(payload));
      cipher.final();
      packet.set(cipher.getAuthTag(), length);
      return length + this.tagBytes;
    }
    const iv = new Uint8Array(16);
    const ivView = new DataView(iv.buffer);
    ivView.setUint32(4, ssrc);
    ivView.setUint32(8, roc);
    ivView.setUint16(12, sequence);
    for (let i = 0; i < 14; i++) iv[i] ^= salt[i];
    payload.set(createCipheriv(this.#cipherName, this.#keys.cipherKey, iv).update(payload));
    view.setUint32(length, roc);
    const mac = createHmac("sha1", this.#keys.authKey).update(packet.subarray(0, length + 4))
      .digest();
    packet.set(mac.subarray(0, this.tagBytes), length);
    return length + this.tagBytes;
  }

  rolloverCounter(ssrc: number): number {
    return this.#rocs.current(ssrc);
  }

  close(): void {
    this.#closed = true;
  }
}
