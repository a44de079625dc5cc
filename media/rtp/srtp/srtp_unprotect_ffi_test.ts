import assert from "node:assert/strict";
import { randomBytes } from "node:crypto";
import { Buffer } from "node:buffer";
import { RtpPacket, SrtpSession } from "werift";
import type { SrtpProfile } from "./srtp_profile.ts";
import { FfiSrtpUnprotector } from "./srtp_unprotect_ffi.ts";

/** Sequence numbers across the wrap, with a late packet from before it (65534). */
const sequences = [65530, 65531, 65532, 65533, 65534, 65535, 0, 1, 2, 65534, 3, 4, 5];

/** An RTP packet; every third one carries a CSRC and a header extension. */
function rtpPacket(sequence: number, ssrc: number, payloadBytes: number, rich: boolean) {
  const extra = rich ? 4 + 8 : 0;
  const packet = new Uint8Array(12 + extra + payloadBytes);
  const view = new DataView(packet.buffer);
  packet[0] = rich ? 0x91 : 0x80;
  packet[1] = 96;
  view.setUint16(2, sequence);
  view.setUint32(4, sequence * 3000);
  view.setUint32(8, ssrc);
  if (rich) {
    view.setUint32(12, 0x11223344);
    view.setUint16(16, 0xbede);
    view.setUint16(18, 1);
    view.setUint32(20, 0x10ff0000);
  }
  packet.set(randomBytes(payloadBytes), 12 + extra);
  return packet;
}

const weriftProfiles: [SrtpProfile, number][] = [
  ["AES_CM_128_HMAC_SHA1_80", 1],
  ["AEAD_AES_128_GCM", 7],
];

for (const [profile, weriftId] of weriftProfiles) {
  const aead = profile.startsWith("AEAD");
  const keys = () => {
    const masterKey = randomBytes(16);
    const masterSalt = randomBytes(aead ? 12 : 14);
    const sender = new SrtpSession({
      profile: weriftId,
      keys: {
        localMasterKey: masterKey,
        localMasterSalt: masterSalt,
        remoteMasterKey: masterKey,
        remoteMasterSalt: masterSalt,
      },
    });
    const protect = (plain: Uint8Array) => {
      const parsed = RtpPacket.deSerialize(Buffer.from(plain));
      return new Uint8Array(sender.encrypt(parsed.payload, parsed.header));
    };
    return { masterKey, masterSalt, protect };
  };

  Deno.test(`${profile}: FFI unprotection gives back what werift protected, across the sequence wrap`, () => {
    const { masterKey, masterSalt, protect } = keys();
    const unprotector = new FfiSrtpUnprotector({ profile, masterKey, masterSalt });
    try {
      for (const [i, sequence] of sequences.entries()) {
        for (const ssrc of [0x1234abcd, 0xfedcba98]) {
          const plain = rtpPacket(sequence, ssrc, [1200, 160, 1, 0][i % 4], i % 3 === 0);
          const srtp = protect(plain);
          assert.equal(unprotector.unprotect(srtp), plain.length, `sequence ${sequence}`);
          assert.deepEqual(srtp.subarray(0, plain.length), plain, `sequence ${sequence}`);
        }
      }
    } finally {
      unprotector.close();
    }
  });

  Deno.test(`${profile}: a forged packet or a wrong key fails and leaves the packet and the index as they were`, () => {
    const { masterKey, masterSalt, protect } = keys();
    const unprotector = new FfiSrtpUnprotector({ profile, masterKey, masterSalt });
    const stranger = new FfiSrtpUnprotector({
      profile,
      masterKey: randomBytes(16),
      masterSalt,
    });
    try {
      assert.equal(unprotector.unprotect(protect(rtpPacket(40000, 7, 100, false))), 112);
      // A forged packet (no valid tag) at 5000 would move the ROC to 1 if it counted.
      const forged = rtpPacket(5000, 7, 100 + (aead ? 16 : 10), false);
      const kept = forged.slice();
      assert.equal(unprotector.unprotect(forged), -1);
      assert.deepEqual(forged, kept);
      // So 20000, which the sender protects with ROC 0 (no wrap from 40000), still passes.
      const next = rtpPacket(20000, 7, 100, true);
      assert.equal(unprotector.unprotect(protect(next)), next.length);
      // A tag from other keys fails too.
      const other = protect(rtpPacket(20001, 7, 50, false));
      assert.equal(stranger.unprotect(other), -1);
      // Too short to be RTP with a tag.
      assert.equal(unprotector.unprotect(new Uint8Array(8)), -1);
    } finally {
      unprotector.close();
      stranger.close();
    }
    const closed = protect(rtpPacket(20002, 7, 100, false));
    assert.equal(unprotector.unprotect(closed), -1, "a closed unprotector fails");
  });
}
