import assert from "node:assert/strict";
import { ParseError } from "../../core/errors.ts";
import type { MediaFrame } from "../frame.ts";
import { splitLengthPrefixed } from "../codecs/nalu.ts";
import { AacDepacketizer, auHeaderLayout } from "./aac_depacketizer.ts";
import type { Depacketizer } from "./depacketizer.ts";
import { FrameDepacketizer } from "./frame_depacketizer.ts";
import { H264Depacketizer } from "./h264_depacketizer.ts";
import { H265Depacketizer } from "./h265_depacketizer.ts";
import { rtp, type TestPacket } from "./test_packet.ts";

function run(d: Depacketizer, packets: TestPacket[]): MediaFrame[] {
  const out: MediaFrame[] = [];
  for (const p of packets) d.push(rtp(p), (f) => out.push(f));
  return out;
}

const idr = [0x65, 0x88, 1, 2, 3, 4, 5, 6, 7, 8];
const sps = [0x67, 0x42, 0xc0, 0x1e];
const pps = [0x68, 0xce, 0x3c, 0x80];

Deno.test("H.264: STAP-A then FU-A give one keyframe with SPS, PPS and the IDR", () => {
  const stap = [24, 0, sps.length, ...sps, 0, pps.length, ...pps];
  const fu = (
    start: boolean,
    end: boolean,
    bytes: number[],
  ) => [0x60 | 28, (start ? 0x80 : 0) | (end ? 0x40 : 0) | 5, ...bytes];
  const frames = run(new H264Depacketizer(0), [
    { seq: 1, ts: 900, payload: stap },
    { seq: 2, ts: 900, payload: fu(true, false, idr.slice(1, 4)) },
    { seq: 3, ts: 900, payload: fu(false, false, idr.slice(4, 7)) },
    { seq: 4, ts: 900, marker: true, payload: fu(false, true, idr.slice(7)) },
    { seq: 5, ts: 4500, marker: true, payload: [0x41, 9, 9] },
  ]);
  assert.equal(frames.length, 2);
  assert.equal(frames[0].keyframe, true);
  assert.equal(frames[0].pts, 900);
  assert.deepEqual(splitLengthPrefixed(frames[0].data).map((n) => [...n]), [sps, pps, idr]);
  assert.equal(frames[1].keyframe, false);
  assert.deepEqual([...frames[1].data], [0, 0, 0, 3, 0x41, 9, 9]);
});

Deno.test("H.264: a FU-A whose start was lost is dropped; a timestamp change ends a unit", () => {
  const frames = run(new H264Depacketizer(0), [
    { seq: 1, ts: 0, payload: [0x7c, 0x45, 1, 2] }, // middle+end of an IDR, no start
    { seq: 2, ts: 3600, payload: [0x41, 1] }, // no marker
    { seq: 3, ts: 7200, marker: true, payload: [0x41, 2] },
  ]);
  assert.deepEqual(frames.map((f) => [f.pts, [...f.data]]), [
    [3600, [0, 0, 0, 2, 0x41, 1]],
    [7200, [0, 0, 0, 2, 0x41, 2]],
  ]);
  assert.throws(() => run(new H264Depacketizer(0), [{ payload: [0x85, 1] }]), ParseError);
  assert.throws(() => run(new H264Depacketizer(0), [{ payload: [26, 1, 2] }]), ParseError);
});

Deno.test("H.265: AP with parameter sets and an FU-carried IDR give one keyframe", () => {
  const vps = [0x40, 0x01, 0x0c];
  const hsps = [0x42, 0x01, 0x01];
  const hpps = [0x44, 0x01, 0xc1];
  const ap = [48 << 1, 1, 0, 3, ...vps, 0, 3, ...hsps, 0, 3, ...hpps];
  const idrNal = [19 << 1, 1, 0xaf, 1, 2, 3, 4];
  const frames = run(new H265Depacketizer(0), [
    { seq: 1, ts: 10, payload: ap },
    { seq: 2, ts: 10, payload: [49 << 1, 1, 0x80 | 19, ...idrNal.slice(2, 4)] },
    { seq: 3, ts: 10, marker: true, payload: [49 << 1, 1, 0x40 | 19, ...idrNal.slice(4)] },
  ]);
  assert.equal(frames.length, 1);
  assert.equal(frames[0].keyframe, true);
  assert.deepEqual(splitLengthPrefixed(frames[0].data).map((n) => [...n]), [
    vps,
    hsps,
    hpps,
    idrNal,
  ]);
  assert.throws(() => run(new H265Depacketizer(0), [{ payload: [50 << 1, 1, 0] }]), ParseError);
});

Deno.test("AAC (RFC 3640 hbr): two AUs in a packet, then one AU fragmented over two", () => {
  const layout = auHeaderLayout(new Map([["mode", "AAC-hbr"]]));
  assert.deepEqual(layout, { sizeLength: 13, indexLength: 3, indexDeltaLength: 3 });
  const header = (size: number) => [size >> 5, (size & 0x1f) << 3];
  const frames = run(new AacDepacketizer(1, layout), [
    { seq: 1, ts: 1000, marker: true, payload: [0, 32, ...header(2), ...header(3), 1, 2, 3, 4, 5] },
    { seq: 2, ts: 3048, payload: [0, 16, ...header(4), 6, 7] },
    { seq: 3, ts: 3048, marker: true, payload: [0, 16, ...header(4), 8, 9] },
  ]);
  assert.deepEqual(frames.map((f) => [f.trackId, f.pts, [...f.data]]), [
    [1, 1000, [1, 2]],
    [1, 2024, [3, 4, 5]],
    [1, 3048, [6, 7, 8, 9]],
  ]);
  assert.throws(() => auHeaderLayout(new Map()), ParseError);
  assert.throws(
    () =>
      run(new AacDepacketizer(1, layout), [{ marker: true, payload: [0, 16, ...header(9), 1] }]),
    ParseError,
  );
});

Deno.test("PCMU and Opus: one frame per packet, payload as is", () => {
  const frames = run(new FrameDepacketizer(2, "PCMU"), [
    { ts: 160, payload: [0xff, 0x7f] },
    { ts: 320, payload: [0x00] },
  ]);
  assert.deepEqual(frames.map((f) => [f.codec, f.pts, [...f.data], f.keyframe]), [
    ["PCMU", 160, [0xff, 0x7f], true],
    ["PCMU", 320, [0x00], true],
  ]);
  assert.throws(() => run(new FrameDepacketizer(2, "OPUS"), [{ payload: [] }]), ParseError);
});
