import assert from "node:assert/strict";
import { buildWasm } from "../../wasm/build.ts";
import { BufferPool } from "./buffer_pool.ts";
import { chromaSize, i420Size, type Rect, type YuvColor } from "./i420.ts";
import { NotFoundError } from "../../core/errors.ts";
import { computeLayout, type CustomLayout } from "./layout.ts";
import { type ComposedFrame, type RawVideoFrame, VideoComposer } from "./video_composer.ts";
import { WorkerRunner } from "./worker_runner.ts";

await buildWasm({ ifStale: true });

const width = 1280;
const height = 720;
const red: YuvColor = { y: 81, u: 90, v: 240 };
const green: YuvColor = { y: 145, u: 54, v: 34 };
const blue: YuvColor = { y: 41, u: 240, v: 110 };
const white: YuvColor = { y: 235, u: 128, v: 128 };
const background: YuvColor = { y: 16, u: 128, v: 128 };

function solid(color: YuvColor, pts: number, w = 640, h = 360): RawVideoFrame {
  const data = new Uint8Array(i420Size(w, h));
  data.fill(color.y, 0, w * h);
  data.fill(color.u, w * h, w * h + chromaSize(w) * chromaSize(h));
  data.fill(color.v, w * h + chromaSize(w) * chromaSize(h));
  return { width: w, height: h, data, pts };
}

function pixel(frame: ComposedFrame, x: number, y: number): YuvColor {
  const cw = chromaSize(frame.width);
  const u = frame.width * frame.height;
  const v = u + cw * chromaSize(frame.height);
  const c = (y >> 1) * cw + (x >> 1);
  return { y: frame.data[y * frame.width + x], u: frame.data[u + c], v: frame.data[v + c] };
}

/** Every pixel of `rect` (sampled on a grid, edges included) has `color`. */
function assertFilled(frame: ComposedFrame, rect: Rect, color: YuvColor, what: string): void {
  for (let j = 0; j <= 8; j++) {
    for (let i = 0; i <= 8; i++) {
      const x = rect.x + Math.min(rect.width - 1, Math.floor(i * rect.width / 8));
      const y = rect.y + Math.min(rect.height - 1, Math.floor(j * rect.height / 8));
      assert.deepEqual(pixel(frame, x, y), color, `${what} at ${x},${y}`);
    }
  }
}

Deno.test("a 3-input grid into 1280x720 shows each input's colour in its rectangle", async () => {
  using composer = new VideoComposer({ width, height, frameRate: 30, layout: "grid" });
  const colors = [red, green, blue];
  colors.forEach((color, i) => {
    composer.addInput(`in${i}`);
    composer.push(`in${i}`, solid(color, 0));
  });
  const frame = await composer.compose();
  const rects = computeLayout("grid", colors.map(() => ({ width: 640, height: 360 })), {
    width,
    height,
  });
  colors.forEach((color, i) => assertFilled(frame, rects[i], color, `input ${i}`));
  assertFilled(frame, { x: 0, y: 360, width: 320, height: 360 }, background, "left of row 2");
  assertFilled(frame, { x: 960, y: 360, width: 320, height: 360 }, background, "right of row 2");
});

Deno.test("an input that stops repeats its last picture; output pts follow the rate", async () => {
  using composer = new VideoComposer({ width: 320, height: 180, frameRate: 30, layout: "grid" });
  composer.addInput("a");
  const sequence = [red, green, blue];
  const frames: ComposedFrame[] = [];
  for (let tick = 0; tick < 8; tick++) {
    if (tick < sequence.length) composer.push("a", solid(sequence[tick], tick * 3000, 320, 180));
    frames.push(await composer.compose());
  }
  const whole = { x: 0, y: 0, width: 320, height: 180 };
  frames.forEach((frame, tick) => {
    assert.equal(frame.pts, tick * 3000);
    assertFilled(frame, whole, sequence[Math.min(tick, sequence.length - 1)], `tick ${tick}`);
  });
  assert.equal(composer.stats.repeatedPictures, 5);
  assert.equal(composer.stats.composedFrames, 8);
});

Deno.test("late, out-of-order and superseded frames are dropped", async () => {
  using composer = new VideoComposer({ width: 64, height: 64, frameRate: 25, layout: "grid" });
  composer.addInput("a");
  assert.ok(composer.push("a", solid(red, 0, 64, 64)));
  assert.ok(composer.push("a", solid(green, 1800, 64, 64)));
  assert.equal(composer.push("a", solid(blue, 1800, 64, 64)), false, "same pts again");
  // Tick 1 (pts 3600) is due for both frames: only the newest is shown.
  await composer.compose(0);
  const shown = await composer.compose(1);
  assertFilled(shown, { x: 0, y: 0, width: 64, height: 64 }, green, "newest due frame");
  await composer.compose(10);
  // Output is at 36000 and two intervals (7200) of lateness are allowed.
  assert.equal(composer.push("a", solid(white, 28000, 64, 64)), false, "too late");
  assert.ok(composer.push("a", solid(white, 30000, 64, 64)), "late but within the limit");
  assert.equal(composer.stats.droppedFrames, 2);
});

Deno.test("two Workers give the same frames as one, with pictures changing and repeating", async () => {
  const outputs: number[][] = [];
  for (const workers of [1, 2]) {
    using composer = new VideoComposer({
      width: 640,
      height: 360,
      frameRate: 30,
      layout: "center",
      workers,
      watermark: {
        width: 40,
        height: 20,
        x: 600,
        y: -5,
        rgba: new Uint8Array(40 * 20 * 4).fill(200),
      },
    });
    const sums: number[] = [];
    for (const id of ["a", "b", "c"]) composer.addInput(id);
    const palette = [red, green, blue, white];
    const pending: Promise<ComposedFrame>[] = [];
    for (let tick = 0; tick < 12; tick++) {
      // "a" changes every tick, "b" every third, "c" never after the first.
      composer.push("a", solid(palette[tick % 4], tick * 3000, 320, 240));
      if (tick % 3 === 0 && tick < 6) composer.push("b", solid(palette[tick / 3], tick * 3000));
      if (tick === 0) composer.push("c", solid(green, 0, 100, 100));
      if (tick === 6) composer.removeInput("b");
      pending.push(composer.compose());
    }
    for (const frame of await Promise.all(pending)) {
      sums.push(frame.data.reduce((sum, b) => sum + b, 0));
      composer.recycle(frame);
    }
    outputs.push(sums);
  }
  assert.deepEqual(outputs[1], outputs[0]);
  assert.equal(new Set(outputs[0]).size > 3, true, "the frames differ over time");
});

Deno.test("start composes on the clock and close ends the Workers it owns", async () => {
  const before = WorkerRunner.liveWorkers;
  const composer = new VideoComposer({ width: 64, height: 64, frameRate: 100, layout: "grid" });
  assert.equal(WorkerRunner.liveWorkers, before + 1);
  composer.addInput("a");
  composer.push("a", solid(red, 0, 64, 64));
  const pts: number[] = [];
  await new Promise<void>((resolve, reject) => {
    composer.start((frame) => {
      pts.push(frame.pts);
      if (pts.length === 5) resolve();
    }, reject);
  });
  composer.close();
  assert.equal(WorkerRunner.liveWorkers, before);
  for (let i = 1; i < pts.length; i++) {
    assert.ok(pts[i] > pts[i - 1] && (pts[i] - pts[i - 1]) % 900 === 0, `pts ${pts}`);
  }
});

Deno.test("a composer on a shared runner leaves the runner running", async () => {
  using runner = new WorkerRunner();
  const composer = new VideoComposer({
    width: 32,
    height: 32,
    frameRate: 30,
    layout: "grid",
    runner,
  });
  composer.addInput("a");
  composer.push("a", solid(blue, 0, 16, 16));
  await composer.compose();
  composer.close();
  const again = new VideoComposer({ width: 32, height: 32, frameRate: 30, layout: "grid", runner });
  again.addInput("a");
  const frame = await again.compose();
  assertFilled(frame, { x: 0, y: 0, width: 32, height: 32 }, background, "empty input");
  again.close();
});

Deno.test("the watermark is drawn over the inputs, clipped at the canvas edge", async () => {
  const grey = new Uint8Array(40 * 20 * 4);
  for (let i = 0; i < 40 * 20; i++) grey.set([200, 200, 200, 255], i * 4);
  using composer = new VideoComposer({
    width: 320,
    height: 180,
    frameRate: 30,
    layout: "grid",
    watermark: { rgba: grey, width: 40, height: 20, x: 300, y: -10 },
  });
  composer.addInput("a");
  composer.push("a", solid(blue, 0, 320, 180));
  const frame = await composer.compose();
  // BT.601 limited range: Y = 16 + 219 x 200 / 255 = 188, neutral chroma.
  assertFilled(frame, { x: 300, y: 0, width: 20, height: 10 }, { y: 188, u: 128, v: 128 }, "mark");
  assertFilled(frame, { x: 0, y: 10, width: 300, height: 170 }, blue, "input");
});

Deno.test("a background image fills the canvas around letterboxed inputs", async () => {
  const image = solid(green, 0, 100, 100);
  using composer = new VideoComposer({
    width: 320,
    height: 180,
    frameRate: 30,
    layout: "grid",
    backgroundImage: image,
    workers: 2,
  });
  composer.addInput("a");
  // A square picture letterboxed in the 16:9 canvas: 180x180 in the middle.
  composer.push("a", solid(red, 0, 90, 90));
  for (let tick = 0; tick < 2; tick++) {
    const frame = await composer.compose();
    assertFilled(frame, { x: 0, y: 0, width: 70, height: 180 }, green, "left bar");
    assertFilled(frame, { x: 70, y: 0, width: 180, height: 180 }, red, "input");
    assertFilled(frame, { x: 250, y: 0, width: 70, height: 180 }, green, "right bar");
  }
});

Deno.test("a picture in a SharedArrayBuffer is read in place by two composers' Workers", async () => {
  const picture = solid(green, 0, 640, 360);
  const shared = new Uint8Array(new SharedArrayBuffer(picture.data.length));
  shared.set(picture.data);
  using a = new VideoComposer({ width: 320, height: 180, frameRate: 30, layout: "grid" });
  using b = new VideoComposer({ width: 160, height: 90, frameRate: 30, layout: "grid" });
  for (const composer of [a, b]) {
    composer.addInput("cam");
    composer.push("cam", { ...picture, data: shared });
  }
  const [fa, fb] = await Promise.all([a.compose(), b.compose()]);
  assertFilled(fa, { x: 0, y: 0, width: 320, height: 180 }, green, "composer a");
  assertFilled(fb, { x: 0, y: 0, width: 160, height: 90 }, green, "composer b");
  // Not transferred: the caller's view still holds the picture.
  assert.equal(shared.length, picture.data.length);
  assert.equal(shared[0], green.y);
});

/** A pool counting the buffers taken from it and given back. */
class CountingPool extends BufferPool {
  taken = 0;
  given = 0;
  override take(bytes: number): ArrayBuffer {
    this.taken++;
    return super.take(bytes);
  }
  override give(buffer: ArrayBuffer): void {
    this.given++;
    super.give(buffer);
  }
}

Deno.test("a picture handed over moves to the Worker uncopied and its buffer comes back to the pool", async () => {
  const pool = new CountingPool();
  using composer = new VideoComposer({
    width: 640,
    height: 360,
    frameRate: 30,
    layout: "grid",
    pool,
  });
  composer.addInput("cam");
  const colors = [red, green, blue, white];
  for (const [i, color] of colors.entries()) {
    // Each picture is filled in a buffer of the pool, as a decoder does.
    const data = new Uint8Array(pool.take(i420Size(640, 360)));
    data.set(solid(color, 0).data);
    const picture = { width: 640, height: 360, data, pts: i * 3000 };
    composer.push("cam", picture, true);
    const frame = await composer.compose(i);
    assertFilled(frame, { x: 0, y: 0, width: 640, height: 360 }, color, `frame ${i}`);
    // Moved, not copied: the handed-over view is empty now.
    assert.equal(picture.data.length, 0);
    composer.recycle(frame);
  }
  // The composer took one buffer a frame (its output), none to copy a picture into, and
  // gave two back: the output recycled and the picture's own from the Worker.
  assert.equal(pool.taken, 2 * colors.length);
  assert.equal(pool.given, 2 * colors.length);
  // A frame not handed over is copied: the caller keeps it.
  const kept = solid(green, 12000);
  composer.push("cam", kept);
  assertFilled(await composer.compose(4), { x: 0, y: 0, width: 640, height: 360 }, green, "kept");
  assert.equal(kept.data[0], green.y);
  assert.equal(pool.taken, 2 * colors.length + 2);
});

/** An opaque RGBA image of one grey level; Y = 16 + 219 x level / 255 in BT.601. */
function greyImage(width: number, height: number, level = 200): Uint8Array {
  const rgba = new Uint8Array(width * height * 4);
  for (let i = 0; i < width * height; i++) rgba.set([level, level, level, 255], i * 4);
  return rgba;
}
const markGrey: YuvColor = { y: 188, u: 128, v: 128 };

const sideBySide: CustomLayout = {
  name: "side-by-side",
  regions: [{ x: 0, y: 0, width: 0.5, height: 1 }, { x: 0.5, y: 0, width: 0.5, height: 1 }],
};
const swapped: CustomLayout = {
  name: "swapped",
  regions: [{ x: 0.5, y: 0, width: 0.5, height: 1 }, { x: 0, y: 0, width: 0.5, height: 1 }],
};

Deno.test("setLayout re-lays out from the next frame; the frames keep their rate", async () => {
  using composer = new VideoComposer({ width: 320, height: 180, frameRate: 30, layout: "grid" });
  composer.addInput("a");
  composer.addInput("b");
  composer.push("a", solid(red, 0, 160, 90));
  composer.push("b", solid(green, 0, 160, 90));
  const before = await composer.compose();
  // grid of 2: 160x180 cells, the 16:9 pictures letterboxed to 160x90 at y 44.
  assertFilled(before, { x: 0, y: 44, width: 160, height: 90 }, red, "a in the left cell");
  assertFilled(before, { x: 160, y: 44, width: 160, height: 90 }, green, "b in the right cell");
  assertFilled(before, { x: 0, y: 0, width: 320, height: 44 }, background, "bar above");
  composer.setLayout({
    name: "pip",
    regions: [{ x: 0, y: 0, width: 1, height: 1 }, { x: 0.5, y: 0.5, width: 0.5, height: 0.5 }],
  });
  const after = await composer.compose();
  assert.equal(after.pts, before.pts + 3000, "no frame skipped");
  assertFilled(after, { x: 0, y: 0, width: 320, height: 90 }, red, "a fills the output");
  assertFilled(after, { x: 0, y: 90, width: 160, height: 90 }, red, "a under the corner");
  assertFilled(after, { x: 160, y: 90, width: 160, height: 90 }, green, "b in the corner");
  composer.setLayout("center");
  const center = await composer.compose();
  // center: a in the left 256x180, letterboxed to 256x144 at y 18.
  assertFilled(center, { x: 0, y: 0, width: 256, height: 18 }, background, "center: bar above a");
  assertFilled(center, { x: 0, y: 18, width: 256, height: 144 }, red, "center: a");
});

Deno.test("an input's watermark sits in its tile, moves with it and is cut at its edge", async () => {
  using composer = new VideoComposer({
    width: 320,
    height: 180,
    frameRate: 30,
    layout: sideBySide,
    workers: 2,
  });
  composer.addInput("a");
  composer.addInput("b");
  composer.push("a", solid(blue, 0, 160, 180));
  composer.push("b", solid(red, 0, 160, 180));
  composer.setInputWatermark("b", { rgba: greyImage(40, 20), width: 40, height: 20, x: 10, y: 10 });
  // Wider than what is left of a's tile: cut where b's tile starts.
  composer.setInputWatermark("a", { rgba: greyImage(40, 20), width: 40, height: 20, x: 140, y: 0 });
  for (let tick = 0; tick < 2; tick++) {
    const frame = await composer.compose();
    assertFilled(frame, { x: 170, y: 10, width: 40, height: 20 }, markGrey, "b's mark");
    assertFilled(frame, { x: 140, y: 0, width: 20, height: 20 }, markGrey, "a's mark");
    assertFilled(frame, { x: 160, y: 0, width: 10, height: 10 }, red, "b's tile past a's mark");
    assertFilled(frame, { x: 0, y: 20, width: 160, height: 160 }, blue, "a under its mark");
  }
  composer.setLayout(swapped);
  for (let tick = 0; tick < 2; tick++) {
    const frame = await composer.compose();
    assertFilled(frame, { x: 10, y: 10, width: 40, height: 20 }, markGrey, "b's mark moved");
    assertFilled(frame, { x: 300, y: 0, width: 20, height: 20 }, markGrey, "a's mark moved");
    assertFilled(frame, { x: 160, y: 0, width: 140, height: 180 }, blue, "a's tile");
    assertFilled(frame, { x: 50, y: 0, width: 110, height: 180 }, red, "b's tile right of it");
  }
  composer.setInputWatermark("b", undefined);
  const cleared = await composer.compose();
  assertFilled(cleared, { x: 0, y: 0, width: 160, height: 180 }, red, "b without its mark");
  assert.throws(() => composer.setInputWatermark("nobody", undefined), NotFoundError);
});

Deno.test("watermark images go to each Worker once, not with every frame", async () => {
  using runner = new WorkerRunner({ workers: 2 });
  const sentImages: number[][] = [];
  const run = runner.run.bind(runner);
  runner.run = (job, transfer, worker) => {
    if (job.op === "compose") {
      sentImages.push((job.watermarks ?? []).filter((w) => w.rgba).map((w) => w.id));
    }
    return run(job, transfer, worker);
  };
  using composer = new VideoComposer({
    width: 64,
    height: 64,
    frameRate: 30,
    layout: "grid",
    runner,
    watermark: { rgba: greyImage(8, 8), width: 8, height: 8, x: 0, y: 0 },
  });
  composer.addInput("a");
  composer.push("a", solid(red, 0, 64, 64));
  composer.setInputWatermark("a", { rgba: greyImage(4, 4), width: 4, height: 4, x: 40, y: 40 });
  for (let tick = 0; tick < 6; tick++) await composer.compose();
  assert.deepEqual(sentImages.map((ids) => ids.length), [2, 2, 0, 0, 0, 0]);
  composer.setInputWatermark("a", { rgba: greyImage(4, 4, 90), width: 4, height: 4, x: 8, y: 8 });
  const frames: ComposedFrame[] = [];
  for (let tick = 0; tick < 4; tick++) frames.push(await composer.compose());
  assert.deepEqual(sentImages.slice(6).map((ids) => ids.length), [1, 1, 0, 0]);
  // Y = 16 + 219 x 90 / 255 = 93: every Worker draws the new image.
  for (const frame of frames) {
    assertFilled(frame, { x: 8, y: 8, width: 4, height: 4 }, { y: 93, u: 128, v: 128 }, "new");
  }
});

Deno.test("setBackground switches between colours and an image from the next frame", async () => {
  using composer = new VideoComposer({
    width: 320,
    height: 180,
    frameRate: 30,
    layout: "grid",
    workers: 2,
  });
  composer.addInput("a");
  composer.push("a", solid(red, 0, 90, 90));
  const bars = [
    { x: 0, y: 0, width: 70, height: 180 },
    { x: 250, y: 0, width: 70, height: 180 },
  ];
  const steps: [YuvColor | RawVideoFrame, YuvColor][] = [
    [white, white],
    [solid(green, 0, 32, 18), green],
    [solid(blue, 0, 32, 18), blue],
    [background, background],
  ];
  for (const [setting, expected] of steps) {
    composer.setBackground(setting);
    for (let tick = 0; tick < 2; tick++) {
      const frame = await composer.compose();
      for (const bar of bars) assertFilled(frame, bar, expected, `bar of ${expected.y}`);
      assertFilled(frame, { x: 70, y: 0, width: 180, height: 180 }, red, "the input");
    }
  }
});

/** A picture whose luma varies with x and y (a misplaced or stale tile shows), chroma by `seed`. */
function patterned(seed: number, pts: number, w = 640, h = 360): RawVideoFrame {
  const data = new Uint8Array(i420Size(w, h));
  for (let y = 0; y < h; y++) {
    for (let x = 0; x < w; x++) data[y * w + x] = (x + 3 * y + seed * 37) & 255;
  }
  const chroma = chromaSize(w) * chromaSize(h);
  data.fill((40 + seed * 29) & 255, w * h, w * h + chroma);
  data.fill((200 - seed * 23) & 255, w * h + chroma);
  return { width: w, height: h, data, pts };
}

Deno.test("tiles without a new picture stay on the canvas: every frame is what a whole redraw gives", async () => {
  // The composer under test keeps its Worker's canvas from frame to frame; each reference
  // frame comes from a new composer (a new scene, drawn whole) shown the same pictures.
  using runner = new WorkerRunner();
  using composer = new VideoComposer({ width, height, frameRate: 30, layout: "grid" });
  const ids = ["a", "b", "c"];
  for (const id of ids) composer.addInput(id);
  const current = new Map<string, RawVideoFrame>();
  let seed = 0;
  const show = (id: string, tick: number, w = 640, h = 360) => {
    const picture = patterned(++seed, tick * 3000, w, h);
    current.set(id, picture);
    composer.push(id, { ...picture, data: picture.data.slice() });
  };
  for (let tick = 0; tick < 12; tick++) {
    // "a" changes every tick, "b" every third (at 5 it turns 4:3, letterboxed in its
    // tile, and at 7 16:9 again), "c" never after the first; "c" leaves at 9.
    show("a", tick);
    if (tick % 3 === 0 && tick !== 6) show("b", tick);
    if (tick === 5) show("b", tick, 320, 240);
    if (tick === 7) show("b", tick);
    if (tick === 0) show("c", tick);
    if (tick === 9) {
      composer.removeInput("c");
      current.delete("c");
    }
    const frame = await composer.compose(tick);
    const reference = new VideoComposer({ width, height, frameRate: 30, layout: "grid", runner });
    for (const [id, picture] of current) {
      reference.addInput(id);
      reference.push(id, { ...picture, pts: 0 });
    }
    const whole = await reference.compose();
    reference.close();
    const at = frame.data.findIndex((byte, i) => byte !== whole.data[i]);
    assert.equal(at, -1, `tick ${tick}: byte ${at} differs from the frame drawn whole`);
    // Pixel values inside each tile are those of its input's current picture.
    const rects = computeLayout(
      "grid",
      [...current.values()].map((p) => ({ width: p.width, height: p.height })),
      { width, height },
    );
    [...current.values()].forEach((picture, i) => {
      const rect = rects[i];
      if (picture.width !== rect.width || picture.height !== rect.height) return;
      for (const [dx, dy] of [[0, 0], [101, 57], [rect.width - 1, rect.height - 1]]) {
        assert.equal(
          pixel(frame, rect.x + dx, rect.y + dy).y,
          picture.data[dy * picture.width + dx],
          `tick ${tick}: input ${i} at ${dx},${dy} of its tile`,
        );
      }
    });
    composer.recycle(frame);
  }
  // Partial frames happened (ticks where "b" and "c" kept their pictures), and fewer tiles
  // were drawn than a whole redraw of every frame would draw.
  assert.ok(composer.stats.partialFrames >= 5, `partial frames: ${composer.stats.partialFrames}`);
  assert.ok(composer.stats.tilesDrawn < 3 * 9 + 2 * 3, `tiles drawn: ${composer.stats.tilesDrawn}`);
});
