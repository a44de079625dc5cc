/**
 * How a picture fills its rectangle on the canvas: the source window to read and the target
 * window to write, both with even origins so chroma stays aligned.
 */

import type { Rect } from "./i420.ts";

/**
 * - `letterbox`: the whole picture, as large as fits; the rest of the rectangle keeps the
 *   background;
 * - `crop`: the rectangle filled, the picture's overflowing edges cut off;
 * - `stretch`: the whole picture into the whole rectangle, shape not kept.
 */
export type FitMode = "letterbox" | "crop" | "stretch";

/** The source window (`crop`) of the picture and where it goes on the canvas (`target`). */
export interface Placement {
  crop: Rect;
  target: Rect;
}

function evenFloor(n: number): number {
  return Math.floor(n / 2) * 2;
}

/** Places a width x height picture in `rect` (inside the canvas) with `mode`. */
export function fitPicture(width: number, height: number, rect: Rect, mode: FitMode): Placement {
  const whole = { x: 0, y: 0, width, height };
  if (mode === "stretch") return { crop: whole, target: rect };
  const scale = mode === "letterbox"
    ? Math.min(rect.width / width, rect.height / height)
    : Math.max(rect.width / width, rect.height / height);
  if (mode === "letterbox") {
    const w = Math.min(rect.width, Math.max(1, Math.round(width * scale)));
    const h = Math.min(rect.height, Math.max(1, Math.round(height * scale)));
    const x = rect.x + evenFloor((rect.width - w) / 2);
    const y = rect.y + evenFloor((rect.height - h) / 2);
    return { crop: whole, target: { x, y, width: w, height: h } };
  }
  const w = Math.min(width, Math.max(1, Math.round(rect.width / scale)));
  const h = Math.min(height, Math.max(1, Math.round(rect.height / scale)));
  const x = evenFloor((width - w) / 2);
  const y = evenFloor((height - h) / 2);
  return { crop: { x, y, width: w, height: h }, target: rect };
}
