import assert from "node:assert/strict";
import { ParseError, TruncatedError } from "../../core/errors.ts";
import {
  ntpMiddle,
  parseReportBlocks,
  ReceptionStats,
  writeReceiverReport,
} from "./receiver_report.ts";
import { writeSenderReport } from "./sender_report.ts";

Deno.test("reception stats: loss across a sequence wrap, fraction per interval, jitter", () => {
  const stats = new ReceptionStats(0xabc, 8000);
  // 20 packets from 65530, every 20 ms, 160 samples apart; 65535 and 3 never come.
  for (let i = 0; i < 20; i++) {
    const seq = (65530 + i) & 0xffff;
    if (seq === 65535 || seq === 3) continue;
    stats.update(seq, 1000 + i * 160, i * 20);
  }
  assert.equal(stats.expected, 20);
  assert.equal(stats.received, 18);
  assert.equal(stats.lost, 2);
  assert.equal(stats.jitter, 0, "perfectly paced");
  const block = stats.block(1000);
  assert.equal(block.highestSequence, 0x10000 + 13);
  assert.equal(block.fractionLost, Math.floor(2 * 256 / 20));
  assert.equal(block.cumulativeLost, 2);
  // The next interval has no loss; a late duplicate does not move the highest sequence.
  stats.update(14, 1000 + 20 * 160, 400);
  stats.update(10, 1000 + 16 * 160, 401);
  assert.equal(stats.block(2000).fractionLost, 0);
  // Packets 10 ms late every other time make jitter grow toward 80 clock units.
  const jittery = new ReceptionStats(1, 8000);
  for (let i = 0; i < 200; i++) jittery.update(i, i * 160, i * 20 + (i % 2) * 10);
  assert.ok(jittery.jitter > 70 && jittery.jitter <= 80, String(jittery.jitter));
});

Deno.test("receiver report: written blocks parse back, SR without blocks, cut input", () => {
  const stats = new ReceptionStats(0x11223344, 8000);
  stats.update(1, 0, 0);
  stats.update(5, 640, 80);
  stats.senderReport(3_900_000_000_500, 1000);
  const block = stats.block(1500);
  assert.equal(block.lastSenderReport, ntpMiddle(3_900_000_000_500));
  assert.equal(block.delaySinceLastSenderReport, 32768, "half a second in 1/65536 s");
  const rr = writeReceiverReport(0x55, [block], "call@example");
  assert.equal(rr.length % 4, 0);
  assert.deepEqual(parseReportBlocks(rr), [block]);
  assert.deepEqual(block.cumulativeLost, 3);
  const sr = writeSenderReport({
    ssrc: 1,
    ntpSec: 3_900_000_000,
    rtpTimestamp: 0,
    packets: 1,
    octets: 160,
    cname: "x",
  });
  const compound = new Uint8Array([...sr, ...writeReceiverReport(1, [block])]);
  assert.deepEqual(parseReportBlocks(compound), [block]);
  assert.throws(() => parseReportBlocks(rr.subarray(0, 20)), TruncatedError);
  const negative = writeReceiverReport(1, [{ ...block, cumulativeLost: -2 }]);
  assert.equal(parseReportBlocks(negative)[0].cumulativeLost, -2);
});

Deno.test("report blocks and telephone events on random and cut input: a result or a ParseError", () => {
  let seed = 3;
  const byte = () => (seed = (seed * 1103515245 + 12345) & 0x7fffffff) & 0xff;
  const stats = new ReceptionStats(9, 8000);
  stats.update(1, 0, 0);
  const real = writeReceiverReport(1, [stats.block(0)], "x");
  for (let i = 0; i < 2000; i++) {
    const data = i % 2 === 0
      ? Uint8Array.from({ length: byte() % 80 }, byte)
      : real.map((b) => (byte() < 8 ? byte() : b)).subarray(0, byte() % (real.length + 1));
    if (i % 4 === 1) data[0] = 0x81; // version 2 with one block, so the cut paths run
    try {
      parseReportBlocks(data);
    } catch (err) {
      assert.ok(err instanceof ParseError, String(err));
    }
  }
});
