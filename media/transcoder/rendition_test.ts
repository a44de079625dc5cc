import assert from "node:assert/strict";
import { silentLogger } from "../../core/log.ts";
import { NativeEngine } from "../engine/native.ts";
import type { MediaFrame, Track } from "../frame.ts";
import { pictureBuffers } from "../mixer/buffer_pool.ts";
import { i420Size } from "../mixer/i420.ts";
import { lengthPrefixedToAnnexB } from "../codecs/nalu.ts";
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

/** A 10 fps H.264 rendition of `source` at `width`x`height` (0: by aspect) into `frames`. */
function h264Rendition(
  engine: NativeEngine,
  width: number,
  height: number,
  frames: MediaFrame[],
): Rendition {
  return new Rendition({
    engine,
    profile: { width, height, fps: 10, keyFrameInterval: 10, videoCodec: "H264", bitrateKbps: 0 },
    sourceVideo: source,
    sourceAudio: undefined,
    // The decoder → kernels → encoder path is what these tests are about.
    fuse: false,
    onFrame: (frame) => frames.push(frame),
    log: silentLogger,
  });
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
  const rendition = h264Rendition(engine, 32, 0, frames);
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

Deno.test("pictures of the output's size go to the encoder as they are; a watermark goes through the kernels", async () => {
  const engine = new NativeEngine();
  const frames: MediaFrame[] = [];
  const rendition = h264Rendition(engine, 64, 48, frames);
  // A white 16x16 square, opaque.
  const watermark = {
    image: { width: 16, height: 16, rgba: new Uint8Array(16 * 16 * 4).fill(255) },
    x: 0,
    y: 0,
  };
  try {
    // Pictures every 100 ms, each a grey of its own; 150 ms apart around 1 s (a tick
    // repeats a picture); the watermark on from the 10th to the 15th picture.
    const times = [...Array(10).keys()].map((i) => i * 100).concat(
      1050,
      1200,
      1300,
      1400,
      1500,
      1600,
      1700,
    );
    for (const [i, ms] of times.entries()) {
      if (i === 10) rendition.setWatermark(watermark);
      if (i === 15) rendition.setWatermark(undefined);
      // In a buffer of the decoders' pool, as a decoder gives it: one given back to the pool
      // while the encoder still had to write it would show another picture's grey.
      const data = new Uint8Array(pictureBuffers.take(i420Size(64, 48))).fill(128);
      data.fill(40 + 8 * i, 0, 64 * 48);
      rendition.pushPicture({ width: 64, height: 48, data, pts: 90000 + ms * 90 });
      await new Promise((r) => setTimeout(r, 10));
    }
    await until("18 frames", () => frames.length >= 18);
    // Every tick once, in order, whichever way its picture went.
    assert.deepEqual(frames.map((f) => (f.pts - 90000) / 9000), [...Array(18).keys()]);
    const lumas = await decodedLuma(frames);
    // Tick 10 (1000 ms) repeats picture 9; tick 11 (1100 ms) shows picture 10 (1050 ms).
    const shown = [0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 9, 10, 11, 12, 13, 14, 15, 16];
    for (const [tick, index] of shown.entries()) {
      const { corner, rest } = lumas[tick];
      const grey = 40 + 8 * index;
      assert.ok(Math.abs(rest - grey) < 4, `tick ${tick}: grey ${rest}, not ${grey}`);
      // From the first tick composed after it was set (its picture's ticks came with the
      // next picture) to the last one composed before it was removed.
      const stamped = tick >= 10 && tick <= 15;
      assert.ok(
        stamped ? corner > 220 : Math.abs(corner - grey) < 4,
        `tick ${tick}: corner ${corner}`,
      );
    }
  } finally {
    await rendition.close();
    await engine.close();
  }
});

/**
 * Mean luma of each encoded 64x48 frame (its Y plane as decoded): in its top-left 16x16
 * square, and right of it.
 */
async function decodedLuma(frames: MediaFrame[]): Promise<{ corner: number; rest: number }[]> {
  const annexB = frames.map((f) => lengthPrefixedToAnnexB(f.data));
  const input = new Uint8Array(annexB.reduce((n, a) => n + a.length, 0));
  annexB.reduce((at, a) => (input.set(a, at), at + a.length), 0);
  const child = new Deno.Command("ffmpeg", {
    args: ["-v", "error", "-f", "h264", "-i", "-", "-f", "rawvideo", "-pix_fmt", "yuv420p", "-"],
    stdin: "piped",
    stdout: "piped",
  }).spawn();
  const writer = child.stdin.getWriter();
  await writer.write(input);
  await writer.close();
  const { stdout } = await child.output();
  const bytes = i420Size(64, 48);
  const mean = (frame: Uint8Array, x0: number, x1: number) => {
    let sum = 0;
    for (let y = 0; y < 16; y++) for (let x = x0; x < x1; x++) sum += frame[y * 64 + x];
    return sum / (16 * (x1 - x0));
  };
  return Array.from({ length: stdout.length / bytes }, (_, i) => {
    const frame = stdout.subarray(i * bytes, (i + 1) * bytes);
    return { corner: mean(frame, 0, 16), rest: mean(frame, 24, 64) };
  });
}
