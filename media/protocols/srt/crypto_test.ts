import assert from "node:assert/strict";
import {
  deriveKek,
  packetIv,
  pbkdf2Sha1,
  SrtCipher,
  SrtCryptoError,
  unwrapKeys,
  wrapKeys,
} from "./crypto.ts";
import { buildKeyMaterial, KeyMaterialError, parseKeyMaterial } from "./key_material.ts";

function fromHex(hex: string): Uint8Array<ArrayBuffer> {
  return new Uint8Array(hex.replace(/\s/g, "").match(/../g)!.map((h) => parseInt(h, 16)));
}

const text = (s: string) => new TextEncoder().encode(s);

/** A KM message and passphrase libsrt 1.5.1 (ffmpeg 5.1 caller, pbkeylen=16) produced. */
const LIBSRT_KM = fromHex(
  "12202901 00000000 02000200 00000404 86bb2ba16ba1c72a929f2171b65d80dd" +
    "906f59f614ed157382894c3889644630e71a5dad48a8e790",
);
const LIBSRT_PASSPHRASE = "0123456789abc";

async function aesKwKey(hex: string): Promise<CryptoKey> {
  return await crypto.subtle.importKey("raw", fromHex(hex), "AES-KW", false, [
    "wrapKey",
    "unwrapKey",
  ]);
}

Deno.test("crypto: RFC 3394 §4 key wrap vectors wrap and unwrap", async () => {
  const kek128 = "000102030405060708090A0B0C0D0E0F";
  const kek192 = kek128 + "1011121314151617";
  const kek256 = kek128 + "101112131415161718191A1B1C1D1E1F";
  const data128 = "00112233445566778899AABBCCDDEEFF";
  const vectors: Array<[string, string, string]> = [
    [kek128, data128, "1FA68B0A8112B447 AEF34BD8FB5A7B82 9D3E862371D2CFE5"],
    [kek192, data128, "96778B25AE6CA435 F92B5B97C050AED2 468AB8A17AD84E5D"],
    [kek256, data128, "64E8C3F9CE0F5BA2 63E9777905818A2A 93C8191E7D6E8AE7"],
    [
      kek192,
      data128 + "0001020304050607",
      "031D33264E15D332 68F24EC260743EDC E1C6C7DDEE725A93 6BA814915C6762D2",
    ],
    [
      kek256,
      data128 + "0001020304050607",
      "A8F9BC1612C68B3F F6E6F4FBE30E71E4 769C8B80A32CB895 8CD5D17D6B254DA1",
    ],
    [
      kek256,
      data128 + "000102030405060708090A0B0C0D0E0F",
      "28C9F404C4B810F4 CBCCB35CFB87F826 3F5786E2D80ED326 CBC7F0E71A99F43B FB988B9B7A02DD21",
    ],
  ];
  for (const [kek, data, wrapped] of vectors) {
    const key = await aesKwKey(kek);
    assert.deepEqual(await wrapKeys(key, fromHex(data)), fromHex(wrapped));
    assert.deepEqual(await unwrapKeys(key, fromHex(wrapped)), fromHex(data));
  }
});

Deno.test("crypto: an unwrap whose integrity check fails is an SrtCryptoError", async () => {
  const wrapped = fromHex("1FA68B0A8112B447 AEF34BD8FB5A7B82 9D3E862371D2CFE5");
  const otherKek = await aesKwKey("000102030405060708090A0B0C0D0E0E");
  await assert.rejects(unwrapKeys(otherKek, wrapped), SrtCryptoError);
});

Deno.test("crypto: PBKDF2-HMAC-SHA1 matches RFC 6070", async () => {
  const vectors: Array<[Uint8Array, Uint8Array, number, string]> = [
    [text("password"), text("salt"), 1, "0c60c80f961f0e71f3a9b524af6012062fe037a6"],
    [text("password"), text("salt"), 2, "ea6c014dc72d6f8ccd1ed92ace1d41f0d8de8957"],
    [text("password"), text("salt"), 4096, "4b007901b765489abead49d926f721d065a429c1"],
    [
      text("passwordPASSWORDpassword"),
      text("saltSALTsaltSALTsaltSALTsaltSALTsalt"),
      4096,
      "3d2eec4fe41c849b80c8d83662c0e44a8b291a964cf2f07038",
    ],
    [text("pass\0word"), text("sa\0lt"), 4096, "56fa6aa75548099dcc37d7f03425e0c3"],
  ];
  for (const [password, salt, iterations, hex] of vectors) {
    const out = await pbkdf2Sha1(password, salt, iterations, hex.length / 2);
    assert.deepEqual(out, fromHex(hex));
  }
});

Deno.test("crypto: AES-CTR with a 128-bit counter matches NIST SP 800-38A F.5.1", async () => {
  const key = await crypto.subtle.importKey(
    "raw",
    fromHex("2b7e151628aed2a6abf7158809cf4f3c"),
    "AES-CTR",
    false,
    ["encrypt"],
  );
  const out = await crypto.subtle.encrypt(
    { name: "AES-CTR", counter: fromHex("f0f1f2f3f4f5f6f7f8f9fafbfcfdfeff"), length: 128 },
    key,
    fromHex(
      "6bc1bee22e409f96e93d7e117393172aae2d8a571e03ac9c9eb76fac45af8e51" +
        "30c81c46a35ce411e5fbc1191a0a52eff69f2445df4f9b17ad2b417be66c3710",
    ),
  );
  assert.deepEqual(
    new Uint8Array(out),
    fromHex(
      "874d6191b620e3261bef6864990db6ce9806f66b7970fdff8617187bb9fffdff" +
        "5ae4df3edbd5d35e5b4f09020db03eab1e031dda2fbe03d1792170a0f3009cee",
    ),
  );
});

Deno.test("crypto: the packet IV puts the packet index in bytes 10..13 under 14 salt bytes", () => {
  const salt = Uint8Array.from({ length: 16 }, (_, i) => 0x10 + i);
  assert.deepEqual(
    packetIv(salt, 0x01020304),
    fromHex("10111213141516171819 1b 19 1f 19 0000"),
  );
  assert.deepEqual(
    packetIv(new Uint8Array(16), 0x7fffffff),
    fromHex("00000000000000000000 7fffffff 0000"),
  );
});

Deno.test("crypto: libsrt's key material unwraps with its passphrase, a wrong one is refused", async () => {
  const km = parseKeyMaterial(LIBSRT_KM);
  const cipher = await SrtCipher.fromKeyMaterial(km, LIBSRT_PASSPHRASE);
  assert.equal(cipher.keyLength, 16);
  assert.ok(cipher.hasKey(1));
  assert.ok(!cipher.hasKey(2));
  assert.equal(cipher.txKey, 1);
  assert.deepEqual(cipher.keyMaterial(), LIBSRT_KM);
  await assert.rejects(SrtCipher.fromKeyMaterial(km, "0123456789abd"), SrtCryptoError);
  await assert.rejects(SrtCipher.fromKeyMaterial(km, "short"), SrtCryptoError);
  await assert.rejects(
    SrtCipher.fromKeyMaterial({ ...km, cipher: 4 }, LIBSRT_PASSPHRASE),
    SrtCryptoError,
  );
});

Deno.test("crypto: the KEK is PBKDF2 over the last 8 salt bytes, as long as the key", async () => {
  const km = parseKeyMaterial(LIBSRT_KM);
  const kekBytes = await pbkdf2Sha1(text(LIBSRT_PASSPHRASE), km.salt.slice(8), 2048, 16);
  const kek = await aesKwKey(Array.from(kekBytes, (b) => b.toString(16).padStart(2, "0")).join(""));
  const sek = await unwrapKeys(kek, km.wrappedKeys);
  assert.equal(sek.length, 16);
  assert.deepEqual(
    await unwrapKeys(await deriveKek(LIBSRT_PASSPHRASE, km.salt, 16), km.wrappedKeys),
    sek,
  );
});

Deno.test("crypto: a sender's KM opens on the receiver, payloads round trip for 128/192/256", async () => {
  for (const keyLength of [16, 24, 32] as const) {
    const sender = await SrtCipher.create("correct horse battery", keyLength);
    const km = parseKeyMaterial(sender.keyMaterial());
    assert.equal(km.keyLength, keyLength);
    assert.equal(km.keyBasedEncryption, 1);
    const receiver = await SrtCipher.fromKeyMaterial(km, "correct horse battery");
    await assert.rejects(SrtCipher.fromKeyMaterial(km, "correct horse batterx"), SrtCryptoError);
    const payload = Uint8Array.from({ length: 1316 }, (_, i) => i * 7);
    for (const seq of [0, 1, 0x7fffffff]) {
      const sealed = await sender.encrypt(seq, payload);
      assert.equal(sealed.kk, 1);
      assert.notDeepEqual(sealed.payload, payload);
      assert.deepEqual(await receiver.decrypt(seq, sealed.kk, sealed.payload), payload);
      // Another packet index gives another keystream.
      assert.notDeepEqual(await receiver.decrypt(seq + 1, sealed.kk, sealed.payload), payload);
    }
  }
});

Deno.test("crypto: the keystream is AES-CTR of the SEK from the libsrt IV", async () => {
  const sender = await SrtCipher.create("correct horse battery", 16);
  const km = parseKeyMaterial(sender.keyMaterial());
  const sek = await unwrapKeys(
    await deriveKek("correct horse battery", km.salt, 16),
    km.wrappedKeys,
  );
  const key = await crypto.subtle.importKey(
    "raw",
    sek as Uint8Array<ArrayBuffer>,
    "AES-CTR",
    false,
    [
      "encrypt",
    ],
  );
  const zeros = new Uint8Array(64);
  const expected = await crypto.subtle.encrypt(
    { name: "AES-CTR", counter: packetIv(km.salt, 1234) as Uint8Array<ArrayBuffer>, length: 128 },
    key,
    zeros,
  );
  assert.deepEqual((await sender.encrypt(1234, zeros)).payload, new Uint8Array(expected));
});

Deno.test("crypto: key refresh announces both keys, switches, then retires the old one", async () => {
  const sender = await SrtCipher.create("refresh passphrase", 16);
  const receiver = await SrtCipher.fromKeyMaterial(
    parseKeyMaterial(sender.keyMaterial()),
    "refresh passphrase",
  );
  const payload = text("a TS packet would be here");
  const before = await sender.encrypt(10, payload);
  assert.equal(before.kk, 1);

  const both = parseKeyMaterial(await sender.refresh());
  assert.equal(both.keyBasedEncryption, 3);
  assert.equal(both.wrappedKeys.length, 8 + 2 * 16);
  assert.equal(
    (await sender.encrypt(11, payload)).kk,
    1,
    "the old key stays active until switched",
  );
  await receiver.updateKeyMaterial(both);
  assert.ok(receiver.hasKey(1) && receiver.hasKey(2));
  assert.deepEqual(receiver.keyMaterial(), buildKeyMaterial(both), "the KMRSP echoes the KMREQ");

  sender.activateNewKey();
  const after = await sender.encrypt(12, payload);
  assert.equal(after.kk, 2);
  assert.deepEqual(await receiver.decrypt(12, 2, after.payload), payload);
  assert.deepEqual(
    await receiver.decrypt(10, 1, before.payload),
    payload,
    "late packets still open",
  );

  const odd = parseKeyMaterial(await sender.retireOldKey());
  assert.equal(odd.keyBasedEncryption, 2);
  assert.ok(!sender.hasKey(1));
  await receiver.updateKeyMaterial(odd);
  assert.deepEqual(await receiver.decrypt(12, 2, after.payload), payload);

  // A second refresh goes back to the even slot.
  assert.equal(parseKeyMaterial(await sender.refresh()).keyBasedEncryption, 3);
  sender.activateNewKey();
  assert.equal((await sender.encrypt(13, payload)).kk, 1);
});

Deno.test("crypto: a packet naming a key never announced is an SrtCryptoError", async () => {
  const cipher = await SrtCipher.create("correct horse battery", 16);
  await assert.rejects(cipher.decrypt(1, 2, new Uint8Array(188)), SrtCryptoError);
  assert.throws(() => cipher.activateNewKey(), SrtCryptoError);
});

Deno.test("crypto: a refresh KM wrapped under another passphrase leaves the keys untouched", async () => {
  const receiver = await SrtCipher.fromKeyMaterial(parseKeyMaterial(LIBSRT_KM), LIBSRT_PASSPHRASE);
  const intruder = await SrtCipher.create("another passphrase", 16);
  await assert.rejects(
    receiver.updateKeyMaterial(parseKeyMaterial(intruder.keyMaterial())),
    SrtCryptoError,
  );
  assert.deepEqual(receiver.keyMaterial(), LIBSRT_KM);
  assert.ok(!receiver.hasKey(2));
});

Deno.test("crypto: KM bytes cut short never reach the crypto (typed parse error)", () => {
  assert.throws(() => parseKeyMaterial(LIBSRT_KM.subarray(0, 40)), KeyMaterialError);
});

Deno.test("crypto: create refuses key lengths and passphrases libsrt would refuse", async () => {
  await assert.rejects(SrtCipher.create("123456789", 16), SrtCryptoError);
  await assert.rejects(SrtCipher.create("x".repeat(80), 16), SrtCryptoError);
  await assert.rejects(SrtCipher.create("correct horse battery", 20 as 16), SrtCryptoError);
});
