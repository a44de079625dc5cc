import assert from "node:assert/strict";
import { Receiver } from "./receiver.ts";
import { Sender } from "./sender.ts";
import { LossList } from "./loss_list.ts";
import {
  ControlType,
  type DataPacket,
  parseAck,
  parseDropRequest,
  parseNak,
  parsePacket,
} from "./packet.ts";
import { seqAdd } from "./seq.ts";

interface Sent {
  type: number;
  typeInfo: number;
  body: Uint8Array;
}

function receiver(initialSeq: number, latencyMs = 100) {
  const sent: Sent[] = [];
  const delivered: number[] = [];
  const r = new Receiver({
    initialSeq,
    latencyMs,
    peerStartMs: 0,
    bufferPackets: 8192,
    sendControl: (type, typeInfo, body) => sent.push({ type, typeInfo, body }),
    deliver: (payload) => delivered.push(payload[0] | payload[1] << 8),
  });
  return { r, sent, delivered };
}

function data(
  seq: number,
  n: number,
  timestampUs: number,
  extra: Partial<DataPacket> = {},
): DataPacket {
  return {
    kind: "data",
    seq,
    position: 3,
    inOrder: true,
    keyFlag: 0,
    retransmitted: false,
    messageNumber: 1,
    timestamp: timestampUs >>> 0,
    destSocketId: 1,
    payload: new Uint8Array([n & 0xff, n >> 8]),
    ...extra,
  };
}

Deno.test("loss list: ranges, wraparound, periodic NAK only after the interval", () => {
  const loss = new LossList();
  loss.addRange(0x7ffffffe, 1, 0);
  assert.equal(loss.size, 4);
  assert.deepEqual(loss.due(10, 20), []);
  assert.deepEqual(loss.due(20, 20), [{ from: 0x7ffffffe, to: 1 }]);
  assert.deepEqual(loss.due(30, 20), []);
  loss.remove(0x7fffffff);
  assert.deepEqual(loss.due(40, 20), [{ from: 0x7ffffffe, to: 0x7ffffffe }, { from: 0, to: 1 }]);
  assert.equal(loss.removeBefore(1), 2);
  assert.equal(loss.first(), 1);
});

Deno.test("receiver: a gap across the 31-bit wrap is NAKed at once, filled, delivered in order", () => {
  const start = 0x7ffffffd;
  const { r, sent, delivered } = receiver(start);
  for (const i of [0, 1, 4, 5]) r.onData(data(seqAdd(start, i), i, i * 1000), i);
  const nak = sent.find((s) => s.type === ControlType.nak)!;
  assert.deepEqual(parseNak(nak.body), [{ from: 0x7fffffff, to: 0 }]);
  assert.equal(r.stats.lost, 2);
  r.tick(50); // before delivery time: nothing
  assert.deepEqual(delivered, []);
  const ack = sent.find((s) => s.type === ControlType.ack && s.typeInfo > 0)!;
  assert.equal(parseAck(ack.body).lastAckSeq, 0x7fffffff, "ACK stops at the first loss");
  r.onData(data(0x7fffffff, 2, 2000, { retransmitted: true }), 60);
  r.onData(data(0, 3, 3000, { retransmitted: true }), 60);
  r.tick(200);
  assert.deepEqual(delivered, [0, 1, 2, 3, 4, 5]);
  assert.equal(r.stats.retransmitted, 2);
  assert.equal(r.stats.dropped, 0);
  r.tick(210);
  const last = sent.filter((s) => s.type === ControlType.ack && s.typeInfo > 0).at(-1)!;
  assert.equal(parseAck(last.body).lastAckSeq, 3, "everything up to 2 received");
});

Deno.test("receiver: TSBPD holds packets for the latency, drops what is still missing when due", () => {
  const { r, delivered } = receiver(100, 120);
  r.onData(data(100, 0, 0), 0);
  r.onData(data(102, 2, 20_000), 20);
  r.tick(119);
  assert.deepEqual(delivered, []);
  r.tick(120);
  assert.deepEqual(delivered, [0]);
  r.tick(139); // 101 missing, 102 not due yet
  assert.deepEqual(delivered, [0]);
  r.tick(140);
  assert.deepEqual(delivered, [0, 2]);
  assert.equal(r.stats.dropped, 1);
  r.onData(data(101, 1, 10_000, { retransmitted: true }), 141);
  assert.equal(r.stats.duplicates, 1, "too late, ignored");
});

Deno.test("receiver: sender timestamps wrapping at 2^32 µs keep delivery times rising", () => {
  const nearWrapUs = 2 ** 32 - 5_000;
  const delivered: number[] = [];
  // The peer's clock started long ago: its timestamp 0 was 4295 s before our 0.
  const peerStartMs = -nearWrapUs / 1000;
  const r = new Receiver({
    initialSeq: 0,
    latencyMs: 100,
    peerStartMs,
    bufferPackets: 64,
    sendControl: () => {},
    deliver: (p) => delivered.push(p[0]),
  });
  r.onData(data(0, 0, nearWrapUs), 0);
  r.onData(data(1, 1, 5_000), 10); // wrapped: 10 ms later
  r.tick(100);
  assert.deepEqual(delivered, [0]);
  r.tick(110);
  assert.deepEqual(delivered, [0, 1]);
});

Deno.test("receiver: multi-packet messages are joined; RTT from ACKACK", () => {
  const { r, sent, delivered } = receiver(0, 0);
  r.onData(data(0, 0x0201, 0, { position: 2 }), 0);
  r.onData(data(1, 0x0403, 0, { position: 0 }), 0);
  r.onData(data(2, 0x0605, 0, { position: 1 }), 0);
  r.tick(10);
  assert.deepEqual(delivered, [0x0201]); // first 2 bytes of the joined message
  assert.equal(r.stats.delivered, 1);
  const ack = sent.find((s) => s.type === ControlType.ack && s.typeInfo > 0)!;
  r.onAckAck(ack.typeInfo, 30);
  assert.equal(r.stats.rttMs, 20);
  assert.equal(r.stats.rttVarMs, 10);
});

Deno.test("sender: NAK retransmits with the R flag, ACK releases and gets an ACKACK, old packets dropped", () => {
  const datagrams: Uint8Array[] = [];
  const controls: Sent[] = [];
  let now = 0;
  const s = new Sender({
    initialSeq: 0x7ffffffe,
    peerSocketId: 9,
    latencyMs: 120,
    flowWindow: 8192,
    startMs: 0,
    sendDatagram: (b) => datagrams.push(b),
    sendControl: (type, typeInfo, body) => controls.push({ type, typeInfo, body }),
    now: () => now,
  });
  s.send(new Uint8Array(1316 * 3 + 10)); // 4 packets
  assert.equal(datagrams.length, 4);
  s.onNak([{ from: 0x7fffffff, to: 0 }]);
  const again = datagrams.slice(4).map((d) => parsePacket(d) as DataPacket);
  assert.deepEqual(again.map((p) => [p.seq, p.retransmitted]), [[0x7fffffff, true], [0, true]]);
  s.onAck(7, { lastAckSeq: 0, rttUs: 3000 });
  assert.equal(s.unacknowledged, 2);
  assert.deepEqual([controls[0].type, controls[0].typeInfo], [ControlType.ackAck, 7]);
  assert.equal(s.peerRttMs, 3);
  now = 2000;
  s.tick(now);
  assert.equal(s.unacknowledged, 0);
  assert.equal(s.stats.dropped, 2);
  const drop = controls.find((c) => c.type === ControlType.dropRequest)!;
  assert.deepEqual(parseDropRequest(drop.body), { firstSeq: 0, lastSeq: 1 });
});

Deno.test("receiver: a sender clock 1% slow moves the delivery base, the latency is kept", () => {
  const deliveredAt: number[] = [];
  let now = 0;
  const r = new Receiver({
    initialSeq: 0,
    latencyMs: 100,
    peerStartMs: 0,
    bufferPackets: 8192,
    sendControl: () => {},
    deliver: () => deliveredAt.push(now),
  });
  const packets = 6000;
  for (let i = 0; i < packets; i++) {
    now = i;
    r.onData(data(i, i, i * 990), now); // its clock: 0.99 ms per ms of ours
    r.tick(now);
  }
  assert.ok(r.stats.driftMs > 30, `corrected ${r.stats.driftMs} ms`);
  for (; deliveredAt.length < packets; now++) r.tick(now);
  // Uncorrected, the last packet would wait 100 - 60 = 40 ms; corrected, close to 100 ms.
  const waitedMs = deliveredAt[packets - 1] - (packets - 1);
  assert.ok(waitedMs > 85 && waitedMs <= 101, `last packet waited ${waitedMs} ms`);
});

Deno.test("receiver: link capacity from probe pairs (every 16th packet and the next)", () => {
  const { r } = receiver(0, 100);
  for (let i = 0; i < 16 * 20; i++) {
    // Packets 10 ms apart, except each probe pair's second one, 0.1 ms after the first.
    const at = Math.floor(i / 16) * 160 + (i % 16 === 1 ? 0.1 : (i % 16) * 10);
    r.onData(data(i, i, at * 1000), at);
  }
  assert.equal(r.stats.capacityPps, 10_000);
});
