import assert from "node:assert/strict";
import { ParseError } from "../../core/errors.ts";
import { joinLengthPrefixed, splitLengthPrefixed } from "../codecs/nalu.ts";
import type { MediaFrame } from "../frame.ts";
import { FrameDepacketizer } from "./frame_depacketizer.ts";
import { FramePacketizer } from "./frame_packetizer.ts";
import { H264Depacketizer } from "./h264_depacketizer.ts";
import { H264Packetizer } from "./h264_packetizer.ts";
import type { RtpPacket } from "./packet.ts";
import type { Packetizer } from "./packetizer.ts";
import { Vp8Packetizer } from "./vp8_packetizer.ts";

const sps = Uint8Array.of(0x67, 0x42, 0xc0, 0x1e, 0xda);
const pps = Uint8Array.of(0x68, 0xce, 0x3c, 0x80);
const aud = Uint8Array.of(0x09, 0xf0);

function nal(header: number, size: number, seed = 1): Uint8Array {
  const out = new Uint8Array(size);
  out[0] = header;
  for (let i = 1; i < size; i++) out[i] = (i * 31 + seed) & 0xff;
  return out;
}

function h264Frame(nals: Uint8Array[], keyframe: boolean, pts = 9000): MediaFrame {
  return { trackId: 0, codec: "H264", pts, dts: pts, keyframe, data: joinLengthPrefixed(nals) };
}

/** The packets of `frames`, numbered from 0, timestamps from the frames' pts. */
function packetize(p: Packetizer, frames: MediaFrame[]): RtpPacket[] {
  const packets: RtpPacket[] = [];
  for (const frame of frames) {
    p.packetize(frame, (payload, marker, offset) =>
      packets.push({
        marker,
        payloadType: 96,
        sequenceNumber: packets.length,
        timestamp: frame.pts + offset,
        ssrc: 1,
        payload: payload.slice(),
      }));
  }
  return packets;
}

function depacketize(packets: RtpPacket[]): MediaFrame[] {
  const d = new H264Depacketizer(0);
  const out: MediaFrame[] = [];
  for (const packet of packets) d.push(packet, (f) => out.push(f));
  return out;
}

Deno.test("H.264: a big IDR goes as FU-A, SPS/PPS first, marker on the last packet only; the depacketizer gets it back", () => {
  const idr = nal(0x65, 5000);
  const p = new H264Packetizer(() => [sps, pps], 1200);
  const packets = packetize(p, [h264Frame([aud, idr], true)]);
  // SPS, PPS (single NAL units), then ceil(4999 / 1198) = 5 fragments; the AUD is left out.
  assert.equal(packets.length, 2 + 5);
  assert.deepEqual([...packets[0].payload], [...sps]);
  assert.deepEqual([...packets[1].payload], [...pps]);
  assert.ok(packets.every((pk) => pk.payload.length <= 1200));
  assert.deepEqual(packets.map((pk) => pk.marker), [
    false,
    false,
    false,
    false,
    false,
    false,
    true,
  ]);
  assert.equal(packets[2].payload[0] & 0x1f, 28);
  assert.equal(packets[2].payload[1], 0x80 | 5, "start bit and the IDR type");
  assert.equal(packets[6].payload[1], 0x40 | 5, "end bit");
  const [frame] = depacketize(packets);
  assert.equal(frame.keyframe, true);
  assert.deepEqual(splitLengthPrefixed(frame.data).map((n) => [...n]), [[...sps], [...pps], [
    ...idr,
  ]]);
});

Deno.test("H.264: parameter sets only before keyframes that lack them", () => {
  const p = new H264Packetizer(() => [sps, pps]);
  const withSps = packetize(p, [h264Frame([sps, pps, nal(0x65, 100)], true)]);
  assert.equal(withSps.length, 3, "the frame's own SPS/PPS, not the track's again");
  const delta = packetize(p, [h264Frame([nal(0x41, 100)], false)]);
  assert.equal(delta.length, 1);
  assert.equal(delta[0].marker, true);
});

Deno.test("H.264: random access units survive packetizing and depacketizing (fuzz)", () => {
  let seed = 7;
  const random = (n: number) => {
    seed = (seed * 1103515245 + 12345) & 0x7fffffff;
    return seed % n;
  };
  for (let round = 0; round < 300; round++) {
    const max = 3 + random(1500);
    const nals = Array.from({ length: 1 + random(5) }, (_, i) => {
      const type = [1, 5, 6][random(3)];
      return nal(0x60 | type, 1 + random(4000), round * 10 + i);
    });
    const frames = [h264Frame(nals, false, 3000 * round)];
    const out = depacketize(packetize(new H264Packetizer(() => [], max), frames));
    assert.equal(out.length, 1, `round ${round}`);
    assert.deepEqual(splitLengthPrefixed(out[0].data), nals, `round ${round}, limit ${max}`);
  }
});

Deno.test("H.264: a malformed access unit is a ParseError and sends nothing", () => {
  const p = new H264Packetizer(() => [sps, pps]);
  const good = joinLengthPrefixed([nal(0x65, 300)]);
  const cases = [
    good.subarray(0, 3), // prefix cut
    good.subarray(0, 200), // NAL longer than the unit
    Uint8Array.of(0, 0, 0, 0), // empty NAL
  ];
  let seed = 3;
  for (let i = 0; i < 200; i++) {
    const bytes = new Uint8Array(1 + (i % 40));
    for (let j = 0; j < bytes.length; j++) bytes[j] = (seed = (seed * 48271) % 2147483647) & 0xff;
    cases.push(bytes);
  }
  for (const data of cases) {
    const sent: Uint8Array[] = [];
    try {
      p.packetize(
        { trackId: 0, codec: "H264", pts: 0, dts: 0, keyframe: true, data },
        (b) => sent.push(b),
      );
    } catch (err) {
      assert.ok(err instanceof ParseError);
      assert.equal(sent.length, 0, "nothing goes out of a unit that fails");
      continue;
    }
    // Random bytes that happen to be a valid unit: every NAL went out, once.
    assert.ok(sent.length >= splitLengthPrefixed(data).length);
  }
});

Deno.test("G.711 frames longer than a packet split at sample offsets; Opus passes whole", () => {
  const p = new FramePacketizer(1200);
  const pcmu: MediaFrame = {
    trackId: 1,
    codec: "PCMU",
    pts: 8000,
    dts: 8000,
    keyframe: true,
    data: nal(0xff, 2000),
  };
  const packets = packetize(p, [pcmu]);
  assert.deepEqual(packets.map((pk) => [pk.payload.length, pk.timestamp]), [[1200, 8000], [
    800,
    9200,
  ]]);
  const back: MediaFrame[] = [];
  const d = new FrameDepacketizer(1, "PCMU");
  for (const pk of packets) d.push(pk, (f) => back.push(f));
  assert.deepEqual(back.map((f) => f.data.length), [1200, 800]);
  const opus: MediaFrame = { ...pcmu, codec: "OPUS", data: nal(0x78, 160) };
  assert.deepEqual(packetize(p, [opus]).map((pk) => pk.payload.length), [160]);
  assert.throws(() => packetize(p, [{ ...opus, data: new Uint8Array(1300) }]), ParseError);
  assert.throws(() => packetize(p, [{ ...opus, data: new Uint8Array(0) }]), ParseError);
});

Deno.test("VP8: descriptor S on the first packet only, marker on the last; pieces rebuild the frame", () => {
  const frame = new Uint8Array(2500).map((_, i) => i * 7);
  const packets: { payload: Uint8Array; marker: boolean }[] = [];
  new Vp8Packetizer(1000).packetize(
    { trackId: 0, codec: "VP8", pts: 0, dts: 0, keyframe: true, data: frame },
    (payload, marker) => packets.push({ payload: payload.slice(), marker }),
  );
  assert.deepEqual(packets.map((p) => p.payload.length), [1000, 1000, 503]);
  assert.deepEqual(packets.map((p) => p.payload[0]), [0x10, 0x00, 0x00]);
  assert.deepEqual(packets.map((p) => p.marker), [false, false, true]);
  const rebuilt = packets.flatMap((p) => [...p.payload.subarray(1)]);
  assert.deepEqual(new Uint8Array(rebuilt), frame);
  assert.throws(
    () =>
      new Vp8Packetizer().packetize(
        { trackId: 0, codec: "VP8", pts: 0, dts: 0, keyframe: false, data: new Uint8Array() },
        () => {},
      ),
    ParseError,
  );
});
