import assert from "node:assert/strict";
import { Buffer } from "node:buffer";
import { RtpHeader, RtpPacket } from "werift";
import { rtpBytes } from "./engine_send_path.ts";
import { absSendTime } from "../../rtp/abs_send_time.ts";

const payload = Buffer.from([1, 2, 3, 4, 5]);
const packet = new RtpPacket(
  new RtpHeader({
    marker: true,
    payloadType: 102,
    sequenceNumber: 65535,
    timestamp: 0xfedcba98,
    ssrc: 0x01020304,
  }),
  payload,
);

Deno.test("rtpBytes without an extension id: a plain 12-byte header and the payload", () => {
  const parsed = RtpPacket.deSerialize(Buffer.from(rtpBytes(packet)));
  assert.equal(parsed.header.extension, false);
  assert.equal(parsed.header.marker, true);
  assert.equal(parsed.header.payloadType, 102);
  assert.equal(parsed.header.sequenceNumber, 65535);
  assert.equal(parsed.header.timestamp, 0xfedcba98);
  assert.equal(parsed.header.ssrc, 0x01020304);
  assert.deepEqual([...parsed.payload], [...payload]);
});

Deno.test("rtpBytes with an abs-send-time id: one RFC 8285 one-byte element stamped now", () => {
  const before = absSendTime(performance.timeOrigin + performance.now());
  const parsed = RtpPacket.deSerialize(Buffer.from(rtpBytes(packet, 3)));
  const after = absSendTime(performance.timeOrigin + performance.now());
  assert.equal(parsed.header.extension, true);
  assert.equal(parsed.header.extensions.length, 1);
  assert.equal(parsed.header.extensions[0].id, 3);
  const value = parsed.header.extensions[0].payload.readUIntBE(0, 3);
  // 24 bits wrap every 64 s: compare within the wrap.
  assert.ok(((value - before) & 0xffffff) <= ((after - before) & 0xffffff), `${value}`);
  assert.equal(parsed.header.sequenceNumber, 65535);
  assert.deepEqual([...parsed.payload], [...payload]);
});

Deno.test("rtpBytes with a transport-cc id: its element first (number 0), abs-send-time after", () => {
  for (const abs of [undefined, 3]) {
    const bytes = rtpBytes(packet, abs, 5);
    // The Workers find the number's element at byte 16 (fanout.ts).
    assert.deepEqual([...bytes.subarray(12, 19)], [0xbe, 0xde, 0, abs ? 2 : 1, 0x51, 0, 0]);
    const parsed = RtpPacket.deSerialize(Buffer.from(bytes));
    assert.deepEqual(
      parsed.header.extensions.map((e) => [e.id, e.payload.length]),
      abs ? [[5, 2], [3, 3]] : [[5, 2]],
    );
    assert.deepEqual([...parsed.payload], [...payload]);
  }
});
