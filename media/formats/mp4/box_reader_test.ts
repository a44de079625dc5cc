import assert from "node:assert/strict";
import { ParseError, TruncatedError } from "../../../core/errors.ts";
import { type Box, ByteReader, findBox, iterateBoxes, readBoxHeader } from "./box_reader.ts";
import { BoxWriter } from "./box_writer.ts";
import { mutate, parsesOrThrowsParseError, prng, randomBytes } from "../test_fixtures.ts";

function sample(): Uint8Array {
  const w = new BoxWriter(16);
  w.box("moov").fullBox("mvhd", 0, 0).u32(7).end().box("trak").box("mdia").u8(1).end().end().end();
  w.box("free").zeros(3).end();
  return w.toBytes();
}

function findPath(data: Uint8Array, path: string[]): Box | undefined {
  let box: Box | undefined;
  for (const type of path) {
    box = findBox(box ? box.payload : data, type);
    if (!box) return undefined;
  }
  return box;
}

Deno.test("iterateBoxes and findBox walk nested boxes written by BoxWriter", () => {
  const data = sample();
  assert.deepEqual([...iterateBoxes(data)].map((b) => [b.type, b.size]), [
    ["moov", 41],
    ["free", 11],
  ]);
  const mdia = findPath(data, ["moov", "trak", "mdia"]);
  assert.deepEqual(mdia?.payload, new Uint8Array([1]));
  const mvhd = new ByteReader(findPath(data, ["moov", "mvhd"])!.payload);
  assert.deepEqual(mvhd.fullBox(), [0, 0]);
  assert.equal(mvhd.u32(), 7);
  assert.throws(() => mvhd.u8(), TruncatedError);
  assert.equal(findPath(data, ["moov", "udta"]), undefined);
});

Deno.test("readBoxHeader reads 64-bit sizes, size 0 and uuid", () => {
  const large = new Uint8Array([0, 0, 0, 1, 0x6d, 0x64, 0x61, 0x74, 0, 0, 0, 1, 0, 0, 0, 16]);
  assert.deepEqual(readBoxHeader(large, 0), { type: "mdat", headerBytes: 16, size: 2 ** 32 + 16 });
  const toEnd = new Uint8Array([0, 0, 0, 0, 0x6d, 0x64, 0x61, 0x74]);
  assert.equal(readBoxHeader(toEnd, 0).size, undefined);
  const uuid = new Uint8Array([0, 0, 0, 20, 0x75, 0x75, 0x69, 0x64]);
  assert.throws(() => readBoxHeader(uuid, 0), ParseError); // 20 < 8 + 16 header bytes
  assert.throws(() => readBoxHeader(toEnd.subarray(0, 7), 0), TruncatedError);
  const overrun = new Uint8Array([0, 0, 0, 99, 0x66, 0x72, 0x65, 0x65]);
  assert.throws(() => [...iterateBoxes(overrun)], ParseError);
});

Deno.test("box reader fuzz: random and mutated boxes throw ParseError only", () => {
  const rand = prng(7);
  const valid = sample();
  const walk = (data: Uint8Array, depth: number): void => {
    for (const box of iterateBoxes(data)) {
      if (depth < 4) walk(box.payload, depth + 1);
    }
  };
  for (let i = 0; i < 5000; i++) {
    const data = i % 3 === 0
      ? randomBytes(rand, Math.floor(rand() * 64))
      : i % 3 === 1
      ? mutate(rand, valid, 1 + Math.floor(rand() * 3))
      : valid.subarray(0, Math.floor(rand() * valid.length));
    parsesOrThrowsParseError(() => walk(data, 0), "iterateBoxes");
    parsesOrThrowsParseError(() => new ByteReader(data).u64(), "u64");
  }
});
