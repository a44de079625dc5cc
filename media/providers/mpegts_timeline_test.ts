import assert from "node:assert/strict";
import type { MediaFrame } from "../frame.ts";
import { TimelineRebaser } from "./mpegts_timeline.ts";

function frame(trackId: number, dts: number, pts = dts): MediaFrame {
  return { trackId, codec: "H264", dts, pts, keyframe: false, data: new Uint8Array(0) };
}

Deno.test("TimelineRebaser passes small steps and re-bases a jump on every track at once", () => {
  const rebaser = new TimelineRebaser(1);
  const video = (sec: number, ptsDelaySec = 0) =>
    rebaser.apply(
      frame(0, Math.round(sec * 90_000), Math.round((sec + ptsDelaySec) * 90_000)),
      90_000,
    );
  const audio = (sec: number) => rebaser.apply(frame(1, sec * 48_000), 48_000).dts / 48_000;
  // 90 kHz video with B-frames (pts ahead of dts), 48 kHz audio: passed through.
  assert.equal(video(10, 0.08).pts, 907_200);
  assert.equal(audio(10), 10);
  assert.equal(video(10.04).dts, 903_600);
  assert.equal(rebaser.rebases, 0);
  // The sender restarts at 1.4 s (ffmpeg's offset): both tracks go on one frame later.
  const restarted = video(1.4, 0.08);
  assert.equal(restarted.dts, Math.round(10.08 * 90_000));
  assert.equal(restarted.pts - restarted.dts, 7200, "B-frame delay kept");
  assert.equal(audio(1.4), 10.08);
  assert.equal(rebaser.rebases, 1);
  // A jump forward by 5 s is re-based too; a step under a second is not.
  assert.equal(video(6.44).dts, Math.round(10.12 * 90_000));
  assert.equal(video(6.48 + 0.9).dts, Math.round(11.06 * 90_000));
  assert.equal(rebaser.rebases, 2);
});
