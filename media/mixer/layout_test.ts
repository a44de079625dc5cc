import assert from "node:assert/strict";
import { fitPicture } from "./fit.ts";
import type { Rect } from "./i420.ts";
import {
  computeLayout,
  type CustomLayout,
  type LayoutInput,
  layoutNames,
  resolveLayoutName,
} from "./layout.ts";

const hd = { width: 1280, height: 720 };
const camera: LayoutInput = { width: 640, height: 360 };

function overlaps(a: Rect, b: Rect): boolean {
  return a.x < b.x + b.width && b.x < a.x + a.width && a.y < b.y + b.height &&
    b.y < a.y + a.height;
}

for (const layout of layoutNames) {
  Deno.test(`${layout}: rectangles are even, inside the output and disjoint`, () => {
    for (let count = 0; count <= 9; count++) {
      const rects = computeLayout(layout, Array(count).fill(camera), hd);
      assert.equal(rects.length, count);
      rects.forEach((r, i) => {
        for (const v of [r.x, r.y, r.width, r.height]) assert.equal(v % 2, 0, `${count}:${i}`);
        assert.ok(r.width > 0 && r.height > 0);
        assert.ok(r.x >= 0 && r.y >= 0 && r.x + r.width <= hd.width && r.y + r.height <= hd.height);
        for (let j = 0; j < i; j++) assert.ok(!overlaps(r, rects[j]), `${count}: ${i} and ${j}`);
      });
    }
  });
}

Deno.test("grid of 3 into 1280x720: two on top, one centred below", () => {
  assert.deepEqual(computeLayout("grid", [camera, camera, camera], hd), [
    { x: 0, y: 0, width: 640, height: 360 },
    { x: 640, y: 0, width: 640, height: 360 },
    { x: 320, y: 360, width: 640, height: 360 },
  ]);
});

Deno.test("a lone input fills the output in every layout", () => {
  for (const layout of layoutNames) {
    assert.deepEqual(computeLayout(layout, [camera], hd), [{ x: 0, y: 0, ...hd }]);
  }
});

Deno.test("center: the first input is the largest, the others share the right strip", () => {
  const rects = computeLayout("center", Array(4).fill(camera), hd);
  assert.deepEqual(rects[0], { x: 0, y: 0, width: 1024, height: 720 });
  for (const r of rects.slice(1)) {
    assert.equal(r.x, 1024);
    assert.equal(r.width, 256);
  }
});

Deno.test("desktop: the screen share takes the main area wherever it is in the list", () => {
  const inputs = [camera, { width: 1920, height: 1080, screen: true }, camera];
  const rects = computeLayout("desktop", inputs, hd);
  assert.deepEqual(rects[1], { x: 0, y: 0, width: 1280, height: 576 });
  for (const r of [rects[0], rects[2]]) assert.equal(r.y, 576);
  assert.ok(rects[0].x < rects[2].x, "cameras keep their order");
});

Deno.test("fit: letterbox keeps the shape inside, crop fills and cuts, stretch fills", () => {
  const cell = { x: 100, y: 50, width: 400, height: 400 };
  assert.deepEqual(fitPicture(640, 360, cell, "letterbox"), {
    crop: { x: 0, y: 0, width: 640, height: 360 },
    target: { x: 100, y: 136, width: 400, height: 225 },
  });
  assert.deepEqual(fitPicture(640, 360, cell, "crop"), {
    crop: { x: 140, y: 0, width: 360, height: 360 },
    target: cell,
  });
  assert.deepEqual(fitPicture(1, 1, cell, "stretch").target, cell);
  assert.deepEqual(fitPicture(1, 1, cell, "crop").crop, { x: 0, y: 0, width: 1, height: 1 });
});

Deno.test("resolveLayoutName: our names and WCS class names, full or simple, any case", () => {
  const cases: [string, string | undefined][] = [
    ["grid", "grid"],
    ["Center", "center"],
    ["DESKTOP", "desktop"],
    ["com.flashphoner.mixerlayout.TestLayout", "center"],
    ["com.flashphoner.mixerlayout.CenterNoPaddingGridLayout", "grid"],
    ["com.flashphoner.media.mixer.video.presentation.GridLayout", "grid"],
    ["centernopaddinggridlayout", "grid"],
    ["DesktopMixerLayout", "desktop"],
    [" GridLayout ", "grid"],
    ["com.example.UnknownLayout", undefined],
    ["", undefined],
    ["toString", undefined],
    ["constructor", undefined],
  ];
  for (const [value, expected] of cases) assert.equal(resolveLayoutName(value), expected, value);
});

const twoUp: CustomLayout = {
  name: "two-up",
  regions: [
    { x: 0, y: 0, width: 0.5, height: 1 },
    { x: 0.5, y: 0, width: 0.5, height: 1 },
    { x: 0.75, y: 0.75, width: 0.25, height: 0.25 },
  ],
  byCount: { 1: [{ x: 0.25, y: 0.25, width: 0.5, height: 0.5 }] },
};

Deno.test("a custom layout places inputs in its regions, byCount first, in pixels", () => {
  assert.deepEqual(computeLayout(twoUp, [camera, camera], hd), [
    { x: 0, y: 0, width: 640, height: 720 },
    { x: 640, y: 0, width: 640, height: 720 },
  ]);
  assert.deepEqual(computeLayout(twoUp, [camera], hd), [
    { x: 320, y: 180, width: 640, height: 360 },
  ]);
  // Three inputs: the overlapping third region is drawn over the second (picture in picture).
  assert.deepEqual(computeLayout(twoUp, Array(3).fill(camera), hd)[2], {
    x: 960,
    y: 540,
    width: 320,
    height: 180,
  });
  assert.deepEqual(computeLayout(twoUp, [], hd), []);
});

Deno.test("a custom layout without regions for a count falls back to grid", () => {
  const inputs = Array(5).fill(camera);
  assert.deepEqual(computeLayout(twoUp, inputs, hd), computeLayout("grid", inputs, hd));
});

Deno.test("custom regions snap to even pixels and stay inside an odd-sized output", () => {
  const thirds: CustomLayout = {
    name: "thirds",
    regions: [0, 1, 2].map((i) => ({ x: i / 3, y: 0, width: 1 / 3, height: 1 })),
  };
  const output = { width: 641, height: 361 };
  const rects = computeLayout(thirds, Array(3).fill(camera), output);
  for (const r of rects) {
    for (const v of [r.x, r.y, r.width, r.height]) assert.equal(v % 2, 0, JSON.stringify(r));
    assert.ok(r.x + r.width <= output.width && r.y + r.height <= output.height);
  }
  assert.equal(rects[0].x + rects[0].width, rects[1].x, "neighbours share an edge");
});
