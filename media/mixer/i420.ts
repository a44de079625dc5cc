/**
 * Geometry of I420 (YUV 4:2:0, 8-bit) frames as the kernels store them: three tightly packed
 * planes, Y (width x height) then U and V (ceil(width / 2) x ceil(height / 2) each).
 */

/** A rectangle in pixels. */
export interface Rect {
  x: number;
  y: number;
  width: number;
  height: number;
}

/** A colour in limited-range YUV, each component 0..255. */
export interface YuvColor {
  y: number;
  u: number;
  v: number;
}

/** RGB to YUV matrix: ITU-R BT.601 or BT.709, both limited range (Y 16..235). */
export type ColorMatrix = 601 | 709;

/** Black in limited-range YUV. */
export const black: YuvColor = { y: 16, u: 128, v: 128 };

/** Samples of a chroma row or column for `lumaSize` luma samples. */
export function chromaSize(lumaSize: number): number {
  return (lumaSize + 1) >> 1;
}

/** Bytes of an I420 frame of width x height pixels. */
export function i420Size(width: number, height: number): number {
  return width * height + 2 * chromaSize(width) * chromaSize(height);
}

/**
 * Bytes of a prepared overlay (Y, alpha, U, V, chroma alpha) of width x height pixels, the
 * layout `rgbaToOverlay` writes and `blendOverlay` reads.
 */
export function overlaySize(width: number, height: number): number {
  return 2 * width * height + 3 * chromaSize(width) * chromaSize(height);
}

/** True when `inner` lies wholly inside a width x height frame and is not empty. */
export function rectInside(inner: Rect, width: number, height: number): boolean {
  return Number.isInteger(inner.x) && Number.isInteger(inner.y) &&
    Number.isInteger(inner.width) && Number.isInteger(inner.height) &&
    inner.x >= 0 && inner.y >= 0 && inner.width > 0 && inner.height > 0 &&
    inner.x + inner.width <= width && inner.y + inner.height <= height;
}
