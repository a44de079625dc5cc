import assert from "node:assert/strict";
import { ParseError } from "../../core/errors.ts";
import {
  annexBToLengthPrefixed,
  joinLengthPrefixed,
  lengthPrefixedToAnnexB,
  removeEmulationPrevention,
  splitAnnexB,
  splitLengthPrefixed,
} from "./nalu.ts";
import { mutate, parsesOrThrowsParseError, prng, randomBytes } from "../formats/test_fixtures.ts";

const u8 = (...b: number[]) => new Uint8Array(b);

Deno.test("splitAnnexB finds NAL units after 3- and 4-byte start codes", () => {
  const stream = u8(0, 0, 0, 1, 0x67, 1, 2, 0, 0, 1, 0x68, 3, 0, 0, 0, 0, 1, 0x65, 0, 0, 4, 0);
  const nals = splitAnnexB(stream);
  assert.deepEqual(nals, [u8(0x67, 1, 2), u8(0x68, 3), u8(0x65, 0, 0, 4)]);
  assert.deepEqual(splitAnnexB(u8(1, 2, 3)), []);
});

Deno.test("Annex-B and length-prefixed layouts convert both ways", () => {
  const stream = u8(0, 0, 0, 1, 0x67, 1, 2, 0, 0, 0, 1, 0x68, 3);
  const prefixed = annexBToLengthPrefixed(stream);
  assert.deepEqual(prefixed, u8(0, 0, 0, 3, 0x67, 1, 2, 0, 0, 0, 2, 0x68, 3));
  assert.deepEqual(lengthPrefixedToAnnexB(prefixed), stream);
  assert.deepEqual(splitLengthPrefixed(u8(0, 2, 9, 9, 0, 1, 7), 2), [u8(9, 9), u8(7)]);
  assert.deepEqual(joinLengthPrefixed([u8(5)]), u8(0, 0, 0, 1, 5));
  assert.throws(() => splitLengthPrefixed(u8(0, 0, 0, 9, 1)), ParseError);
  assert.throws(() => splitLengthPrefixed(u8(0, 0)), ParseError);
});

Deno.test("removeEmulationPrevention drops the 0x03 of every 0x000003", () => {
  assert.deepEqual(removeEmulationPrevention(u8(0x67, 0, 0, 3, 1)), u8(0x67, 0, 0, 1));
  assert.deepEqual(removeEmulationPrevention(u8(0, 0, 3, 0, 0, 3, 0)), u8(0, 0, 0, 0, 0));
  assert.deepEqual(removeEmulationPrevention(u8(0, 0, 3, 3)), u8(0, 0, 3));
  const plain = u8(1, 0, 0, 2);
  assert.equal(removeEmulationPrevention(plain), plain);
});

Deno.test("NAL framing fuzz: random and mutated input never throws other errors", () => {
  const rand = prng(2);
  const valid = joinLengthPrefixed([u8(0x65, 1, 2, 3), u8(0x41, 4)]);
  for (let i = 0; i < 2000; i++) {
    const data = i % 2 ? randomBytes(rand, Math.floor(rand() * 64)) : mutate(rand, valid, 2);
    splitAnnexB(data);
    removeEmulationPrevention(data);
    parsesOrThrowsParseError(() => splitLengthPrefixed(data, 1 + Math.floor(rand() * 4)), "split");
    parsesOrThrowsParseError(() => lengthPrefixedToAnnexB(data), "toAnnexB");
  }
});
