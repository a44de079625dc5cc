import assert from "node:assert/strict";
import { ParseError } from "../../core/errors.ts";
import { joinLengthPrefixed, splitLengthPrefixed } from "../codecs/nalu.ts";
import type { MediaFrame } from "../frame.ts";
import { H265Depacketizer } from "./h265_depacketizer.ts";
import { H265Packetizer } from "./h265_packetizer.ts";
import { rtp } from "./test_packet.ts";

const vps = Uint8Array.of(0x40, 0x01, 0x0c, 0x01);
const sps = Uint8Array.of(0x42, 0x01, 0x01, 0x01);
const pps = Uint8Array.of(0x44, 0x01, 0xc1, 0x72);
const aud = Uint8Array.of(0x46, 0x01, 0x50);

/** A NAL unit of `type` with `size` bytes (header included). */
function nal(type: number, size: number): Uint8Array {
  const out = Uint8Array.from({ length: size }, (_, i) => (i * 13 + type) & 0xff);
  out[0] = type << 1;
  out[1] = 0x01;
  return out;
}

function au(nals: Uint8Array[], keyframe: boolean, pts: number): MediaFrame {
  return { trackId: 0, codec: "H265", pts, dts: pts, keyframe, data: joinLengthPrefixed(nals) };
}

function roundTrip(frames: MediaFrame[], max = 1200) {
  const p = new H265Packetizer(() => [vps, sps, pps], max);
  const d = new H265Depacketizer(0);
  const out: MediaFrame[] = [];
  const packets: { payload: Uint8Array; marker: boolean }[] = [];
  let seq = 0;
  for (const f of frames) {
    p.packetize(f, (payload, marker) => {
      packets.push({ payload: payload.slice(), marker });
      d.push(rtp({ seq: seq++, ts: f.pts, marker, payload }), (x) => out.push(x));
    });
  }
  // The depacketizer emits an access unit when the next timestamp begins.
  d.push(rtp({ seq: seq++, ts: 999_999, marker: true, payload: nal(1, 10) }), (x) => out.push(x));
  return { out, packets };
}

Deno.test("H.265: a big IDR goes as FUs after VPS/SPS/PPS, and the depacketizer gets it back", () => {
  const idr = nal(19, 5000);
  const { out, packets } = roundTrip([au([aud, idr], true, 3000)]);
  // VPS, SPS, PPS, then ceil(4998 / 1197) = 5 fragments; the AUD is left out.
  assert.equal(packets.length, 3 + 5);
  assert.deepEqual([...packets[0].payload], [...vps]);
  const fu = packets[3].payload;
  assert.equal((fu[0] >> 1) & 0x3f, 49);
  assert.equal(fu[2], 0x80 | 19);
  assert.equal(packets[7].payload[2], 0x40 | 19);
  assert.deepEqual(packets.map((p) => p.marker), [
    false,
    false,
    false,
    false,
    false,
    false,
    false,
    true,
  ]);
  assert.ok(packets.every((p) => p.payload.length <= 1200));
  assert.deepEqual(
    splitLengthPrefixed(out[0].data).map((n) => [...n]),
    [vps, sps, pps, idr].map((n) => [...n]),
  );
  assert.equal(out[0].keyframe, true);
});

Deno.test("H.265: small NAL units go whole; a keyframe with its own VPS gets no copies", () => {
  const { packets } = roundTrip([
    au([vps, sps, pps, nal(19, 100)], true, 0),
    au([nal(1, 50)], false, 3000),
  ]);
  assert.equal(packets.length, 5);
  assert.deepEqual(packets.map((p) => p.marker), [false, false, false, true, true]);
});

Deno.test("H.265: a cut length prefix or an overlong NAL is a ParseError before any packet", () => {
  const p = new H265Packetizer(() => []);
  let emitted = 0;
  const bad = { ...au([nal(1, 10)], false, 0) };
  bad.data = bad.data.subarray(0, 8);
  assert.throws(() => p.packetize(bad, () => emitted++), ParseError);
  assert.throws(
    () => p.packetize({ ...bad, data: Uint8Array.of(0, 0) }, () => emitted++),
    ParseError,
  );
  assert.equal(emitted, 0);
});
