import assert from "node:assert/strict";
import { TruncatedError } from "../../core/errors.ts";
import type { RtpPacket } from "./packet.ts";
import {
  decodeTelephoneEvent,
  dtmfEventCode,
  dtmfEventKey,
  encodeTelephoneEvent,
  TelephoneEventReceiver,
  telephoneEventSchedule,
} from "./telephone_event.ts";

function packet(payload: Uint8Array, timestamp: number, ssrc = 7, marker = false): RtpPacket {
  return { marker, payloadType: 101, sequenceNumber: 0, timestamp, ssrc, payload };
}

Deno.test("telephone-event payload: encode and decode (RFC 4733 §2.3)", () => {
  // Key 5, end bit, volume 10, duration 800 (100 ms at 8 kHz).
  const bytes = encodeTelephoneEvent({ event: 5, end: true, volume: 10, duration: 800 });
  assert.deepEqual([...bytes], [5, 0x8a, 0x03, 0x20]);
  assert.deepEqual(decodeTelephoneEvent(bytes), { event: 5, end: true, volume: 10, duration: 800 });
  assert.deepEqual(decodeTelephoneEvent(Uint8Array.of(11, 0x3f, 0xff, 0xff)), {
    event: 11,
    end: false,
    volume: 63,
    duration: 65535,
  });
  assert.throws(() => decodeTelephoneEvent(Uint8Array.of(1, 2, 3)), TruncatedError);
  assert.deepEqual([..."0123456789*#ABCDd"].map(dtmfEventCode), [
    ...Array.from({ length: 16 }, (_, i) => i),
    15,
  ]);
  assert.equal(dtmfEventCode("x"), undefined);
  assert.equal(dtmfEventCode("12"), undefined);
  assert.equal(dtmfEventKey(11), "#");
  assert.equal(dtmfEventKey(16), undefined);
});

Deno.test("telephone-event schedule: start with marker, updates every 50 ms, three end packets", () => {
  const schedule = telephoneEventSchedule("#", 120);
  assert.deepEqual(
    schedule.map((p) => [p.atMs, p.marker, decodeTelephoneEvent(p.payload)]),
    [
      [0, true, { event: 11, end: false, volume: 10, duration: 400 }],
      [50, false, { event: 11, end: false, volume: 10, duration: 800 }],
      [100, false, { event: 11, end: false, volume: 10, duration: 960 }],
      [120, false, { event: 11, end: true, volume: 10, duration: 960 }],
      [140, false, { event: 11, end: true, volume: 10, duration: 960 }],
      [160, false, { event: 11, end: true, volume: 10, duration: 960 }],
    ],
  );
  assert.throws(() => telephoneEventSchedule("x", 100), RangeError);
});

Deno.test("telephone-event receiver: each key once despite repeats, loss and a repeated key", () => {
  const keys: string[] = [];
  const receiver = new TelephoneEventReceiver((k) => keys.push(k));
  const send = (key: string, ts: number, keep: (i: number) => boolean = () => true) =>
    telephoneEventSchedule(key, 100).forEach((p, i) => {
      if (keep(i)) receiver.push(packet(p.payload, ts, 7, p.marker));
    });
  send("1", 1000);
  send("2", 2200, (i) => i !== 0); // start packet lost
  send("3", 3400, (i) => i < 2); // every end packet lost
  send("3", 4600, (i) => i >= 2); // the same key again, only its end packets arrive
  send("#", 5800);
  // A late duplicate of the last event's end packet changes nothing.
  receiver.push(packet(telephoneEventSchedule("#", 100).at(-1)!.payload, 5800));
  // Another source (sipp's pcap play switches SSRC) with an equal timestamp is a new event.
  receiver.push(packet(telephoneEventSchedule("9", 100)[0].payload, 5800, 8));
  // A late update of an earlier event, after newer ones, is no news either.
  receiver.push(packet(telephoneEventSchedule("3", 100)[1].payload, 3400));
  // A flash (event 16) is no key.
  receiver.push(
    packet(encodeTelephoneEvent({ event: 16, end: false, volume: 0, duration: 0 }), 9000),
  );
  assert.deepEqual(keys, ["1", "2", "3", "3", "#", "9"]);
  assert.equal(receiver.ignored, 1);
});
