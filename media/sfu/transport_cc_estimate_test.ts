import assert from "node:assert/strict";
import { parseTransportCc, transportCcPacket } from "../rtp/transport_cc.ts";
import { TransportCcLog } from "../send_engine/transport_cc_log.ts";
import { maxOverDelivery, overuseBackoff, TransportCcEstimate } from "./transport_cc_estimate.ts";

/**
 * Sends `sendKbps` in 1,000-byte packets for `seconds` through a link of `linkKbps` (a FIFO
 * queue: each packet leaves the link once the one before it has and its bytes are through),
 * with feedback every 100 ms of what arrived by then; returns the estimate after each one.
 */
function run(
  estimate: TransportCcEstimate,
  log: TransportCcLog,
  sendKbps: number,
  linkKbps: number,
  seconds: number,
  startMs: number,
): { estimates: number[]; endMs: number } {
  const packetBytes = 1000;
  const intervalMs = packetBytes * 8 / sendKbps;
  const inFlight: { sequence: number; arrivalMs: number }[] = [];
  const estimates: number[] = [];
  let linkFreeMs = startMs;
  let nextFeedbackMs = startMs + 100;
  let count = 0;
  const endMs = startMs + seconds * 1000;
  for (let t = startMs; t < endMs; t += intervalMs) {
    const sequence = log.next();
    log.record(sequence, packetBytes, t);
    // 20 ms of propagation, plus the time in the link's queue.
    linkFreeMs = Math.max(linkFreeMs, t) + packetBytes * 8 / linkKbps;
    inFlight.push({ sequence, arrivalMs: linkFreeMs + 20 });
    if (t >= nextFeedbackMs) {
      const arrived = inFlight.filter((p) => p.arrivalMs <= t);
      if (arrived.length > 0) {
        inFlight.splice(0, arrived.length);
        const packet = transportCcPacket(1, 2, count++, arrived);
        const kbps = estimate.onFeedback(parseTransportCc(packet), log, t);
        if (kbps !== undefined) estimates.push(kbps);
      }
      nextFeedbackMs += 100;
    }
  }
  return { estimates, endMs };
}

Deno.test("transport-cc estimate: a link narrower than the sending is found and kept under", () => {
  const estimate = new TransportCcEstimate();
  const log = new TransportCcLog();
  const { estimates } = run(estimate, log, 800, 500, 6, 1_000_000);
  const last = estimates[estimates.length - 1];
  // The delivery rate is the link's; the estimate is cut under it once a queue builds.
  assert.ok(Math.abs(estimate.deliveryKbps - 500) < 30, `delivery ${estimate.deliveryKbps}`);
  assert.ok(estimate.queueMs > 100, `queue ${estimate.queueMs} ms`);
  assert.ok(Math.abs(last - overuseBackoff * 500) < 30, `estimate ${last}`);
  assert.ok(estimate.feedbacks >= 50);
  assert.equal(estimate.packetsLost, 0);
});

Deno.test("transport-cc estimate: with room on the link it follows the sending up, bounded", () => {
  const estimate = new TransportCcEstimate();
  const log = new TransportCcLog();
  const { estimates } = run(estimate, log, 300, 5000, 10, 2_000_000);
  const last = estimates[estimates.length - 1];
  assert.ok(estimate.queueMs < 10, `queue ${estimate.queueMs} ms`);
  // Above what is sent (so a higher layer may be tried), at most the browser-like bound.
  assert.ok(last > 1.2 * 300, `estimate ${last}`);
  assert.ok(last <= maxOverDelivery * estimate.deliveryKbps + 1, `estimate ${last}`);
});

Deno.test("transport-cc estimate: feedback about numbers never recorded is ignored", () => {
  const estimate = new TransportCcEstimate();
  const log = new TransportCcLog();
  const packet = transportCcPacket(1, 2, 0, [
    { sequence: 5, arrivalMs: 100 },
    { sequence: 6, arrivalMs: 400 },
  ]);
  assert.equal(estimate.onFeedback(parseTransportCc(packet), log, 0), undefined);
  assert.equal(estimate.kbps, 0);
  assert.equal(estimate.feedbacks, 1);
});
