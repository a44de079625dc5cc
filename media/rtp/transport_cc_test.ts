import assert from "node:assert/strict";
import { ParseError } from "../../core/errors.ts";
import { parseTransportCc, transportCcPacket, type TransportCcReport } from "./transport_cc.ts";

Deno.test("transport-cc feedback: bytes of the draft's chunk kinds read as written", () => {
  // Base 100, 10 packets, reference 2 (128 ms), feedback count 7: a run of 2 small deltas, then
  // a 1-bit vector (14 symbols: received, lost, received, then 11 past the count), one large.
  const packet = new Uint8Array([
    0x8f,
    205,
    0x00,
    0x06, // header, 7 words
    0,
    0,
    0,
    1,
    0,
    0,
    0,
    2, // SSRCs
    0,
    100,
    0,
    4, // base 100, 4 packets
    0,
    0,
    2,
    7, // reference 2, count 7
    0x20,
    0x02, // run length: status 1 (small), 2 packets
    0xa0,
    0x00, // 1-bit vector: 1, 0, 1, ...: packets 102 (received), 103 (lost)
    4,
    8,
    12,
    0, // deltas of 100, 101, 102: +1, +2, +3 ms; a zero byte to 32 bits
  ]);
  const f = parseTransportCc(packet);
  assert.equal(f.senderSsrc, 1);
  assert.equal(f.mediaSsrc, 2);
  assert.equal(f.baseSequence, 100);
  assert.equal(f.statusCount, 4);
  assert.equal(f.feedbackCount, 7);
  assert.deepEqual(f.received, [100, 101, 102]);
  assert.deepEqual(f.arrivalMs, [129, 131, 134]);

  // Two-bit vector with a large (negative) delta.
  const twoBit = new Uint8Array([
    0x8f,
    205,
    0x00,
    0x06,
    0,
    0,
    0,
    1,
    0,
    0,
    0,
    2,
    0xff,
    0xff,
    0,
    3, // base 65535 (the numbers wrap), 3 packets
    0,
    0,
    0,
    0,
    0xd8,
    0x00, // 2-bit vector: small, large, lost
    40,
    0xff,
    0xf0,
    0,
    0,
    0, // +10 ms, then -4 ms; zero bytes to 32 bits
  ]);
  const g = parseTransportCc(twoBit);
  assert.deepEqual(g.received, [65535, 0]);
  assert.deepEqual(g.arrivalMs, [10, 6]);
});

Deno.test("transport-cc feedback: what transportCcPacket writes parses back", () => {
  const reports: TransportCcReport[] = [];
  let t = 5000.25;
  for (let i = 0; i < 300; i++) {
    // Runs of loss, gaps of every size and one step back in time.
    const lost = (i > 40 && i < 60) || i % 17 === 3;
    t += i === 100 ? -30 : i === 200 ? 90 : (i % 5) * 0.5;
    reports.push({ sequence: (65500 + i) & 0xffff, arrivalMs: lost ? undefined : t });
  }
  const packet = transportCcPacket(11, 22, 250, reports);
  assert.equal(packet.length % 4, 0);
  const f = parseTransportCc(packet);
  assert.equal(f.baseSequence, 65500);
  assert.equal(f.statusCount, 300);
  assert.equal(f.feedbackCount, 250);
  const received = reports.filter((r) => r.arrivalMs !== undefined);
  assert.deepEqual(f.received, received.map((r) => r.sequence));
  f.arrivalMs.forEach((ms, i) => assert.ok(Math.abs(ms - received[i].arrivalMs!) <= 0.125));
});

Deno.test("transport-cc feedback: cut, altered and random bytes are ParseErrors, never else", () => {
  const reports = Array.from({ length: 40 }, (_, i) => ({
    sequence: i,
    arrivalMs: i % 7 === 0 ? undefined : 1000 + i * 3,
  }));
  const packet = transportCcPacket(1, 2, 0, reports);
  for (let n = 0; n < packet.length; n++) {
    assert.throws(() => parseTransportCc(packet.subarray(0, n)), ParseError, `cut at ${n}`);
  }
  // A length field claiming less than the packet holds is read as that much: cut as well,
  // down to less than the fixed fields (found by fuzz/: it read past them).
  for (const words of [0, 1, 3, 4, 5]) {
    const short = packet.slice();
    short[3] = words;
    assert.throws(() => parseTransportCc(short), ParseError, `length ${words}`);
  }
  let seed = 7;
  const random = () => (seed = (seed * 1103515245 + 12345) >>> 0) >>> 24;
  for (let round = 0; round < 5000; round++) {
    const bytes = round % 2 === 0
      ? Uint8Array.from({ length: random() % 64 }, random)
      : packet.map((b) => random() < 8 ? random() : b);
    if (round % 2 === 0 && bytes.length >= 2) {
      bytes[0] = 0x8f;
      bytes[1] = 205;
    }
    try {
      const f = parseTransportCc(bytes);
      assert.equal(f.received.length, f.arrivalMs.length);
      assert.ok(f.received.length <= f.statusCount);
    } catch (err) {
      assert.ok(err instanceof ParseError, `round ${round}: ${err}`);
    }
  }
});
