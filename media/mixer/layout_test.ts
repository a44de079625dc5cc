import assert from "node:assert/strict";
import { fitPicture } from "./fit.ts";
import type { Rect } from "./i420.ts";
import { computeLayout, type LayoutInput, layoutNames } from "./layout.ts";

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
