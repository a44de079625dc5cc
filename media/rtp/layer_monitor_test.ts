import assert from "node:assert/strict";
import { Buffer } from "node:buffer";
import { RtpHeader, RtpPacket } from "werift";
import { LayerMonitor } from "./layer_monitor.ts";

/** An H.264 SPS of 640x480 (Baseline). */
const sps = Buffer.from("6742c01eda0280f640", "hex");

function packet(seq: number, ts: number, payload: Buffer): RtpPacket {
  return new RtpPacket(
    new RtpHeader({ sequenceNumber: seq, timestamp: ts, marker: true }),
    payload,
  );
}

/** Sends `fps` frames a second of `bytes` each on `layer` from `startMs` for `ms`. */
function feed(
  m: LayerMonitor,
  layer: number,
  startMs: number,
  ms: number,
  fps: number,
  bytes = 1000,
) {
  let seq = 0;
  for (let t = 0; t < ms; t += 1000 / fps) {
    const key = seq % 30 === 0;
    m.add(layer, packet(seq, seq * 3000, key ? sps : Buffer.alloc(bytes, 0x41)), startMs + t);
    if (!key) seq++;
    else {
      m.add(
        layer,
        packet(seq + 1, seq * 3000, Buffer.concat([Buffer.from([0x65]), Buffer.alloc(bytes - 1)])),
        startMs + t,
      );
      seq += 2;
    }
  }
}

Deno.test("layers are alive while packets come and dead a window after the last", () => {
  const start = performance.now();
  const m = new LayerMonitor("H264", 96, 3);
  assert.deepEqual(m.changes(start), [false, false, false]);
  assert.equal(m.changes(start), undefined, "no change, nothing to report");
  feed(m, 0, start, 3000, 30);
  feed(m, 1, start, 3000, 30);
  feed(m, 2, start, 1500, 30);
  const at = start + 2990;
  assert.deepEqual(m.aliveLayers(at), [true, true, false]);
  assert.deepEqual(m.changes(at), [true, true, false]);
  assert.equal(m.changes(at + 10), undefined);
  assert.deepEqual(m.changes(at + 2000), [false, false, false]);
});

Deno.test("a layer's bitrate, frame rate and picture size are measured", () => {
  const start = performance.now();
  const m = new LayerMonitor("H264", 96, 2);
  feed(m, 0, start, 2500, 30, 1000);
  feed(m, 1, start, 2500, 15, 4000);
  const [low, high] = m.report(start + 2490);
  assert.equal(low.width, 640);
  assert.equal(low.height, 480);
  assert.ok(Math.abs(low.fps - 30) <= 2, `low fps ${low.fps}`);
  assert.ok(Math.abs(high.fps - 15) <= 2, `high fps ${high.fps}`);
  // About 30 x 1000 bytes and 15 x 4000 bytes a second.
  assert.ok(low.kbps > 200 && low.kbps < 280, `low ${low.kbps} kbit/s`);
  assert.ok(high.kbps > 420 && high.kbps < 540, `high ${high.kbps} kbit/s`);
  assert.ok(high.alive && low.alive);
  const later = m.report(start + 6000);
  assert.deepEqual(later.map((l) => [l.alive, l.kbps, l.fps]), [[false, 0, 0], [false, 0, 0]]);
});

Deno.test("VP8 temporal layers are counted from the descriptors' TIDs", () => {
  const start = performance.now();
  const m = new LayerMonitor("VP8", 96, 2);
  // Layer 0: L1T3 (TIDs 0 2 1 2); layer 1: no T field.
  for (let i = 0; i < 8; i++) {
    const tid = [0, 2, 1, 2][i % 4];
    m.add(0, packet(i, i * 3000, Buffer.from([0x90, 0x20, tid << 6, 0x01])), start + i * 33);
    m.add(1, packet(i, i * 3000, Buffer.from([0x10, 0x01])), start + i * 33);
  }
  assert.deepEqual(m.report(start + 300).map((l) => l.temporalLayers), [3, 1]);
});
