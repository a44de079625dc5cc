import assert from "node:assert/strict";
import {
  buildKeyMaterial,
  KeyMaterial,
  KeyMaterialError,
  KK_BOTH,
  parseKeyMaterial,
} from "./key_material.ts";

/** The KMREQ extension content ffmpeg 5.1 / libsrt 1.5.1 sent (passphrase 0123456789abc). */
const FFMPEG_KMREQ_HEX = "122029010000000002000200000004" +
  "0486bb2ba16ba1c72a929f2171b65d80dd906f59f614ed157382894c3889644630e71a5dad48a8e790";

function fromHex(hex: string): Uint8Array {
  return new Uint8Array(hex.match(/../g)!.map((h) => parseInt(h, 16)));
}

function sample(kk: number, keyLength: number): KeyMaterial {
  const keys = kk === KK_BOTH ? 2 : 1;
  return {
    version: 1,
    packetType: 2,
    sign: 0x2029,
    keyBasedEncryption: kk,
    keyEncryptionKeyIndex: 0,
    cipher: 2,
    auth: 0,
    streamEncapsulation: 2,
    saltLength: 16,
    keyLength,
    salt: Uint8Array.from({ length: 16 }, (_, i) => i + 1),
    wrappedKeys: Uint8Array.from({ length: 8 + keys * keyLength }, (_, i) => 255 - i),
  };
}

Deno.test("key material: parses the KMREQ libsrt sends", () => {
  const km = parseKeyMaterial(fromHex(FFMPEG_KMREQ_HEX));
  assert.deepEqual(km.version, 1);
  assert.deepEqual(km.packetType, 2);
  assert.deepEqual(km.sign, 0x2029);
  assert.deepEqual(km.keyBasedEncryption, 1);
  assert.deepEqual(km.keyEncryptionKeyIndex, 0);
  assert.deepEqual(km.cipher, 2);
  assert.deepEqual(km.auth, 0);
  assert.deepEqual(km.streamEncapsulation, 2);
  assert.deepEqual(km.saltLength, 16);
  assert.deepEqual(km.keyLength, 16);
  assert.deepEqual(km.wrappedKeys.length, 24);
  assert.deepEqual(buildKeyMaterial(km), fromHex(FFMPEG_KMREQ_HEX));
});

Deno.test("key material: build then parse gives the same message for every KK and key length", () => {
  for (const kk of [1, 2, 3]) {
    for (const keyLength of [16, 24, 32]) {
      const km = sample(kk, keyLength);
      const bytes = buildKeyMaterial(km);
      assert.deepEqual(bytes.length, 16 + 16 + km.wrappedKeys.length);
      assert.deepEqual(parseKeyMaterial(bytes), km);
    }
  }
});

Deno.test("key material: fields that disagree are refused on build", () => {
  assert.throws(
    () => buildKeyMaterial({ ...sample(3, 16), wrappedKeys: new Uint8Array(24) }),
    KeyMaterialError,
  );
  assert.throws(() => buildKeyMaterial({ ...sample(1, 16), keyLength: 20 }), KeyMaterialError);
  assert.throws(
    () => buildKeyMaterial({ ...sample(1, 16), keyBasedEncryption: 0 }),
    KeyMaterialError,
  );
  assert.throws(
    () => buildKeyMaterial({ ...sample(1, 16), salt: new Uint8Array(8) }),
    KeyMaterialError,
  );
  assert.throws(() => buildKeyMaterial({ ...sample(1, 16), cipher: 256 }), KeyMaterialError);
});

Deno.test("key material: every truncation and extension of a valid message is a KeyMaterialError", () => {
  const bytes = fromHex(FFMPEG_KMREQ_HEX);
  for (let n = 0; n < bytes.length; n++) {
    assert.throws(() => parseKeyMaterial(bytes.subarray(0, n)), KeyMaterialError);
  }
  const longer = new Uint8Array(bytes.length + 4);
  longer.set(bytes);
  assert.throws(() => parseKeyMaterial(longer), KeyMaterialError);
});

Deno.test("key material: wrong version, type, sign, KK, salt or key length are refused", () => {
  const good = fromHex(FFMPEG_KMREQ_HEX);
  const patches: Array<[number, number]> = [
    [0, 0x22], // version 2
    [0, 0x13], // packet type 3
    [0, 0x92], // S bit
    [1, 0x21], // sign
    [3, 0x00], // KK 0 names no key
    [14, 0x02], // salt length 8
    [15, 0x05], // key length 20
  ];
  for (const [offset, value] of patches) {
    const bytes = good.slice();
    bytes[offset] = value;
    assert.throws(() => parseKeyMaterial(bytes), KeyMaterialError, `byte ${offset}`);
  }
});

Deno.test("key material fuzz: random and mutated bytes only ever raise KeyMaterialError", () => {
  let seed = 0x5eed;
  const random = () => (seed = (seed * 1103515245 + 12345) >>> 0) / 2 ** 32;
  const good = fromHex(FFMPEG_KMREQ_HEX);
  let parsed = 0;
  for (let i = 0; i < 20000; i++) {
    let bytes: Uint8Array;
    if (i % 2) {
      bytes = Uint8Array.from({ length: Math.floor(random() * 96) }, () => random() * 256);
    } else {
      bytes = good.slice(0, Math.floor(random() * (good.length + 8)));
      for (let m = 0; m < 3; m++) bytes[Math.floor(random() * bytes.length)] = random() * 256;
    }
    try {
      const km = parseKeyMaterial(bytes);
      assert.deepEqual(parseKeyMaterial(buildKeyMaterial(km)), km); // reserved bits are ignored
      parsed++;
    } catch (error) {
      if (!(error instanceof KeyMaterialError)) throw error;
    }
  }
  // Mutations that keep the header intact still parse (salt and key bytes are opaque).
  assert.ok(parsed > 0);
});
