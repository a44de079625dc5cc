import assert from "node:assert/strict";
import { ParseError } from "../../core/errors.ts";
import type { MediaFrame } from "../frame.ts";
import { AacDepacketizer, auHeaderLayout } from "./aac_depacketizer.ts";
import { aacHbrFmtp, AacPacketizer } from "./aac_packetizer.ts";
import { rtp } from "./test_packet.ts";

function fmtpParams(): Map<string, string> {
  return new Map(aacHbrFmtp.split(";").map((p) => p.split("=") as [string, string]));
}

function frame(size: number, pts: number): MediaFrame {
  const data = Uint8Array.from({ length: size }, (_, i) => (i * 7 + pts) & 0xff);
  return { trackId: 1, codec: "AAC", pts, dts: pts, keyframe: true, data };
}

/** Packetizes `frames` and depacketizes them with the RTSP pull's depacketizer. */
function roundTrip(p: AacPacketizer, frames: MediaFrame[]) {
  const d = new AacDepacketizer(1, auHeaderLayout(fmtpParams()));
  const out: MediaFrame[] = [];
  const packets: { size: number; marker: boolean }[] = [];
  let seq = 0;
  for (const f of frames) {
    p.packetize(f, (payload, marker, offset) => {
      packets.push({ size: payload.length, marker });
      d.push(rtp({ seq: seq++, ts: f.pts + offset, marker, pt: 97, payload }), (x) => out.push(x));
    });
  }
  return { out, packets };
}

Deno.test("AAC-hbr: one AU per packet with a 13-bit size header, read back by the depacketizer", () => {
  const frames = [frame(371, 0), frame(402, 1024)];
  const { out, packets } = roundTrip(new AacPacketizer(), frames);
  assert.deepEqual(packets, [{ size: 375, marker: true }, { size: 406, marker: true }]);
  assert.deepEqual(out.map((f) => [...f.data]), frames.map((f) => [...f.data]));
  assert.deepEqual(out.map((f) => f.pts), [0, 1024]);
});

Deno.test("AAC-hbr: an AU bigger than a packet is fragmented, marker on the last fragment only", () => {
  const big = frame(3000, 2048);
  const { out, packets } = roundTrip(new AacPacketizer(1200), [big]);
  assert.deepEqual(packets.map((p) => p.marker), [false, false, true]);
  assert.ok(packets.every((p) => p.size <= 1200));
  assert.equal(out.length, 1);
  assert.deepEqual([...out[0].data], [...big.data]);
});

Deno.test("AAC-hbr: empty, oversized or non-AAC frames are ParseErrors", () => {
  const p = new AacPacketizer();
  assert.throws(() => p.packetize(frame(0, 0), () => {}), ParseError);
  assert.throws(() => p.packetize(frame(8192, 0), () => {}), ParseError);
  assert.throws(() => p.packetize({ ...frame(10, 0), codec: "OPUS" }, () => {}), ParseError);
});
