import assert from "node:assert/strict";
import { randomBytes } from "node:crypto";
import { RtpHeader, RtpPacket, SrtpSession } from "werift";
import { addressOf } from "../../media/rtp/srtp/libcrypto.ts";
import { SrtpUnprotector } from "./srtp_unprotect.ts";

/** Sequence numbers across the wrap. */
const sequences = [65533, 65534, 65535, 0, 1, 2];

for (
  const [profile, weriftId] of [["AES_CM_128_HMAC_SHA1_80", 1], ["AEAD_AES_128_GCM", 7]] as const
) {
  Deno.test(`${profile}: werift's SRTP unprotects to the sent packet; a changed byte fails`, () => {
    const masterKey = randomBytes(16);
    const masterSalt = randomBytes(profile.startsWith("AEAD") ? 12 : 14);
    const werift = new SrtpSession({
      profile: weriftId,
      keys: {
        localMasterKey: masterKey,
        localMasterSalt: masterSalt,
        remoteMasterKey: masterKey,
        remoteMasterSalt: masterSalt,
      },
    });
    const unprotector = new SrtpUnprotector(profile, { masterKey, masterSalt });
    // Native memory that stays put, as a receiver's recvmmsg slots.
    const slot = new Uint8Array(4096);
    const address = addressOf(slot);
    try {
      for (const sequence of sequences) {
        const payload = randomBytes(1100);
        const header = new RtpHeader({
          sequenceNumber: sequence,
          ssrc: 0x1234abcd,
          payloadType: 96,
        });
        const plain = new Uint8Array(new RtpPacket(header, payload).serialize());
        const srtp = new Uint8Array(werift.encrypt(payload, header));
        slot.set(srtp);
        assert.equal(unprotector.unprotect(slot, srtp.length, address), plain.length);
        assert.deepEqual(slot.subarray(0, plain.length), plain, `sequence ${sequence}`);
        slot.set(srtp);
        slot[40] ^= 1;
        assert.equal(unprotector.unprotect(slot, srtp.length, address), -1);
        slot.set(srtp);
        slot[srtp.length - 1] ^= 1;
        assert.equal(unprotector.unprotect(slot, srtp.length, address), -1);
      }
    } finally {
      unprotector.close();
    }
  });
}
