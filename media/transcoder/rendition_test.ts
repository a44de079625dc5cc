import assert from "node:assert/strict";
import { silentLogger } from "../../core/log.ts";
import { NativeEngine } from "../engine/native.ts";
import type { MediaFrame, Track } from "../frame.ts";
import { i420Size } from "../mixer/i420.ts";
import { outputSize, Rendition } from "./rendition.ts";

const source: Track = {
  id: 0,
  kind: "video",
  codec: "H264",
  clockRate: 90000,
  width: 64,
  height: 48,
};

/** A grey 64x48 picture presented `ms` after the source's origin of 1 s. */
function picture(ms: number) {
  const data = new Uint8Array(i420Size(64, 48)).fill(128);
  return { width: 64, height: 48, data, pts: 90000 + ms * 90 };
}

async function until(what: string, check: () => boolean, timeoutMs = 10_000): Promise<void> {
  const deadline = Date.now() + timeoutMs;
  while (!check()) {
    if (Date.now() > deadline) throw new Error(`timed out waiting for ${what}`);
    await new Promise((r) => setTimeout(r, 20));
  }
}

Deno.test("missing pictures repeat the last one at the output rate; a gap over 2 s is skipped and counted", async () => {
  const engine = new NativeEngine();
  const frames: MediaFrame[] = [];
  const rendition = new Rendition({
    engine,
    profile: {
      width: 32,
      height: 0,
      fps: 10,
      keyFrameInterval: 10,
      videoCodec: "H264",
      bitrateKbps: 0,
    },
    sourceVideo: source,
    sourceAudio: undefined,
    onFrame: (frame) => frames.push(frame),
    log: silentLogger,
  });
  try {
    assert.deepEqual(rendition.tracks.map((t) => [t.codec, t.width, t.height]), [["H264", 32, 24]]);
    // Pictures at 0..1000 ms every 100 ms, but none from 300 to 700 ms; then a 3 s gap.
    for (const ms of [0, 100, 200, 800, 900, 1000, 4000, 4100, 4200]) {
      rendition.pushPicture(picture(ms));
      await new Promise((r) => setTimeout(r, 10));
    }
    await until("14 frames", () => frames.length >= 14);
    const ticks = frames.map((f) => (f.pts - 90000) / 9000);
    assert.deepEqual(ticks, [0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 40, 41, 42]);
    assert.ok(frames[0].keyframe && frames[11].keyframe === false);
    assert.equal(rendition.stats.sourceGaps, 1);
    assert.equal(rendition.stats.droppedFrames, 0);
    assert.equal(rendition.stats.encodedFrames, 14);
  } finally {
    await rendition.close();
    await engine.close();
  }
});

Deno.test("output size: 0 keeps the aspect (even sides), both 0 the source's size", () => {
  assert.deepEqual(outputSize(1280, 720, 640, 0), { width: 640, height: 360 });
  assert.deepEqual(outputSize(1280, 720, 0, 180), { width: 320, height: 180 });
  assert.deepEqual(outputSize(640, 480, 0, 0), { width: 640, height: 480 });
  assert.deepEqual(outputSize(1280, 720, 0, 250), { width: 444, height: 250 });
  assert.deepEqual(outputSize(641, 481, 0, 0), { width: 642, height: 482 });
});
