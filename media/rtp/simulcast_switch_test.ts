import assert from "node:assert/strict";
import { type ForwardedPacket, SimulcastSwitch, type SourcePacket } from "./simulcast_switch.ts";

const sps = [0x67, 0x42, 0xc0, 0x1e, 0xda, 0x02, 0x80, 0xf6, 0x40];
const idr = [0x65, 0x88, 0x80, 0x00];
const pSlice = [0x41, 0x9a, 0x00, 0x00];

function packet(seq: number, ts: number, payload: number[], marker = true): SourcePacket {
  return {
    header: { sequenceNumber: seq & 0xffff, timestamp: ts >>> 0, marker },
    payload: Uint8Array.from(payload),
  };
}

/** A copy of what the switch returned (the object is reused). */
function copy(out: ForwardedPacket | undefined): ForwardedPacket | undefined {
  return out && { ...out, payload: out.payload.slice() };
}

/** Layers of a fake publisher: their own sequence and timestamp bases, 30 fps. */
class Layer {
  constructor(public seq: number, public ts: number) {}
  /** One frame: a keyframe is SPS + IDR, a delta frame one P slice. */
  frame(key: boolean): SourcePacket[] {
    const out = key
      ? [packet(this.seq++, this.ts, sps, false), packet(this.seq++, this.ts, idr)]
      : [packet(this.seq++, this.ts, pSlice)];
    this.ts += 3000;
    return out;
  }
}

function harness() {
  const requests: number[] = [];
  const sw = new SimulcastSwitch({
    codec: "H264",
    ssrc: 0xabcdef,
    requestKeyframe: (layer) => requests.push(layer),
  });
  const sent: ForwardedPacket[] = [];
  const feed = (layer: number, packets: SourcePacket[], nowMs: number) => {
    for (const p of packets) {
      const out = copy(sw.forward(layer, p, nowMs));
      if (out) sent.push(out);
    }
  };
  return { sw, requests, sent, feed };
}

function assertContinuous(sent: ForwardedPacket[]): void {
  for (let i = 1; i < sent.length; i++) {
    assert.equal(sent[i].sequenceNumber, (sent[i - 1].sequenceNumber + 1) & 0xffff, `seq at ${i}`);
    const dt = (sent[i].timestamp - sent[i - 1].timestamp) >>> 0;
    assert.ok(dt < 0x80000000, `timestamp went back at ${i}`);
    assert.equal(sent[i].ssrc, 0xabcdef);
  }
}

Deno.test("the first layer starts at its keyframe, asked for once", () => {
  const { sw, requests, sent, feed } = harness();
  const low = new Layer(100, 1000);
  sw.select(0, 0);
  assert.deepEqual(requests, [0]);
  feed(0, low.frame(false), 10);
  feed(0, low.frame(false), 40);
  assert.equal(sent.length, 0);
  assert.equal(sw.layer, -1);
  feed(0, low.frame(true), 70);
  feed(0, low.frame(false), 100);
  assert.equal(sw.layer, 0);
  assert.equal(sent.length, 3);
  assert.deepEqual(Array.from(sent[0].payload), sps);
  assert.deepEqual(requests, [0], "no second request within the interval");
  assertContinuous(sent);
});

Deno.test("a switch waits for the new layer's keyframe; sequence and timestamps stay continuous", () => {
  const { sw, requests, sent, feed } = harness();
  // Bases near the wrap, so offsets must be modular.
  const low = new Layer(0xfff0, 0xffff_f000);
  const high = new Layer(30000, 123456);
  sw.select(0, 0);
  let now = 0;
  const tick = (lowKey: boolean, highKey: boolean) => {
    now += 33;
    feed(0, low.frame(lowKey), now);
    feed(1, high.frame(highKey), now);
  };
  tick(true, false);
  for (let i = 0; i < 5; i++) tick(false, false);
  sw.select(1, now);
  assert.deepEqual(requests, [0, 1]);
  for (let i = 0; i < 5; i++) tick(false, false);
  assert.equal(sw.layer, 0, "still on the old layer until a keyframe of the new one");
  assert.equal(sw.pending, true);
  const before = sent.length;
  tick(false, true);
  assert.equal(sw.layer, 1);
  assert.equal(sw.switches, 1);
  // The old layer's frame of this tick went out, then the new layer's SPS + IDR.
  assert.equal(sent.length, before + 3);
  assert.deepEqual(Array.from(sent[before + 1].payload), sps);
  // One frame interval (3000 ticks) after the last packet of the old layer.
  assert.equal((sent[before + 1].timestamp - sent[before].timestamp) >>> 0, 3000);
  for (let i = 0; i < 5; i++) tick(false, false);
  assertContinuous(sent);
  // Back down: the low layer's keyframe ends the switch.
  sw.select(0, now);
  tick(true, false);
  assert.equal(sw.layer, 0);
  assert.equal(sw.switches, 2);
  tick(false, false);
  assertContinuous(sent);
});

Deno.test("keyframe requests are throttled while a switch is pending and stop after it", () => {
  const { sw, requests, feed } = harness();
  const low = new Layer(1, 0);
  const high = new Layer(1, 0);
  sw.select(0, 0);
  feed(0, low.frame(true), 0);
  sw.select(1, 100);
  assert.deepEqual(requests, [0, 1]);
  for (let now = 110; now < 1100; now += 33) {
    feed(0, low.frame(false), now);
    feed(1, high.frame(false), now);
  }
  assert.deepEqual(requests, [0, 1], "one request per interval");
  feed(1, high.frame(false), 1120);
  assert.deepEqual(requests, [0, 1, 1], "asked again once the interval passed");
  feed(1, high.frame(true), 1150);
  for (let now = 1200; now < 4000; now += 33) feed(1, high.frame(false), now);
  assert.deepEqual(requests, [0, 1, 1], "nothing more once switched");
  // Selecting the layer already forwarded asks for nothing.
  sw.select(1, 5000);
  assert.deepEqual(requests, [0, 1, 1]);
  // A subscriber's PLI goes to the forwarded layer, throttled.
  sw.keyframeNeeded(5000);
  sw.keyframeNeeded(5100);
  assert.deepEqual(requests, [0, 1, 1, 1]);
});

Deno.test("late packets of the new layer from before its keyframe are dropped", () => {
  const { sw, sent, feed } = harness();
  sw.select(0, 0);
  feed(0, [packet(50, 9000, idr)], 0);
  feed(0, [packet(49, 6000, pSlice)], 1);
  feed(0, [packet(51, 12000, pSlice)], 2);
  assert.deepEqual(sent.map((p) => p.sequenceNumber), [50, 51]);
});

Deno.test("a layer forwarded past 32,768 packets and a sequence wrap keeps every packet", () => {
  const { sw, sent, feed } = harness();
  sw.select(0, 0);
  const layer = new Layer(100, 0);
  feed(0, layer.frame(true), 0);
  for (let i = 0; i < 70_000; i++) feed(0, layer.frame(false), i);
  assert.equal(sent.length, 70_002);
  assertContinuous(sent);
  // A packet from before the keyframe, arriving this late, still goes nowhere.
  feed(0, [packet(99, 0, pSlice)], 70_000);
  assert.equal(sent.length, 70_002);
});

Deno.test("the timestamp gap after a late keyframe is the time that passed", () => {
  const { sw, sent, feed } = harness();
  const low = new Layer(1, 0);
  const high = new Layer(7, 777);
  sw.select(0, 0);
  feed(0, low.frame(true), 0);
  feed(0, low.frame(false), 33);
  sw.select(1, 40);
  // The old layer stops (the publisher dropped it) and the new keyframe comes 500 ms later.
  feed(1, high.frame(true), 533);
  const gap = (sent[sent.length - 2].timestamp - sent[sent.length - 3].timestamp) >>> 0;
  assert.equal(gap, 45000);
});

/** A VP8 packet with a 15-bit picture ID, TL0PICIDX and TID (RFC 7741 §4.2). */
function vp8(
  seq: number,
  ts: number,
  picId: number,
  tl0: number,
  tid: number,
  key: boolean,
  sync = false,
): SourcePacket {
  return packet(seq, ts, [
    0x90, // X, S, partition 0
    0xe0, // I, L, T
    0x80 | (picId >> 8),
    picId & 0xff,
    tl0,
    (tid << 6) | (sync ? 0x20 : 0),
    key ? 0x00 : 0x01, // frame tag: P bit 0 on keyframes
    0x00,
    0x00,
    0x9d,
    0x01,
    0x2a,
  ]);
}

function fields(p: ForwardedPacket) {
  return { picId: ((p.payload[2] & 0x7f) << 8) | p.payload[3], tl0: p.payload[4] };
}

Deno.test("VP8: picture ID and TL0PICIDX continue across a switch", () => {
  const requests: number[] = [];
  const sw = new SimulcastSwitch({
    codec: "VP8",
    ssrc: 1,
    requestKeyframe: (l) => requests.push(l),
  });
  const sent: ForwardedPacket[] = [];
  const send = (layer: number, p: SourcePacket, now: number) => {
    const out = copy(sw.forward(layer, p, now));
    if (out) sent.push(out);
  };
  sw.select(0, 0);
  send(0, vp8(10, 0, 32760, 250, 0, true), 0);
  send(0, vp8(11, 3000, 32761, 251, 0, false), 33);
  send(0, vp8(12, 6000, 32762, 252, 0, false), 66);
  sw.select(1, 70);
  send(1, vp8(500, 90000, 100, 7, 0, false), 99);
  send(1, vp8(501, 93000, 101, 8, 0, true), 99);
  send(1, vp8(502, 96000, 102, 9, 0, false), 132);
  assert.deepEqual(sent.map((p) => p.sequenceNumber), [10, 11, 12, 13, 14]);
  assert.deepEqual(sent.map(fields), [
    { picId: 32760, tl0: 250 },
    { picId: 32761, tl0: 251 },
    { picId: 32762, tl0: 252 },
    { picId: 32763, tl0: 253 },
    { picId: 32764, tl0: 254 },
  ]);
});

Deno.test("VP8: temporal layers above the cap are dropped without gaps, raised at a sync frame", () => {
  const sw = new SimulcastSwitch({ codec: "VP8", ssrc: 1, requestKeyframe: () => {} });
  const sent: ForwardedPacket[] = [];
  // TIDs of an L1T3 pattern: 0 2 1 2 0 2 1 2 ...
  const pattern = [0, 2, 1, 2];
  let tl0 = 0;
  const send = (i: number, sync = false) => {
    const tid = pattern[i % 4];
    if (tid === 0 && i > 0) tl0++;
    const out = copy(sw.forward(0, vp8(100 + i, i * 3000, i, tl0, tid, i === 0, sync), i * 33));
    if (out) sent.push(out);
  };
  sw.select(0, 0);
  sw.selectTemporal(0);
  for (let i = 0; i < 8; i++) send(i);
  assert.equal(sw.temporalDrops, 6);
  assert.deepEqual(sent.map((p) => p.sequenceNumber), [100, 101]);
  assert.deepEqual(sent.map(fields), [{ picId: 0, tl0: 0 }, { picId: 1, tl0: 1 }]);
  assert.deepEqual(sw.origin(101), { layer: 0, sequenceNumber: 104 }, "NACKs map past drops");
  // Raised: TID 2 frames without the sync bit still wait; the TID 1 sync frame opens them.
  sw.selectTemporal(2);
  send(8);
  send(9);
  assert.equal(sw.temporalLayer, 0);
  send(10, true);
  send(11);
  assert.equal(sw.temporalLayer, 2);
  assert.deepEqual(sent.map((p) => p.sequenceNumber), [100, 101, 102, 103, 104]);
  assert.deepEqual(sent.map((p) => fields(p).picId), [0, 1, 2, 3, 4]);
});

Deno.test("a subscriber's NACK maps back to the layer and sequence number it came from", () => {
  const { sw, feed } = harness();
  const low = new Layer(0xfffe, 0);
  const high = new Layer(500, 0);
  sw.select(0, 0);
  feed(0, low.frame(true), 0); // out 0xfffe, 0xffff
  feed(0, low.frame(false), 33); // out 0
  sw.select(1, 40);
  feed(1, high.frame(false), 66);
  feed(1, high.frame(true), 66); // out 1, 2 from high 501, 502
  feed(1, high.frame(false), 99); // out 3 from 503
  assert.deepEqual(sw.origin(0xfffe), { layer: 0, sequenceNumber: 0xfffe });
  assert.deepEqual(sw.origin(0), { layer: 0, sequenceNumber: 0 });
  assert.deepEqual(sw.origin(1), { layer: 1, sequenceNumber: 501 });
  assert.deepEqual(sw.origin(3), { layer: 1, sequenceNumber: 503 });
  assert.equal(sw.origin(4), undefined, "not sent yet");
});

Deno.test("a retransmission is the packet as it was sent; earlier layers' packets are not resent", () => {
  const { sw, sent, feed } = harness();
  const low = new Layer(100, 0);
  const high = new Layer(500, 777_000);
  const published = [new Map<number, SourcePacket>(), new Map<number, SourcePacket>()];
  const publish = (layer: number, frame: SourcePacket[], nowMs: number) => {
    for (const p of frame) published[layer].set(p.header.sequenceNumber, p);
    feed(layer, frame, nowMs);
  };
  sw.select(0, 0);
  publish(0, low.frame(true), 0);
  sw.select(1, 20);
  publish(1, high.frame(true), 33);
  publish(1, high.frame(false), 66);
  const packetOf = (layer: number, seq: number) => published[layer].get(seq);
  const last = sent.at(-1)!;
  assert.deepEqual(copy(sw.retransmission(last.sequenceNumber, packetOf)), last);
  const firstHigh = sent[2];
  assert.deepEqual(copy(sw.retransmission(firstHigh.sequenceNumber, packetOf)), firstHigh);
  assert.equal(sw.retransmission(sent[0].sequenceNumber, packetOf), undefined, "low layer");
  assert.equal(sw.retransmission(last.sequenceNumber, () => undefined), undefined, "not cached");
});

Deno.test("after a restart the layer resumes at its next keyframe, sequence continuous", () => {
  const { sw, requests, sent, feed } = harness();
  const low = new Layer(100, 0);
  sw.select(0, 0);
  feed(0, low.frame(true), 0);
  feed(0, low.frame(false), 33);
  const before = sent.length;
  sw.restart(40);
  assert.deepEqual(requests, [0, 0], "a keyframe asked for at once");
  low.frame(false); // missed while paused
  feed(0, low.frame(false), 100);
  assert.equal(sent.length, before, "no delta frame before the keyframe");
  feed(0, low.frame(true), 133);
  assert.equal(sent.length, before + 2);
  assertContinuous(sent);
  assert.equal(sw.layer, 0);
});

Deno.test("padding the publisher sends on the forwarded layer leaves no gap in the sequence", () => {
  const { sw, sent, feed } = harness();
  sw.select(0, 0);
  feed(0, [packet(100, 0, idr)], 0);
  // Two padding-only probes (101, 102) are not forwarded; a late one (99) changes nothing.
  sw.skip(0, 101);
  sw.skip(0, 102);
  sw.skip(0, 99);
  sw.skip(1, 103); // another layer's padding
  feed(0, [packet(103, 3000, pSlice), packet(104, 6000, pSlice)], 33);
  assert.deepEqual(sent.map((p) => p.sequenceNumber), [100, 101, 102]);
  // A NACK of 102 maps back to the packet the publisher numbered 104.
  assert.deepEqual(sw.origin(102), { layer: 0, sequenceNumber: 104 });
});
