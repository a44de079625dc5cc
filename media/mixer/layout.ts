/**
 * Layout calculator of the mixer: where each input goes on the output canvas, by layout
 * name. Pure geometry; the composer scales each picture into its rectangle (see fit.ts).
 * Rectangles have even coordinates and sizes, so they fall on whole I420 chroma samples.
 */

import type { Rect } from "./i420.ts";

/** Layouts the REST mixer can name. */
export const layoutNames = ["grid", "center", "desktop"] as const;

/**
 * - `grid`: equal cells, rows x columns as square as possible, the last row centred;
 * - `center`: the first input large on the left, the others in a strip on the right;
 * - `desktop`: the screen share (the first input marked `screen`, else the first) large on
 *   top, the cameras in a strip along the bottom.
 */
export type LayoutName = typeof layoutNames[number];

/** A width and a height in pixels. */
export interface Size {
  width: number;
  height: number;
}

/** One input of a layout. */
export interface LayoutInput extends Size {
  /** True for a screen share, which `desktop` puts in the main area. */
  screen?: boolean;
}

/** Share of the output width (center) or height (desktop) that the strip takes. */
const stripFraction = 0.2;
/** Picture shape assumed for strip tiles: 16:9. */
const tileAspect = 16 / 9;

function floorEven(n: number): number {
  return Math.floor(n / 2) * 2;
}

/** A rectangle snapped to even edges; neighbours that share an edge stay gapless. */
function box(x: number, y: number, width: number, height: number): Rect {
  const left = floorEven(x);
  const top = floorEven(y);
  return {
    x: left,
    y: top,
    width: Math.max(2, floorEven(x + width) - left),
    height: Math.max(2, floorEven(y + height) - top),
  };
}

function grid(count: number, area: Rect): Rect[] {
  const columns = Math.ceil(Math.sqrt(count));
  const rows = Math.ceil(count / columns);
  const cellW = area.width / columns;
  const cellH = area.height / rows;
  const rects: Rect[] = [];
  for (let i = 0; i < count; i++) {
    const row = Math.floor(i / columns);
    const inRow = Math.min(columns, count - row * columns);
    const shift = (columns - inRow) * cellW / 2;
    const column = i - row * columns;
    rects.push(box(area.x + shift + column * cellW, area.y + row * cellH, cellW, cellH));
  }
  return rects;
}

/** Tiles of a strip, along x (`horizontal`) or y, each at most tileAspect, centred. */
function strip(count: number, area: Rect, horizontal: boolean): Rect[] {
  const rects: Rect[] = [];
  if (horizontal) {
    const tileW = Math.min(area.width / count, area.height * tileAspect);
    const start = area.x + (area.width - tileW * count) / 2;
    for (let i = 0; i < count; i++) rects.push(box(start + i * tileW, area.y, tileW, area.height));
  } else {
    const tileH = Math.min(area.height / count, area.width / tileAspect);
    const start = area.y + (area.height - tileH * count) / 2;
    for (let i = 0; i < count; i++) rects.push(box(area.x, start + i * tileH, area.width, tileH));
  }
  return rects;
}

/**
 * The rectangle of each input, in input order, for `layout` on an output of `output` pixels.
 * No input gives no rectangle; a lone input fills the output in every layout.
 */
export function computeLayout(layout: LayoutName, inputs: LayoutInput[], output: Size): Rect[] {
  const all: Rect = { x: 0, y: 0, width: output.width, height: output.height };
  if (inputs.length <= 1) {
    return inputs.length === 0 ? [] : [box(0, 0, output.width, output.height)];
  }
  switch (layout) {
    case "grid":
      return grid(inputs.length, all);
    case "center": {
      const stripW = output.width * stripFraction;
      const main = box(0, 0, output.width - stripW, output.height);
      const side = { x: main.width, y: 0, width: output.width - main.width, height: output.height };
      return [main, ...strip(inputs.length - 1, side, false)];
    }
    case "desktop": {
      const screenIndex = Math.max(0, inputs.findIndex((input) => input.screen));
      const stripH = output.height * stripFraction;
      const main = box(0, 0, output.width, output.height - stripH);
      const bottom = {
        x: 0,
        y: main.height,
        width: output.width,
        height: output.height - main.height,
      };
      const cameras = strip(inputs.length - 1, bottom, true);
      return inputs.map((_, i) => i === screenIndex ? main : cameras[i < screenIndex ? i : i - 1]);
    }
  }
}
