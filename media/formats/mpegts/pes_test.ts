import assert from "node:assert/strict";
import { parsePesHeader, PesStreamId, writePesHeader } from "./pes.ts";
import { mutate, parsesOrThrowsParseError, prng, randomBytes } from "../test_fixtures.ts";

Deno.test("PES headers round-trip PTS/DTS, wrapped modulo 2^33", () => {
  const buf = new Uint8Array(64);
  const n = writePesHeader(buf, 0, PesStreamId.video, 2 ** 33 + 5, 2 ** 33 - 3, 1000, true);
  assert.equal(n, 19);
  const h = parsePesHeader(buf);
  assert.deepEqual([h.streamId, h.packetLength, h.pts, h.dts, h.payloadOffset], [
    0xe0,
    0,
    5,
    2 ** 33 - 3,
    19,
  ]);
  const m = writePesHeader(buf, 0, PesStreamId.audio, 123456789, 123456789, 100, false);
  const a = parsePesHeader(buf);
  assert.deepEqual([m, a.packetLength, a.pts, a.dts], [14, 108, 123456789, 123456789]);
});

Deno.test("PES fuzz: header parser throws ParseError only", () => {
  const rand = prng(10);
  const valid = new Uint8Array(19);
  writePesHeader(valid, 0, PesStreamId.video, 90000, 86400, 10, false);
  for (let i = 0; i < 5000; i++) {
    const data = i % 2 ? randomBytes(rand, Math.floor(rand() * 24)) : mutate(rand, valid, 2);
    parsesOrThrowsParseError(() => parsePesHeader(data), "parsePesHeader");
  }
});
