import assert from "node:assert/strict";
import { ParseError } from "../../../core/errors.ts";
import {
  ControlType,
  parseAck,
  parseDropRequest,
  parseNak,
  parsePacket,
  serializeAck,
  serializeControl,
  serializeData,
  serializeDropRequest,
  serializeNak,
} from "./packet.ts";
import { parseHandshake } from "./handshake.ts";
import { nextMessageNumber, seqAdd, seqDiff } from "./seq.ts";

const hex = (s: string) => Uint8Array.from(s.match(/../g)!, (b) => parseInt(b, 16));

// Captured from libsrt 1.5.1 (ffmpeg caller -> srt-live-transmit listener).
const capturedData = "6c9edc7ee000000100141ec227700e87";
const capturedAck =
  "8002000000000001001459a417d343db6c9edc82000186a00000c35000001ffb00000001000003f5000005ae";

Deno.test("a libsrt data packet: seq, solo in-order message 1, timestamp, socket", () => {
  const p = parsePacket(hex(capturedData + "47400011"));
  assert.equal(p.kind, "data");
  if (p.kind !== "data") return;
  assert.equal(p.seq, 0x6c9edc7e);
  assert.equal(p.position, 3);
  assert.equal(p.inOrder, true);
  assert.equal(p.keyFlag, 0);
  assert.equal(p.retransmitted, false);
  assert.equal(p.messageNumber, 1);
  assert.equal(p.timestamp, 0x141ec2);
  assert.equal(p.destSocketId, 0x27700e87);
  assert.deepEqual([...p.payload], [0x47, 0x40, 0x00, 0x11]);
  assert.deepEqual(serializeData(p), hex(capturedData + "47400011"));
});

Deno.test("data flags: encrypted even key, retransmitted, last of a message", () => {
  const bytes = serializeData({
    seq: 0x7fffffff,
    position: 1,
    inOrder: false,
    keyFlag: 2,
    retransmitted: true,
    messageNumber: 0x3ffffff,
    timestamp: 0xffffffff,
    destSocketId: 1,
    payload: new Uint8Array(),
  });
  const p = parsePacket(bytes);
  assert.equal(p.kind, "data");
  if (p.kind !== "data") return;
  assert.deepEqual(
    [p.seq, p.position, p.inOrder, p.keyFlag, p.retransmitted, p.messageNumber, p.timestamp],
    [0x7fffffff, 1, false, 2, true, 0x3ffffff, 0xffffffff],
  );
});

Deno.test("a libsrt full ACK: ACK number, last ACK seq, RTT, buffer, rates", () => {
  const p = parsePacket(hex(capturedAck));
  assert.equal(p.kind, "control");
  if (p.kind !== "control") return;
  assert.equal(p.type, ControlType.ack);
  assert.equal(p.typeInfo, 1);
  const ack = parseAck(p.body);
  assert.deepEqual(ack, {
    lastAckSeq: 0x6c9edc82,
    rttUs: 100000,
    rttVarUs: 50000,
    availableBuffer: 0x1ffb,
    packetRate: 1,
    capacity: 0x3f5,
    receiveRate: 0x5ae,
  });
  assert.deepEqual(serializeControl({ ...p, body: serializeAck(ack) }), hex(capturedAck));
  assert.deepEqual(parseAck(serializeAck({ lastAckSeq: 5 })), { lastAckSeq: 5 });
});

Deno.test("NAK loss list: singles and ranges round-trip", () => {
  const ranges = [{ from: 5, to: 5 }, { from: 7, to: 9 }, { from: 0x7ffffffe, to: 1 }];
  const body = serializeNak(ranges);
  assert.equal(body.length, 20);
  assert.deepEqual(parseNak(body), ranges);
  assert.throws(() => parseNak(body.subarray(0, 8)), ParseError); // range cut after its start
  assert.deepEqual(parseDropRequest(serializeDropRequest({ firstSeq: 3, lastSeq: 9 })), {
    firstSeq: 3,
    lastSeq: 9,
  });
});

Deno.test("sequence numbers wrap at 2^31, message numbers skip 0", () => {
  assert.equal(seqAdd(0x7fffffff, 1), 0);
  assert.equal(seqAdd(0, -1), 0x7fffffff);
  assert.equal(seqDiff(0x7ffffffe, 2), 4);
  assert.equal(seqDiff(2, 0x7ffffffe), -4);
  assert.equal(seqDiff(0x7fffffff, 0), 1);
  assert.equal(nextMessageNumber(0x3ffffff), 1);
});

Deno.test("truncated and random bytes only ever throw ParseError", () => {
  const samples = [hex(capturedData), hex(capturedAck)];
  let seed = 7;
  const random = () => (seed = (Math.imul(seed, 1103515245) + 12345) >>> 0) / 2 ** 32;
  for (let i = 0; i < 20000; i++) {
    let bytes: Uint8Array;
    if (i % 2 === 0) {
      const s = samples[i % samples.length];
      bytes = s.slice(0, Math.floor(random() * (s.length + 1)));
    } else {
      bytes = new Uint8Array(Math.floor(random() * 120));
      for (let j = 0; j < bytes.length; j++) bytes[j] = random() * 256;
      if (i % 4 === 1 && bytes.length > 0) bytes[0] |= 0x80;
    }
    try {
      const p = parsePacket(bytes);
      if (p.kind === "control") {
        if (p.type === ControlType.ack) parseAck(p.body);
        else if (p.type === ControlType.nak) parseNak(p.body);
        else if (p.type === ControlType.dropRequest) parseDropRequest(p.body);
        else parseHandshake(p.body);
      }
    } catch (e) {
      assert.ok(e instanceof ParseError, `unexpected ${e}`);
    }
  }
});
