import assert from "node:assert/strict";
import { randomBytes } from "node:crypto";
import { Buffer } from "node:buffer";
import { RtpPacket, SrtpSession } from "werift";
import { deriveSrtpSessionKeys } from "./srtp_kdf.ts";
import { FfiSrtpProtector } from "./srtp_ffi.ts";
import { PortableSrtpProtector } from "./srtp_portable.ts";
import type { SrtpProfile } from "./srtp_profile.ts";
import { type SrtpProtector, srtpTrailerBytes } from "./srtp_protector.ts";
import { createSrtpProtector } from "./srtp_select.ts";

const hex = (s: string) => Uint8Array.from(Buffer.from(s, "hex"));

/** Sequence numbers across the wrap, with a retransmission from before it (65534). */
const sequences = [65530, 65531, 65532, 65533, 65534, 65535, 0, 1, 2, 65534, 3, 4, 5];

/** An RTP packet; every third one carries a CSRC and a header extension. */
function rtpPacket(
  sequence: number,
  ssrc: number,
  payloadBytes: number,
  rich: boolean,
): Uint8Array {
  const extra = rich ? 4 + 8 : 0;
  const packet = new Uint8Array(12 + extra + payloadBytes);
  const view = new DataView(packet.buffer);
  packet[0] = rich ? 0x91 : 0x80;
  packet[1] = 96 | (sequence % 2 ? 0x80 : 0);
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

function protectCopy(protector: SrtpProtector, packet: Uint8Array): Uint8Array {
  const room = new Uint8Array(packet.length + srtpTrailerBytes);
  room.set(packet);
  return room.slice(0, protector.protect(room, packet.length));
}

const weriftProfiles: [SrtpProfile, number][] = [
  ["AES_CM_128_HMAC_SHA1_80", 1],
  ["AEAD_AES_128_GCM", 7],
];

for (const [profile, weriftId] of weriftProfiles) {
  Deno.test(`${profile}: FFI and portable SRTP are byte-identical to werift across the sequence wrap`, () => {
    const aead = profile.startsWith("AEAD");
    const masterKey = randomBytes(16);
    const masterSalt = randomBytes(aead ? 12 : 14);
    const werift = new SrtpSession({
      profile: weriftId,
      keys: {
        localMasterKey: masterKey,
        localMasterSalt: masterSalt,
        remoteMasterKey: masterKey,
        remoteMasterSalt: masterSalt,
      },
    });
    const init = { profile, masterKey, masterSalt };
    const ffi = new FfiSrtpProtector(init);
    const portable = new PortableSrtpProtector(init);
    try {
      for (const [i, sequence] of sequences.entries()) {
        for (const ssrc of [0x1234abcd, 0xfedcba98]) {
          const plain = rtpPacket(sequence, ssrc, [1200, 160, 1, 0][i % 4], i % 3 === 0);
          const parsed = RtpPacket.deSerialize(Buffer.from(plain));
          const expected = new Uint8Array(werift.encrypt(parsed.payload, parsed.header));
          assert.deepEqual(protectCopy(ffi, plain), expected, `ffi, sequence ${sequence}`);
          assert.deepEqual(protectCopy(portable, plain), expected, `portable, ${sequence}`);
          // werift's receiving side takes them back to the original packet.
          assert.deepEqual(new Uint8Array(werift.decrypt(Buffer.from(expected))), plain);
        }
      }
      assert.equal(ffi.rolloverCounter(0x1234abcd), 1);
      assert.equal(portable.rolloverCounter(0xfedcba98), 1);
    } finally {
      ffi.close();
    }
  });
}

Deno.test("AES_CM_128_HMAC_SHA1_32 is the _80 packet with the tag cut to 4 bytes", () => {
  const masterKey = randomBytes(16);
  const masterSalt = randomBytes(14);
  const p80 = new FfiSrtpProtector({ profile: "AES_CM_128_HMAC_SHA1_80", masterKey, masterSalt });
  const p32 = new FfiSrtpProtector({ profile: "AES_CM_128_HMAC_SHA1_32", masterKey, masterSalt });
  const portable = new PortableSrtpProtector({
    profile: "AES_CM_128_HMAC_SHA1_32",
    masterKey,
    masterSalt,
  });
  try {
    for (const sequence of sequences) {
      const plain = rtpPacket(sequence, 7, 1000, false);
      const full = protectCopy(p80, plain);
      const short = protectCopy(p32, plain);
      assert.deepEqual(short, full.subarray(0, plain.length + 4));
      assert.deepEqual(protectCopy(portable, plain), short);
    }
  } finally {
    p80.close();
    p32.close();
  }
});

Deno.test("AEAD_AES_256_GCM: FFI and portable give the same bytes", () => {
  const init = {
    profile: "AEAD_AES_256_GCM" as const,
    masterKey: randomBytes(32),
    masterSalt: randomBytes(12),
  };
  const ffi = new FfiSrtpProtector(init);
  const portable = new PortableSrtpProtector(init);
  try {
    for (const sequence of sequences) {
      const plain = rtpPacket(sequence, 99, 700, sequence % 2 === 0);
      const out = protectCopy(ffi, plain);
      assert.equal(out.length, plain.length + 16);
      assert.deepEqual(protectCopy(portable, plain), out);
    }
    // A packet inside a larger buffer, at an odd offset, is found at its own address.
    const twin = new FfiSrtpProtector(init);
    try {
      const plain = rtpPacket(7, 1234, 300, false); // an SSRC new to both
      const slab = new Uint8Array(8192);
      slab.set(plain, 1001);
      const inPlace = slab.subarray(1001, 1001 + plain.length + srtpTrailerBytes);
      const length = twin.protect(inPlace, plain.length);
      assert.deepEqual(inPlace.subarray(0, length), protectCopy(portable, plain));
    } finally {
      twin.close();
    }
  } finally {
    ffi.close();
  }
});

Deno.test("the KDF gives RFC 3711 B.3's session keys", () => {
  const keys = deriveSrtpSessionKeys("AES_CM_128_HMAC_SHA1_80", {
    masterKey: hex("E1F97A0D3E018BE0D64FA32C06DE4139"),
    masterSalt: hex("0EC675AD498AFEEBB6960B3AABE6"),
  });
  assert.deepEqual(keys.cipherKey, hex("C61E7A93744F39EE10734AFE3FF7A087"));
  assert.deepEqual(keys.salt, hex("30CBBC08863D8C85D49DB34A9AE1"));
  assert.deepEqual(keys.authKey, hex("CEBE321F6FF7716B6FD4AB49AF256A156D38BAA4"));
});

Deno.test("bad keys and packets are refused", () => {
  assert.throws(
    () =>
      createSrtpProtector({
        profile: "AEAD_AES_128_GCM",
        masterKey: randomBytes(16),
        masterSalt: randomBytes(14),
      }),
    (err: Error & { field?: string }) => err.field === "masterSalt",
  );
  const protector = createSrtpProtector({
    profile: "AEAD_AES_128_GCM",
    masterKey: randomBytes(16),
    masterSalt: randomBytes(12),
  });
  try {
    assert.equal(protector.backend, "ffi");
    assert.throws(() => protector.protect(new Uint8Array(20), 20), RangeError);
    const packet = rtpPacket(1, 1, 10, false);
    assert.throws(() => protector.protect(packet, packet.length), RangeError); // no tag room
  } finally {
    protector.close();
  }
  assert.throws(() => protector.protect(new Uint8Array(64), 12), /closed/);
});
