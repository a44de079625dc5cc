import assert from "node:assert/strict";
import type { Track } from "../frame.ts";
import { RtpTimeline } from "./timeline.ts";

const tracks: Track[] = [
  { id: 0, kind: "video", codec: "H264", clockRate: 90000 },
  { id: 1, kind: "audio", codec: "AAC", clockRate: 48000 },
];

Deno.test("RTP-Info anchors every track at the same instant, across the 32-bit wrap", () => {
  const timeline = new RtpTimeline(tracks);
  timeline.startSession([4294967000, 1000]);
  assert.equal(timeline.pts(0, 4294967000 + 3600 - 4294967296), 3600);
  assert.equal(timeline.pts(1, 1000 + 1920), 1920);
  // 4294967000 + 9000 wraps past 2^32.
  assert.equal(timeline.pts(0, (4294967000 + 9000) % 4294967296), 9000);
});

Deno.test("sender reports realign a track that RTP-Info placed wrong", () => {
  const timeline = new RtpTimeline(tracks);
  timeline.startSession([0, 0]);
  timeline.pts(0, 0);
  timeline.pts(1, 0);
  // Same NTP instant: video at RTP 90000 (1 s), audio at RTP 38400 (0.8 s): audio's zero
  // was really 0.2 s before video's, so audio must move 0.2 s (9600 ticks) later.
  timeline.senderReport(0, { ssrc: 1, ntpMs: 5_000_000, rtpTimestamp: 90000 });
  timeline.senderReport(1, { ssrc: 2, ntpMs: 5_000_000, rtpTimestamp: 38400 });
  assert.equal(timeline.corrections, 1);
  assert.equal(timeline.pts(1, 38400), 48000);
  assert.equal(timeline.pts(0, 90000), 90000);
});

Deno.test("a new session continues after the previous one on the wall clock", async () => {
  const timeline = new RtpTimeline(tracks);
  timeline.startSession([]);
  assert.equal(timeline.pts(0, 777), 0);
  await new Promise((r) => setTimeout(r, 60));
  timeline.startSession([123, undefined]);
  const pts = timeline.pts(0, 123);
  assert.ok(pts >= 0.05 * 90000 && pts < 1 * 90000, `pts ${pts}`);
});
