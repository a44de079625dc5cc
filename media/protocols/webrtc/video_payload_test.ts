import assert from "node:assert/strict";
import { ParseError } from "../../../core/errors.ts";
import type { MediaFrame } from "../../frame.ts";
import {
  h264FrameType,
  h264ParameterSets,
  h264PictureSize,
  vp8FrameType,
  vp8PictureSize,
} from "./video_payload.ts";
import { Vp8Depacketizer } from "./vp8_depacketizer.ts";

const sps = Uint8Array.from([0x67, 0x42, 0xc0, 0x1e, 0xda, 0x02, 0x80, 0xf6, 0x40]);
const pps = Uint8Array.from([0x68, 0xce, 0x3c, 0x80]);

/** A VP8 payload: descriptor (S=1, X with a 15-bit picture id), then the frame header. */
function vp8(key: boolean, width: number, height: number): Uint8Array {
  return Uint8Array.from([
    0x90,
    0x80,
    0x80,
    0x01,
    key ? 0x00 : 0x01,
    0,
    0,
    0x9d,
    0x01,
    0x2a,
    width & 0xff,
    width >> 8,
    height & 0xff,
    height >> 8,
  ]);
}

Deno.test("h264: frame types, parameter sets and size from RTP payloads", () => {
  const stap = Uint8Array.from([24, 0, sps.length, ...sps, 0, pps.length, ...pps]);
  assert.equal(h264FrameType(stap), "key");
  assert.deepEqual(h264ParameterSets(stap), [sps, pps]);
  assert.deepEqual(h264PictureSize(stap), { width: 640, height: 480 });
  assert.equal(h264FrameType(Uint8Array.from([0x65, 0x88])), "key");
  // non-IDR slice, first_mb 0, slice_type 5 (P) / 6 (B)
  assert.equal(h264FrameType(Uint8Array.from([0x41, 0x9a])), "p");
  assert.equal(h264FrameType(Uint8Array.from([0x41, 0x9c])), "b");
  // FU-A start of a P slice, and a middle fragment (no slice header)
  assert.equal(h264FrameType(Uint8Array.from([0x7c, 0x81, 0x9a])), "p");
  assert.equal(h264FrameType(Uint8Array.from([0x7c, 0x01, 0x00])), "unknown");
});

Deno.test("vp8: frame type and size of a keyframe", () => {
  assert.equal(vp8FrameType(vp8(true, 640, 480)), "key");
  assert.equal(vp8FrameType(vp8(false, 0, 0)), "p");
  assert.deepEqual(vp8PictureSize(vp8(true, 1280, 720)), { width: 1280, height: 720 });
});

Deno.test("vp8 depacketizer: frames from first packet to marker, broken frames dropped", () => {
  const depacketizer = new Vp8Depacketizer(3);
  const frames: MediaFrame[] = [];
  const emit = (f: MediaFrame) => frames.push(f);
  const packet = (seq: number, ts: number, payload: Uint8Array, marker: boolean) => ({
    marker,
    payloadType: 96,
    sequenceNumber: seq,
    timestamp: ts,
    ssrc: 1,
    payload,
  });
  depacketizer.push(packet(1, 100, vp8(true, 640, 480), false), emit);
  depacketizer.push(packet(2, 100, Uint8Array.from([0x00, 7, 8]), true), emit);
  // A continuation whose start was lost yields nothing.
  depacketizer.push(packet(4, 200, Uint8Array.from([0x00, 9]), true), emit);
  assert.equal(frames.length, 1);
  assert.deepEqual([frames[0].trackId, frames[0].keyframe, frames[0].pts], [3, true, 100]);
  assert.deepEqual([...frames[0].data.subarray(-2)], [7, 8]);
});

Deno.test("fuzz: random and truncated payloads never crash the payload readers", () => {
  const depacketizer = new Vp8Depacketizer(0);
  for (let i = 0; i < 5000; i++) {
    const payload = crypto.getRandomValues(new Uint8Array(Math.floor(Math.random() * 24)));
    h264FrameType(payload);
    h264ParameterSets(payload);
    h264PictureSize(payload);
    vp8FrameType(payload);
    vp8PictureSize(payload);
    try {
      depacketizer.push({
        marker: Math.random() < 0.3,
        payloadType: 96,
        sequenceNumber: i,
        timestamp: i >> 2,
        ssrc: 1,
        payload,
      }, () => {});
    } catch (err) {
      assert.ok(err instanceof ParseError, String(err));
    }
  }
});
