import assert from "node:assert/strict";
import { ParseError } from "../../core/errors.ts";
import { parseSenderReports } from "./rtcp.ts";

Deno.test("the sender report of a compound packet (SR + SDES) is read", () => {
  const sr = new Uint8Array(28);
  const v = new DataView(sr.buffer);
  v.setUint8(0, 0x80);
  v.setUint8(1, 200);
  v.setUint16(2, 6);
  v.setUint32(4, 0xabcd);
  v.setUint32(8, 3_900_000_000);
  v.setUint32(12, 0x80000000); // half a second
  v.setUint32(16, 123456);
  const sdes = Uint8Array.of(0x81, 202, 0, 1, 0, 0, 0xab, 0xcd);
  const compound = new Uint8Array([...sr, ...sdes]);
  assert.deepEqual(parseSenderReports(compound), [
    { ssrc: 0xabcd, ntpMs: 3_900_000_000_500, rtpTimestamp: 123456 },
  ]);
  assert.throws(() => parseSenderReports(compound.subarray(0, 30)), ParseError);
});
