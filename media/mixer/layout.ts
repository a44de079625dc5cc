/**
 * Layout calculator of the mixer: where each input goes on the output canvas, by layout
 * name or custom layout (see layout_file.ts for the JSON form). Pure geometry; the composer
 * scales each picture into its rectangle (see fit.ts). Rectangles have even coordinates and
 * sizes, so they fall on whole I420 chroma samples.
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

/**
 * WCS layout class names (`mixerLayoutClass`, `mixer_layout_class`), lower-case and without
 * their Java package, and the layout each shows. WCS's grid has padding and its
 * CenterNoPaddingGridLayout none; ours has none, so both are `grid`. TestLayout is WCS's
 * sample custom class; it shows `center` here.
 */
const wcsLayoutClasses: Record<string, LayoutName> = {
  gridlayout: "grid",
  centernopaddinggridlayout: "grid",
  nopaddinggridlayout: "grid",
  centerlayout: "center",
  testlayout: "center",
  desktoplayout: "desktop",
  desktopmixerlayout: "desktop",
};

/**
 * The layout a `mixerLayoutClass` value names: one of our names or a WCS class name, full
 * (`com.flashphoner.mixerlayout.GridLayout`) or simple (`GridLayout`), in any case; undefined
 * for anything else (a custom layout's name is looked up by the caller).
 */
export function resolveLayoutName(value: string): LayoutName | undefined {
  const simple = value.trim().slice(value.trim().lastIndexOf(".") + 1).toLowerCase();
  const ours = layoutNames.find((name) => name === simple);
  return ours ?? (Object.hasOwn(wcsLayoutClasses, simple) ? wcsLayoutClasses[simple] : undefined);
}

/** A rectangle in fractions (0 to 1) of the output's width and height. */
export interface Region {
  x: number;
  y: number;
  width: number;
  height: number;
}

/**
 * A layout given as regions (usually loaded from a JSON file, see layout_file.ts). For n
 * inputs it uses `byCount[n]` when present, else the first n of `regions` when there are
 * that many, else the `grid` layout. Input i goes to region i; later regions are drawn over
 * earlier ones where they overlap (picture in picture).
 */
export interface CustomLayout {
  name: string;
  /** Regions for any input count up to their number. */
  regions?: Region[];
  /** Regions for exactly n inputs, keyed by n; each list has n regions. */
  byCount?: Record<number, Region[]>;
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

/** The regions of `layout` for `count` inputs, or undefined when it has none for them. */
function regionsFor(layout: CustomLayout, count: number): Region[] | undefined {
  const exact = layout.byCount?.[count];
  if (exact?.length === count) return exact;
  if (layout.regions && layout.regions.length >= count) return layout.regions.slice(0, count);
  return undefined;
}

/** A region in pixels of `output`, snapped to even edges and kept inside the output. */
function regionBox(region: Region, output: Size): Rect {
  const r = box(
    region.x * output.width,
    region.y * output.height,
    region.width * output.width,
    region.height * output.height,
  );
  const x = Math.min(r.x, floorEven(output.width) - 2);
  const y = Math.min(r.y, floorEven(output.height) - 2);
  return {
    x,
    y,
    width: Math.min(r.width, floorEven(output.width) - x),
    height: Math.min(r.height, floorEven(output.height) - y),
  };
}

/**
 * The rectangle of each input, in input order, for `layout` on an output of `output` pixels.
 * No input gives no rectangle; a lone input fills the output in every named layout (a custom
 * layout places it in its region).
 */
export function computeLayout(
  layout: LayoutName | CustomLayout,
  inputs: LayoutInput[],
  output: Size,
): Rect[] {
  const all: Rect = { x: 0, y: 0, width: output.width, height: output.height };
  if (typeof layout === "object") {
    const regions = inputs.length === 0 ? [] : regionsFor(layout, inputs.length);
    if (regions) return regions.map((region) => regionBox(region, output));
    layout = "grid";
  }
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
