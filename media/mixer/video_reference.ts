/**
 * Plain TypeScript references of the video kernels, pixel by pixel with the same fixed-point
 * arithmetic, so the tests can demand identical output and the benchmark has a baseline.
 * Frames are I420 byte arrays (see i420.ts); RGBA images are width x height x 4 bytes.
 */

import { chromaSize, type ColorMatrix, type Rect, type YuvColor } from "./i420.ts";

const weightOne = 4096;

const toYuv: Record<ColorMatrix, number[]> = {
  601: [1052, 2065, 401, -607, -1192, 1799, 1799, -1506, -293],
  709: [748, 2516, 254, -412, -1387, 1799, 1799, -1634, -165],
};
const toRgb: Record<ColorMatrix, number[]> = {
  601: [4769, 6537, 1605, 3330, 8263],
  709: [4769, 7343, 873, 2183, 8652],
};

interface Taps {
  first: number;
  weights: number[];
}

/** Area weights when shrinking, bilinear when growing; Q12, summing to exactly 4096. */
function taps(srcLen: number, dstLen: number, i: number): Taps {
  const ratio = srcLen / dstLen;
  const weights: number[] = [];
  let first: number;
  if (dstLen < srcLen) {
    const a = i * ratio;
    const b = (i + 1) * ratio;
    first = Math.floor(a);
    const last = Math.min(Math.ceil(b), srcLen) - 1;
    for (let k = first; k <= last; k++) {
      const covered = Math.min(b, k + 1) - Math.max(a, k);
      weights.push(Math.floor(covered / ratio * weightOne + 0.5));
    }
  } else {
    const s = Math.min(Math.max((i + 0.5) * ratio - 0.5, 0), srcLen - 1);
    first = Math.floor(s);
    if (first + 1 >= srcLen) weights.push(weightOne);
    else {
      const w1 = Math.floor((s - first) * weightOne + 0.5);
      weights.push(weightOne - w1, w1);
    }
  }
  let largest = 0;
  weights.forEach((w, k) => {
    if (w > weights[largest]) largest = k;
  });
  weights[largest] += weightOne - weights.reduce((sum, w) => sum + w, 0);
  return { first, weights };
}

function planes(frame: Uint8Array, width: number, height: number): Uint8Array[] {
  const luma = width * height;
  const chroma = chromaSize(width) * chromaSize(height);
  return [
    frame.subarray(0, luma),
    frame.subarray(luma, luma + chroma),
    frame.subarray(luma + chroma, luma + 2 * chroma),
  ];
}

function chromaRect(r: Rect): Rect {
  const x = r.x >> 1;
  const y = r.y >> 1;
  return {
    x,
    y,
    width: chromaSize(r.x + r.width) - x,
    height: chromaSize(r.y + r.height) - y,
  };
}

function scalePlane(
  src: Uint8Array,
  srcStride: number,
  crop: Rect,
  dst: Uint8Array,
  dstStride: number,
  rect: Rect,
): void {
  const row = new Array<number>(crop.width);
  const columns = Array.from({ length: rect.width }, (_, i) => taps(crop.width, rect.width, i));
  for (let j = 0; j < rect.height; j++) {
    const ty = taps(crop.height, rect.height, j);
    for (let x = 0; x < crop.width; x++) {
      let sum = 8;
      ty.weights.forEach((w, t) => {
        sum += w * src[(crop.y + ty.first + t) * srcStride + crop.x + x];
      });
      row[x] = sum >> 4;
    }
    for (let i = 0; i < rect.width; i++) {
      const tx = columns[i];
      let sum = 1 << 19;
      tx.weights.forEach((w, t) => {
        sum += w * row[tx.first + t];
      });
      dst[(rect.y + j) * dstStride + rect.x + i] = sum >> 20;
    }
  }
}

/** Reference of `VideoKernels.scale`. */
export function scaleReference(
  src: Uint8Array,
  srcWidth: number,
  srcHeight: number,
  crop: Rect,
  dst: Uint8Array,
  dstWidth: number,
  dstHeight: number,
  rect: Rect,
): void {
  const s = planes(src, srcWidth, srcHeight);
  const d = planes(dst, dstWidth, dstHeight);
  scalePlane(s[0], srcWidth, crop, d[0], dstWidth, rect);
  for (const p of [1, 2]) {
    scalePlane(
      s[p],
      chromaSize(srcWidth),
      chromaRect(crop),
      d[p],
      chromaSize(dstWidth),
      chromaRect(rect),
    );
  }
}

/** Reference of `VideoKernels.fill`. */
export function fillReference(
  dst: Uint8Array,
  width: number,
  height: number,
  color: YuvColor,
  rect: Rect,
): void {
  const [y, u, v] = planes(dst, width, height);
  for (let j = rect.y; j < rect.y + rect.height; j++) {
    y.fill(color.y, j * width + rect.x, j * width + rect.x + rect.width);
  }
  const c = chromaRect(rect);
  const cw = chromaSize(width);
  for (let j = c.y; j < c.y + c.height; j++) {
    u.fill(color.u, j * cw + c.x, j * cw + c.x + c.width);
    v.fill(color.v, j * cw + c.x, j * cw + c.x + c.width);
  }
}

function luma(m: number[], r: number, g: number, b: number): number {
  return ((m[0] * r + m[1] * g + m[2] * b + 2048) >> 12) + 16;
}

function chromaPair(m: number[], r: number, g: number, b: number): [number, number] {
  return [
    ((m[3] * r + m[4] * g + m[5] * b + 8192) >> 14) + 128,
    ((m[6] * r + m[7] * g + m[8] * b + 8192) >> 14) + 128,
  ];
}

/** The 2x2 block of chroma sample (cx, cy) as pixel indices, edges repeated. */
function block(width: number, height: number, cx: number, cy: number): number[] {
  const x0 = cx * 2;
  const y0 = cy * 2;
  const x1 = Math.min(x0 + 1, width - 1);
  const y1 = Math.min(y0 + 1, height - 1);
  return [y0 * width + x0, y0 * width + x1, y1 * width + x0, y1 * width + x1];
}

/** Reference of `VideoKernels.rgbaToI420`. */
export function rgbaToI420Reference(
  rgba: Uint8Array,
  width: number,
  height: number,
  dst: Uint8Array,
  matrix: ColorMatrix,
): void {
  const m = toYuv[matrix];
  const [y, u, v] = planes(dst, width, height);
  for (let i = 0; i < width * height; i++) {
    y[i] = luma(m, rgba[i * 4], rgba[i * 4 + 1], rgba[i * 4 + 2]);
  }
  const cw = chromaSize(width);
  for (let cy = 0; cy < chromaSize(height); cy++) {
    for (let cx = 0; cx < cw; cx++) {
      let r = 0, g = 0, b = 0;
      for (const p of block(width, height, cx, cy)) {
        r += rgba[p * 4];
        g += rgba[p * 4 + 1];
        b += rgba[p * 4 + 2];
      }
      [u[cy * cw + cx], v[cy * cw + cx]] = chromaPair(m, r, g, b);
    }
  }
}

/** Reference of `VideoKernels.prepareOverlay`: Y, A, U, V, chroma alpha. */
export function rgbaToOverlayReference(
  rgba: Uint8Array,
  width: number,
  height: number,
  dst: Uint8Array,
  matrix: ColorMatrix,
): void {
  const m = toYuv[matrix];
  const lumaBytes = width * height;
  const chroma = chromaSize(width) * chromaSize(height);
  for (let i = 0; i < lumaBytes; i++) {
    dst[i] = luma(m, rgba[i * 4], rgba[i * 4 + 1], rgba[i * 4 + 2]);
    dst[lumaBytes + i] = rgba[i * 4 + 3];
  }
  const cw = chromaSize(width);
  for (let cy = 0; cy < chromaSize(height); cy++) {
    for (let cx = 0; cx < cw; cx++) {
      let r = 0, g = 0, b = 0, a = 0;
      for (const p of block(width, height, cx, cy)) {
        const alpha = rgba[p * 4 + 3];
        r += rgba[p * 4] * alpha;
        g += rgba[p * 4 + 1] * alpha;
        b += rgba[p * 4 + 2] * alpha;
        a += alpha;
      }
      const at = cy * cw + cx;
      dst[2 * lumaBytes + 2 * chroma + at] = (a + 2) >> 2;
      const [cu, cv] = a === 0 ? [128, 128] : chromaPair(
        m,
        Math.floor((r * 4 + (a >> 1)) / a),
        Math.floor((g * 4 + (a >> 1)) / a),
        Math.floor((b * 4 + (a >> 1)) / a),
      );
      dst[2 * lumaBytes + at] = cu;
      dst[2 * lumaBytes + chroma + at] = cv;
    }
  }
}

/** Blends inside the window [left, right) x [top, bottom) of the plane only. */
function blendPlane(
  dst: Uint8Array,
  dstW: number,
  src: Uint8Array,
  alpha: Uint8Array,
  srcW: number,
  srcH: number,
  x: number,
  y: number,
  [left, top, right, bottom]: number[],
): void {
  for (let j = Math.max(y, top); j < Math.min(y + srcH, bottom); j++) {
    for (let i = Math.max(x, left); i < Math.min(x + srcW, right); i++) {
      const s = (j - y) * srcW + (i - x);
      const a = alpha[s];
      const d = j * dstW + i;
      dst[d] = Math.round((dst[d] * (255 - a) + src[s] * a) / 255);
    }
  }
}

/** Reference of `VideoKernels.blend`; `clip` defaults to the whole frame. */
export function blendReference(
  dst: Uint8Array,
  width: number,
  height: number,
  overlay: Uint8Array,
  overlayWidth: number,
  overlayHeight: number,
  x: number,
  y: number,
  clip: Rect = { x: 0, y: 0, width, height },
): void {
  const d = planes(dst, width, height);
  const left = Math.max(clip.x, 0);
  const top = Math.max(clip.y, 0);
  const right = Math.min(clip.x + clip.width, width);
  const bottom = Math.min(clip.y + clip.height, height);
  if (left >= right || top >= bottom) return;
  const lumaWindow = [left, top, right, bottom];
  const chromaWindow = [left >> 1, top >> 1, chromaSize(right), chromaSize(bottom)];
  const lumaBytes = overlayWidth * overlayHeight;
  const cw = chromaSize(overlayWidth);
  const ch = chromaSize(overlayHeight);
  const chroma = cw * ch;
  const at = (k: number, n: number) => overlay.subarray(k, k + n);
  const [luma, lumaAlpha] = [at(0, lumaBytes), at(lumaBytes, lumaBytes)];
  blendPlane(d[0], width, luma, lumaAlpha, overlayWidth, overlayHeight, x, y, lumaWindow);
  const alpha = at(2 * lumaBytes + 2 * chroma, chroma);
  const dcw = chromaSize(width);
  for (const [plane, offset] of [[d[1], 2 * lumaBytes], [d[2], 2 * lumaBytes + chroma]] as const) {
    blendPlane(plane, dcw, at(offset, chroma), alpha, cw, ch, x >> 1, y >> 1, chromaWindow);
  }
}

/** Reference of `VideoKernels.i420ToRgba`. */
export function i420ToRgbaReference(
  src: Uint8Array,
  width: number,
  height: number,
  rgba: Uint8Array,
  matrix: ColorMatrix,
): void {
  const k = toRgb[matrix];
  const [y, u, v] = planes(src, width, height);
  const cw = chromaSize(width);
  const clamp = (n: number) => Math.min(255, Math.max(0, n));
  for (let j = 0; j < height; j++) {
    for (let i = 0; i < width; i++) {
      const c = k[0] * (y[j * width + i] - 16) + 2048;
      const d = u[(j >> 1) * cw + (i >> 1)] - 128;
      const e = v[(j >> 1) * cw + (i >> 1)] - 128;
      const p = (j * width + i) * 4;
      rgba[p] = clamp((c + k[1] * e) >> 12);
      rgba[p + 1] = clamp((c - k[2] * d - k[3] * e) >> 12);
      rgba[p + 2] = clamp((c + k[4] * d) >> 12);
      rgba[p + 3] = 255;
    }
  }
}
