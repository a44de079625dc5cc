import assert from "node:assert/strict";
import { crc32Mpeg, parsePat, parsePmt, type Pmt, StreamType, writePat, writePmt } from "./psi.ts";
import { mutate, parsesOrThrowsParseError, prng, randomBytes } from "../test_fixtures.ts";
import { ParseError } from "../../../core/errors.ts";

Deno.test("crc32Mpeg matches the CRC-32/MPEG-2 check value", () => {
  assert.equal(crc32Mpeg(new TextEncoder().encode("123456789")), 0x0376e6e7);
});

const pmt: Pmt = {
  pcrPid: 0x100,
  streams: [
    { pid: 0x100, streamType: StreamType.h264, codec: "H264" },
    { pid: 0x101, streamType: StreamType.aacAdts, codec: "AAC" },
    { pid: 0x102, streamType: StreamType.privateData, codec: "OPUS", opusChannels: 2 },
    { pid: 0x103, streamType: StreamType.h265, codec: "H265" },
  ],
};

Deno.test("PAT and PMT sections round-trip, Opus by its registration descriptor", () => {
  const buf = new Uint8Array(184);
  writePat(buf, 0, 0x1000);
  assert.equal(parsePat(buf), 0x1000);
  const n = writePmt(buf, 0, pmt);
  assert.deepEqual(parsePmt(buf.subarray(0, n)), pmt);
  buf[10] ^= 1;
  assert.throws(() => parsePmt(buf), ParseError); // CRC
});

Deno.test("PSI fuzz: PAT and PMT parsers throw ParseError only", () => {
  const rand = prng(9);
  const valid = new Uint8Array(184);
  const n = writePmt(valid, 0, pmt);
  for (let i = 0; i < 5000; i++) {
    const data = i % 3 === 0
      ? randomBytes(rand, Math.floor(rand() * 60))
      : i % 3 === 1
      ? mutate(rand, valid.subarray(0, n), 1 + Math.floor(rand() * 3))
      : valid.subarray(0, Math.floor(rand() * n));
    if (i % 3 === 1 && rand() < 0.5) {
      // Re-seal the CRC so the mutation reaches the descriptor loop.
      const end = 3 + (((data[1] & 0x0f) << 8) | data[2]) - 4;
      if (end > 0 && end + 4 <= data.length) {
        new DataView(data.buffer, data.byteOffset).setUint32(end, crc32Mpeg(data, 0, end));
      }
    }
    parsesOrThrowsParseError(() => parsePmt(data), "parsePmt");
    parsesOrThrowsParseError(() => parsePat(data), "parsePat");
  }
});
