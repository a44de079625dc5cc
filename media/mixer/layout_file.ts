/**
 * The JSON form of a custom mixer layout, one layout per `*.json` file of a layout folder
 * (see layout_dir.ts):
 *
 * ```json
 * {
 *   "name": "two-up",
 *   "regions": [
 *     { "x": 0, "y": 0, "width": 0.5, "height": 1 },
 *     { "x": 0.5, "y": 0, "width": 0.5, "height": 1 }
 *   ],
 *   "byCount": {
 *     "3": [
 *       { "x": 0, "y": 0, "width": 1, "height": 0.5 },
 *       { "x": 0, "y": 0.5, "width": 0.5, "height": 0.5 },
 *       { "x": 0.5, "y": 0.5, "width": 0.5, "height": 0.5 }
 *     ]
 *   }
 * }
 * ```
 *
 * - `name` (optional): how the mixer names the layout (`mixerLayoutClass`); default the file
 *   name without `.json`.
 * - `regions` (optional): input i goes to `regions[i]`, for any input count up to their
 *   number.
 * - `byCount` (optional): for exactly n inputs, the n regions under the key "n"; preferred
 *   over `regions`. A count that neither covers falls back to the `grid` layout.
 * - A region is `x`, `y`, `width`, `height` in fractions (0 to 1) of the output's width and
 *   height, top-left origin; it must lie inside the output and not be empty. Regions may
 *   overlap: later ones are drawn over earlier ones. Pictures keep their aspect ratio inside
 *   their region (letterboxed by default).
 *
 * At least one region must be given; other keys are refused, so a typo does not pass
 * unnoticed.
 */

import type { CustomLayout, Region } from "./layout.ts";

/** Longest layout name accepted, in characters. */
const maxNameLength = 100;
/** Most regions in one list: more tiles than any mixer output can show legibly. */
const maxRegionsPerList = 64;
/** Slack for fractions written with rounding, e.g. three thirds adding up to 1.0000001. */
const fractionEpsilon = 1e-6;

/** A layout file that does not parse or validate; the message names the offending key. */
export class LayoutFileError extends Error {
  override name = "LayoutFileError";
}

function isObject(value: unknown): value is Record<string, unknown> {
  return typeof value === "object" && value !== null && !Array.isArray(value);
}

function checkKeys(value: Record<string, unknown>, allowed: string[], where: string): void {
  for (const key of Object.keys(value)) {
    if (!allowed.includes(key)) {
      throw new LayoutFileError(`${where}: unknown key "${key}" (allowed: ${allowed.join(", ")})`);
    }
  }
}

function parseRegion(value: unknown, where: string): Region {
  if (!isObject(value)) throw new LayoutFileError(`${where} must be an object`);
  checkKeys(value, ["x", "y", "width", "height"], where);
  const fraction = (key: string): number => {
    const n = value[key];
    if (typeof n !== "number" || !Number.isFinite(n) || n < 0 || n > 1) {
      throw new LayoutFileError(`${where}.${key} must be a number from 0 to 1`);
    }
    return n;
  };
  const region = {
    x: fraction("x"),
    y: fraction("y"),
    width: fraction("width"),
    height: fraction("height"),
  };
  if (region.width === 0 || region.height === 0) {
    throw new LayoutFileError(`${where} is empty (width and height must be above 0)`);
  }
  if (region.x + region.width > 1 + fractionEpsilon) {
    throw new LayoutFileError(`${where}: x + width is above 1 (outside the output)`);
  }
  if (region.y + region.height > 1 + fractionEpsilon) {
    throw new LayoutFileError(`${where}: y + height is above 1 (outside the output)`);
  }
  return region;
}

function parseRegions(value: unknown, where: string): Region[] {
  if (!Array.isArray(value) || value.length === 0 || value.length > maxRegionsPerList) {
    throw new LayoutFileError(`${where} must be a list of 1 to ${maxRegionsPerList} regions`);
  }
  return value.map((region, i) => parseRegion(region, `${where}[${i}]`));
}

/**
 * Parses and validates the text of a layout file named `fileName` (its name without `.json`
 * is the default layout name). Throws a `LayoutFileError` naming what is wrong.
 */
export function parseLayoutFile(text: string, fileName: string): CustomLayout {
  let json: unknown;
  try {
    json = JSON.parse(text);
  } catch (error) {
    throw new LayoutFileError(`not JSON: ${error instanceof Error ? error.message : error}`);
  }
  if (!isObject(json)) throw new LayoutFileError("the layout must be a JSON object");
  checkKeys(json, ["name", "regions", "byCount"], "layout");
  const name = json.name ?? fileName.replace(/\.json$/i, "");
  if (typeof name !== "string" || name.trim() === "" || name.length > maxNameLength) {
    throw new LayoutFileError(`name must be a non-empty string of at most ${maxNameLength} chars`);
  }
  const layout: CustomLayout = { name };
  if (json.regions !== undefined) layout.regions = parseRegions(json.regions, "regions");
  if (json.byCount !== undefined) {
    if (!isObject(json.byCount)) throw new LayoutFileError("byCount must be an object");
    const byCount: Record<number, Region[]> = {};
    for (const [key, list] of Object.entries(json.byCount)) {
      const count = Number(key);
      if (!/^[1-9][0-9]*$/.test(key) || count > maxRegionsPerList) {
        throw new LayoutFileError(
          `byCount: key "${key}" must be an input count from 1 to ${maxRegionsPerList}`,
        );
      }
      const regions = parseRegions(list, `byCount.${key}`);
      if (regions.length !== count) {
        throw new LayoutFileError(`byCount.${key} has ${regions.length} regions, not ${count}`);
      }
      byCount[count] = regions;
    }
    layout.byCount = byCount;
  }
  if (!layout.regions && Object.keys(layout.byCount ?? {}).length === 0) {
    throw new LayoutFileError("the layout has no regions (give regions or byCount)");
  }
  return layout;
}
