import assert from "node:assert/strict";
import { TruncatedError } from "../../core/errors.ts";
import { BitReader } from "./bitreader.ts";
import { prng, randomBytes } from "../formats/test_fixtures.ts";

/** Packs a string of '0'/'1' into bytes, MSB first, zero-padded. */
function bits(s: string): Uint8Array {
  const out = new Uint8Array(Math.ceil(s.length / 8));
  for (let i = 0; i < s.length; i++) if (s[i] === "1") out[i >> 3] |= 0x80 >> (i & 7);
  return out;
}

Deno.test("BitReader reads fixed-width fields MSB first", () => {
  const r = new BitReader(new Uint8Array([0b1010_1100, 0xff, 0x00, 0x12, 0x34]));
  assert.equal(r.readBit(), 1);
  assert.equal(r.readBits(3), 0b010);
  assert.equal(r.readBits(8), 0b1100_1111);
  assert.equal(r.bitsLeft, 28);
  r.skipBits(12);
  assert.equal(r.readBits(16), 0x1234);
  assert.throws(() => r.readBit(), TruncatedError);
});

Deno.test("BitReader decodes exp-Golomb ue(v) and se(v)", () => {
  const r = new BitReader(
    bits("1" + "010" + "011" + "00100" + "0001000" + "010" + "011" + "00100"),
  );
  assert.deepEqual([r.readUE(), r.readUE(), r.readUE(), r.readUE(), r.readUE()], [0, 1, 2, 3, 7]);
  assert.deepEqual([r.readSE(), r.readSE(), r.readSE()], [1, -1, 2]);
  const big = new BitReader(bits("0".repeat(31) + "1" + "1".repeat(31)));
  assert.equal(big.readUE(), 2 ** 32 - 2);
});

Deno.test("BitReader throws TruncatedError on endless or cut codes", () => {
  assert.throws(() => new BitReader(new Uint8Array(8)).readUE(), TruncatedError);
  assert.throws(() => new BitReader(bits("00000001")).readUE(), TruncatedError);
  assert.throws(() => new BitReader(new Uint8Array(1)).readBits(9), TruncatedError);
});

Deno.test("BitReader fuzz: random reads end in TruncatedError only", () => {
  const rand = prng(1);
  for (let i = 0; i < 2000; i++) {
    const r = new BitReader(randomBytes(rand, Math.floor(rand() * 16)));
    try {
      for (let op = 0; op < 200; op++) {
        const pick = rand();
        if (pick < 0.3) r.readUE();
        else if (pick < 0.6) r.readSE();
        else r.readBits(Math.floor(rand() * 33));
      }
    } catch (e) {
      assert.ok(e instanceof TruncatedError, String(e));
    }
  }
});
