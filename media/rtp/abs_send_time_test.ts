import assert from "node:assert/strict";
import { Buffer } from "node:buffer";
import { RtpHeader, RtpPacket } from "werift";
import { absSendTime, writeAbsSendTime } from "./abs_send_time.ts";

Deno.test("abs-send-time is 6.18 fixed-point seconds in 24 bits, wrapping every 64 s", () => {
  assert.equal(absSendTime(0), 0);
  assert.equal(absSendTime(1000), 1 << 18);
  assert.equal(absSendTime(1500), (1 << 18) + (1 << 17));
  assert.equal(absSendTime(64_000), 0, "wraps after 64 s");
  assert.equal(absSendTime(64_250), 1 << 16);
});

Deno.test("the payload is written big-endian in place and survives an RTP header", () => {
  const payload = Buffer.alloc(3);
  writeAbsSendTime(payload, 63_999.999);
  assert.deepEqual([...payload], [0xff, 0xff, 0xff]);
  const header = new RtpHeader({ ssrc: 7, payloadType: 102, sequenceNumber: 1, timestamp: 1 });
  header.extensions = [{ id: 3, payload }];
  writeAbsSendTime(payload, 2250);
  const parsed = RtpPacket.deSerialize(new RtpPacket(header, Buffer.from([1, 2])).serialize());
  const ext = parsed.header.extensions.find((e) => e.id === 3)!;
  assert.equal((ext.payload[0] << 16) | (ext.payload[1] << 8) | ext.payload[2], 2.25 * 262144);
  assert.deepEqual([...parsed.payload], [1, 2]);
});
