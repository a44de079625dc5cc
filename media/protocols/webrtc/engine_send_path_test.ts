import assert from "node:assert/strict";
import { Buffer } from "node:buffer";
import { type RtcpSrPacket, type RTCRtpSender, RtpHeader, RtpPacket } from "werift";
import { EngineGroup, EngineSendPath, EngineSendPaths, rtpBytes } from "./engine_send_path.ts";
import type { SendEngine } from "../../send_engine/send_engine.ts";
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

/** A stand-in RTCRtpSender whose SRTCP send takes `costUs` of CPU and records the report. */
function fakeSender(ssrc: number, costUs: number, sent: RtcpSrPacket[]): RTCRtpSender {
  return {
    ssrc,
    dtlsTransport: {
      sendRtcp(packets: RtcpSrPacket[]) {
        const until = performance.now() + costUs / 1000;
        while (performance.now() < until) { /* werift's SRTCP encrypt */ }
        sent.push(...packets);
        return Promise.resolve();
      },
    },
  } as unknown as RTCRtpSender;
}

Deno.test("sender reports relayed to many engine paths leave in slices, each once, the latest mapping", async () => {
  const owner = new EngineSendPaths();
  const sent: RtcpSrPacket[] = [];
  const group = new EngineGroup("g");
  const engine = { closed: false } as unknown as SendEngine;
  const paths = Array.from(
    { length: 300 },
    (_, i) => new EngineSendPath(owner, engine, `p${i}`, fakeSender(i, 60, sent), group, 96),
  );
  for (const path of paths) path.sendSenderReport(1n << 40n, 1000);
  // A newer mapping for a path still waiting replaces its report; a closed path sends none.
  paths[5].sendSenderReport(2n << 40n, 2000);
  paths[7].close();
  assert.equal(sent.length, 0, "nothing is sent in the publisher's turn");
  // Media handled in between: a task queued now runs before the last report goes.
  const between = await new Promise<number>((resolve) => setTimeout(() => resolve(sent.length)));
  assert.ok(between < 299, `a turn came between the slices (${between} sent before it)`);
  const deadline = Date.now() + 5_000;
  while (sent.length < 299 && Date.now() < deadline) await new Promise((r) => setTimeout(r, 5));
  await new Promise((r) => setTimeout(r, 20));
  assert.equal(sent.length, 299);
  const bySsrc = new Map(sent.map((r) => [r.ssrc, r]));
  assert.equal(bySsrc.size, 299);
  assert.equal(bySsrc.has(7), false);
  assert.equal(bySsrc.get(5)!.senderInfo.rtpTimestamp, 2000);
  assert.equal(bySsrc.get(6)!.senderInfo.rtpTimestamp, 1000);
  await owner.close();
});
