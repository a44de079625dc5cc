// @ts-nocheck: AssemblyScript source (i32, v128, load<T>); asc type-checks it, Deno does not.
/**
 * Video kernels on I420 frames in linear memory. A frame of w x h pixels is three tightly
 * packed planes: Y (w * h), then U and V ((w + 1) >> 1) * ((h + 1) >> 1) each.
 *
 * The host owns the memory: it passes byte offsets, keeps every buffer inside the memory and
 * leaves 16 spare bytes after each one, because the SIMD loops may read (never write) up to
 * 15 bytes past the last pixel of a row. Arithmetic is fixed point so that the TypeScript
 * references in media/mixer/ give bit-identical results.
 */

/** Bits of the fractional part of the scale filter weights. */
const weightBits: i32 = 12;
const weightOne: i32 = 1 << weightBits;

/** Fixed-point colour matrices (Q12), limited range: [Y r,g,b, U r,g,b, V r,g,b]. */
const toYuv601: StaticArray<i32> = [1052, 2065, 401, -607, -1192, 1799, 1799, -1506, -293];
const toYuv709: StaticArray<i32> = [748, 2516, 254, -412, -1387, 1799, 1799, -1634, -165];
/** Q12 [luma gain, V->R, U->G, V->G, U->B], limited range. */
const toRgb601: StaticArray<i32> = [4769, 6537, 1605, 3330, 8263];
const toRgb709: StaticArray<i32> = [4769, 7343, 873, 2183, 8652];

function chromaSize(n: i32): i32 {
  return (n + 1) >> 1;
}

// ---------------------------------------------------------------- scale

/** How the horizontal pass of a plane runs, from fastest to most general. */
const passHalving = 0;
const passSwizzled = 1;
const passTwoTaps = 2;
const passAnyTaps = 3;
/** Bytes per group of 8 outputs in a swizzle table: 2 masks, 2 weight vectors, the base. */
const groupBytes = 80;

function maxTaps(srcLen: i32, dstLen: i32): i32 {
  return (srcLen + dstLen - 1) / dstLen + 2;
}

/** Bytes of scratch memory `scaleI420` needs for these sizes. */
export function scaleScratchBytes(srcW: i32, srcH: i32, dstW: i32, dstH: i32): i32 {
  const tables = dstW * (2 + maxTaps(srcW, dstW)) + dstH * (2 + maxTaps(srcH, dstH));
  return tables * 4 + ((srcW + 15) & ~15) * 2 + 32 + ((dstW + 7) >> 3) * groupBytes + 16;
}

/**
 * Fills a tap table: per output sample [first source index, tap count, Q12 weights...].
 * Downscale uses area averaging (each output averages the source span it covers), upscale
 * bilinear interpolation between pixel centres.
 */
function buildTaps(table: usize, srcLen: i32, dstLen: i32, stride: i32): void {
  const ratio = <f64> srcLen / <f64> dstLen;
  for (let i = 0; i < dstLen; i++) {
    const entry = table + <usize> (i * stride) * 4;
    const weights = entry + 8;
    let first: i32;
    let count: i32;
    if (dstLen < srcLen) {
      const a = <f64> i * ratio;
      const b = <f64> (i + 1) * ratio;
      first = <i32> Math.floor(a);
      const last = min(<i32> Math.ceil(b), srcLen) - 1;
      count = last - first + 1;
      for (let k = 0; k < count; k++) {
        const lo = max(a, <f64> (first + k));
        const hi = min(b, <f64> (first + k + 1));
        store<i32>(
          weights + (<usize> k << 2),
          <i32> Math.floor((hi - lo) / ratio * weightOne + 0.5),
        );
      }
    } else {
      let s = (<f64> i + 0.5) * ratio - 0.5;
      if (s < 0) s = 0;
      if (s > <f64> (srcLen - 1)) s = <f64> (srcLen - 1);
      first = <i32> Math.floor(s);
      if (first + 1 >= srcLen) {
        // One tap, padded with a zero weight so that two-tap loops can read any entry.
        count = 1;
        store<i32>(weights, weightOne);
        store<i32>(weights + 4, 0);
      } else {
        count = 2;
        const w1 = <i32> Math.floor((s - <f64> first) * weightOne + 0.5);
        store<i32>(weights, weightOne - w1);
        store<i32>(weights + 4, w1);
      }
    }
    // Rounding may leave the weights off by a few units: give the rest to the largest one so
    // that flat areas stay exactly flat.
    let sum = 0;
    let largest = 0;
    for (let k = 0; k < count; k++) {
      const w = load<i32>(weights + (<usize> k << 2));
      sum += w;
      if (w > load<i32>(weights + (<usize> largest << 2))) largest = k;
    }
    const at = weights + (<usize> largest << 2);
    store<i32>(at, load<i32>(at) + weightOne - sum);
    store<i32>(entry, first);
    store<i32>(entry + 4, count);
  }
}

/**
 * Prepares the SIMD horizontal pass of a two-tap (growing) table: per 8 outputs, the first
 * source sample they read, byte masks that pick each output's two samples out of the 8
 * samples from there, and the two weights as u16 lanes. False when 8 outputs span more
 * than 8 samples (a scale factor under about 1.17), which the scalar loop then handles.
 */
function buildGroups(tableX: usize, strideX: i32, dw: i32, groups: usize): bool {
  for (let g = 0; g < dw >> 3; g++) {
    const group = groups + <usize> (g * groupBytes);
    const base = load<i32>(tableX + <usize> (g * 8 * strideX) * 4);
    for (let lane = 0; lane < 8; lane++) {
      const entry = tableX + <usize> ((g * 8 + lane) * strideX) * 4;
      const a = load<i32>(entry) - base;
      if (a + 1 > 7) return false;
      const at = group + <usize> (lane << 1);
      store<u8>(at, <u8> (a * 2));
      store<u8>(at, <u8> (a * 2 + 1), 1);
      store<u8>(at, <u8> (a * 2 + 2), 16);
      store<u8>(at, <u8> (a * 2 + 3), 17);
      store<u16>(at, <u16> load<i32>(entry, 8), 32);
      store<u16>(at, <u16> load<i32>(entry, 12), 48);
    }
    store<i32>(group, base, 64);
  }
  return true;
}

/** Eight Q20 sums in two i32x4, rounded and stored as 8 bytes. */
function storeBytes8(out: usize, low: v128, high: v128, round: v128, shift: i32): void {
  const words = i16x8.narrow_i32x4_u(
    i32x4.shr_u(i32x4.add(low, round), shift),
    i32x4.shr_u(i32x4.add(high, round), shift),
  );
  store<i64>(out, i64x2.extract_lane(i8x16.narrow_i16x8_u(words, words), 0));
}

/** Horizontal pass: one output row of dw bytes from the 16-bit row of vertical results. */
function horizontalPass(
  row: usize,
  tableX: usize,
  strideX: i32,
  groups: usize,
  kind: i32,
  dw: i32,
  out: usize,
): void {
  let i = 0;
  if (kind == passHalving) {
    // Weights are 2048 and 2048: (2^19 + 2048 (a + b)) >> 20 == (a + b + 256) >> 9.
    const round = i32x4.splat(256);
    for (; i + 8 <= dw; i += 8) {
      const p = row + (<usize> i << 2);
      const low = i32x4.extadd_pairwise_i16x8_u(v128.load(p));
      const high = i32x4.extadd_pairwise_i16x8_u(v128.load(p, 16));
      storeBytes8(out + <usize> i, low, high, round, 9);
    }
  } else if (kind == passSwizzled) {
    const round = i32x4.splat(1 << 19);
    for (; i + 8 <= dw; i += 8) {
      const group = groups + <usize> ((i >> 3) * groupBytes);
      const samples = v128.load(row + (<usize> load<i32>(group, 64) << 1));
      const left = i8x16.swizzle(samples, v128.load(group));
      const right = i8x16.swizzle(samples, v128.load(group, 16));
      const w0 = v128.load(group, 32);
      const w1 = v128.load(group, 48);
      const low = i32x4.add(
        i32x4.extmul_low_i16x8_u(left, w0),
        i32x4.extmul_low_i16x8_u(right, w1),
      );
      const high = i32x4.add(
        i32x4.extmul_high_i16x8_u(left, w0),
        i32x4.extmul_high_i16x8_u(right, w1),
      );
      storeBytes8(out + <usize> i, low, high, round, 20);
    }
  }
  if (kind != passAnyTaps) {
    for (; i < dw; i++) {
      const entryX = tableX + <usize> (i * strideX) * 4;
      const p = row + (<usize> load<i32>(entryX) << 1);
      const sum = (1 << 19) + load<i32>(entryX, 8) * <i32> load<u16>(p) +
        load<i32>(entryX, 12) * <i32> load<u16>(p, 2);
      store<u8>(out + <usize> i, <u8> (sum >> 20));
    }
    return;
  }
  for (; i < dw; i++) {
    const entryX = tableX + <usize> (i * strideX) * 4;
    let p = row + (<usize> load<i32>(entryX) << 1);
    const countX = load<i32>(entryX + 4);
    let sum = 1 << 19;
    for (let t = 0; t < countX; t++) {
      sum += load<i32>(entryX + 8 + (<usize> t << 2)) * <i32> load<u16>(p);
      p += 2;
    }
    store<u8>(out + <usize> i, <u8> (sum >> 20));
  }
}

/**
 * Scales the sw x sh window at (sx, sy) of a plane into the dw x dh window at (dx, dy) of
 * another: a vertical pass (SIMD, 8 pixels at a time) into a 16-bit row, then a horizontal
 * pass over the tap table.
 */
function scalePlane(
  src: usize,
  srcStride: i32,
  sx: i32,
  sy: i32,
  sw: i32,
  sh: i32,
  dst: usize,
  dstStride: i32,
  dx: i32,
  dy: i32,
  dw: i32,
  dh: i32,
  scratch: usize,
): void {
  if (sw == dw && sh == dh) {
    for (let j = 0; j < dh; j++) {
      memory.copy(
        dst + <usize> ((dy + j) * dstStride + dx),
        src + <usize> ((sy + j) * srcStride + sx),
        <usize> dw,
      );
    }
    return;
  }
  const strideX = 2 + maxTaps(sw, dw);
  const strideY = 2 + maxTaps(sh, dh);
  const tableX = scratch;
  const tableY = tableX + <usize> (dw * strideX) * 4;
  const row = tableY + <usize> (dh * strideY) * 4;
  buildTaps(tableX, sw, dw, strideX);
  buildTaps(tableY, sh, dh, strideY);
  const groups = row + <usize> (((sw + 15) & ~15) * 2 + 32);
  // Growing and halving give at most two taps per output.
  let kind = passAnyTaps;
  if (sw == dw * 2) kind = passHalving;
  else if (dw >= sw) kind = buildGroups(tableX, strideX, dw, groups) ? passSwizzled : passTwoTaps;
  const origin = src + <usize> (sy * srcStride + sx);
  for (let j = 0; j < dh; j++) {
    const entryY = tableY + <usize> (j * strideY) * 4;
    const firstY = load<i32>(entryY);
    const countY = load<i32>(entryY + 4);
    for (let x = 0; x < sw; x += 8) {
      let low = i32x4.splat(8);
      let high = low;
      let p = origin + <usize> (firstY * srcStride + x);
      for (let t = 0; t < countY; t++) {
        const w = i16x8.splat(<i16> load<i32>(entryY + 8 + (<usize> t << 2)));
        const px = v128.load8x8_u(p);
        low = i32x4.add(low, i32x4.extmul_low_i16x8_s(px, w));
        high = i32x4.add(high, i32x4.extmul_high_i16x8_s(px, w));
        p += <usize> srcStride;
      }
      const packed = i16x8.narrow_i32x4_u(i32x4.shr_s(low, 4), i32x4.shr_s(high, 4));
      v128.store(row + (<usize> x << 1), packed);
    }
    horizontalPass(
      row,
      tableX,
      strideX,
      groups,
      kind,
      dw,
      dst + <usize> ((dy + j) * dstStride + dx),
    );
  }
}

/**
 * Scales the crop window (cropX, cropY, cropW, cropH) of the I420 frame at `src` into the
 * rectangle (rectX, rectY, rectW, rectH) of the I420 canvas at `dst`. Both windows must lie
 * inside their frames; `scratch` must hold `scaleScratchBytes(cropW, cropH, rectW, rectH)`.
 */
export function scaleI420(
  src: usize,
  srcW: i32,
  srcH: i32,
  cropX: i32,
  cropY: i32,
  cropW: i32,
  cropH: i32,
  dst: usize,
  dstW: i32,
  dstH: i32,
  rectX: i32,
  rectY: i32,
  rectW: i32,
  rectH: i32,
  scratch: usize,
): void {
  scalePlane(src, srcW, cropX, cropY, cropW, cropH, dst, dstW, rectX, rectY, rectW, rectH, scratch);
  const srcCw = chromaSize(srcW);
  const srcCh = chromaSize(srcH);
  const dstCw = chromaSize(dstW);
  const dstCh = chromaSize(dstH);
  const cx = cropX >> 1;
  const cy = cropY >> 1;
  const cw = chromaSize(cropX + cropW) - cx;
  const ch = chromaSize(cropY + cropH) - cy;
  const rx = rectX >> 1;
  const ry = rectY >> 1;
  const rw = chromaSize(rectX + rectW) - rx;
  const rh = chromaSize(rectY + rectH) - ry;
  const srcPlane = <usize> (srcCw * srcCh);
  const dstPlane = <usize> (dstCw * dstCh);
  const srcU = src + <usize> (srcW * srcH);
  const dstU = dst + <usize> (dstW * dstH);
  scalePlane(srcU, srcCw, cx, cy, cw, ch, dstU, dstCw, rx, ry, rw, rh, scratch);
  scalePlane(
    srcU + srcPlane,
    srcCw,
    cx,
    cy,
    cw,
    ch,
    dstU + dstPlane,
    dstCw,
    rx,
    ry,
    rw,
    rh,
    scratch,
  );
}

// ---------------------------------------------------------------- fill

/** Paints the rectangle (x, y, w, h), inside the canvas, with the colour (cy, cu, cv). */
export function fillI420(
  dst: usize,
  dstW: i32,
  dstH: i32,
  x: i32,
  y: i32,
  w: i32,
  h: i32,
  cy: u8,
  cu: u8,
  cv: u8,
): void {
  for (let j = 0; j < h; j++) memory.fill(dst + <usize> ((y + j) * dstW + x), cy, w);
  const dstCw = chromaSize(dstW);
  const u = dst + <usize> (dstW * dstH);
  const v = u + <usize> (dstCw * chromaSize(dstH));
  const rx = x >> 1;
  const ry = y >> 1;
  const rw = chromaSize(x + w) - rx;
  const rh = chromaSize(y + h) - ry;
  for (let j = 0; j < rh; j++) {
    const at = <usize> ((ry + j) * dstCw + rx);
    memory.fill(u + at, cu, rw);
    memory.fill(v + at, cv, rw);
  }
}

// ---------------------------------------------------------------- overlay

/** Exact round(v / 255) for 0 <= v <= 255 * 255, lane-wise on u16. */
function div255(v: v128): v128 {
  const r = i16x8.add(v, i16x8.splat(128));
  return i16x8.shr_u(i16x8.add(r, i16x8.shr_u(r, 8)), 8);
}

/**
 * Blends a plane with per-pixel alpha over a plane of the canvas with its top-left corner
 * at (x, y), dropping what falls outside the clip window [left, right) x [top, bottom),
 * which the caller has already cut to the canvas.
 */
function blendPlane(
  dst: usize,
  dstW: i32,
  src: usize,
  alpha: usize,
  srcW: i32,
  srcH: i32,
  x: i32,
  y: i32,
  left: i32,
  top: i32,
  right: i32,
  bottom: i32,
): void {
  const x0 = max(x, left);
  const x1 = min(x + srcW, right);
  const y0 = max(y, top);
  const y1 = min(y + srcH, bottom);
  const full = i16x8.splat(255);
  for (let j = y0; j < y1; j++) {
    const d = dst + <usize> (j * dstW);
    const srcRow = <usize> ((j - y) * srcW - x);
    const s = src + srcRow;
    const a = alpha + srcRow;
    let i = x0;
    for (; i + 16 <= x1; i += 16) {
      const dv = v128.load(d + <usize> i);
      const sv = v128.load(s + <usize> i);
      const av = v128.load(a + <usize> i);
      const aLow = i16x8.extend_low_i8x16_u(av);
      const aHigh = i16x8.extend_high_i8x16_u(av);
      const low = div255(i16x8.add(
        i16x8.mul(i16x8.extend_low_i8x16_u(dv), i16x8.sub(full, aLow)),
        i16x8.mul(i16x8.extend_low_i8x16_u(sv), aLow),
      ));
      const high = div255(i16x8.add(
        i16x8.mul(i16x8.extend_high_i8x16_u(dv), i16x8.sub(full, aHigh)),
        i16x8.mul(i16x8.extend_high_i8x16_u(sv), aHigh),
      ));
      v128.store(d + <usize> i, i8x16.narrow_i16x8_u(low, high));
    }
    for (; i < x1; i++) {
      const av = <i32> load<u8>(a + <usize> i);
      const v = <i32> load<u8>(d + <usize> i) * (255 - av) + <i32> load<u8>(s + <usize> i) * av +
        128;
      store<u8>(d + <usize> i, <u8> ((v + (v >> 8)) >> 8));
    }
  }
}

/**
 * Alpha-blends a prepared overlay (see `rgbaToOverlay`) of w x h pixels onto the canvas with
 * its top-left corner at (x, y), which may lie partly or wholly outside the canvas. Only the
 * pixels inside the clip window (clipX, clipY, clipW x clipH, cut to the canvas) change; a
 * chroma sample changes when any pixel of its 2x2 block is inside. Chroma is placed at
 * (x >> 1, y >> 1).
 */
export function blendOverlay(
  dst: usize,
  dstW: i32,
  dstH: i32,
  overlay: usize,
  w: i32,
  h: i32,
  x: i32,
  y: i32,
  clipX: i32,
  clipY: i32,
  clipW: i32,
  clipH: i32,
): void {
  const luma = <usize> (w * h);
  const chroma = <usize> (chromaSize(w) * chromaSize(h));
  const dstCw = chromaSize(dstW);
  const dstCh = chromaSize(dstH);
  const dstU = dst + <usize> (dstW * dstH);
  const dstV = dstU + <usize> (dstCw * dstCh);
  const ovU = overlay + luma * 2;
  const ovV = ovU + chroma;
  const ovAc = ovV + chroma;
  const left = max(clipX, 0);
  const top = max(clipY, 0);
  const right = min(clipX + clipW, dstW);
  const bottom = min(clipY + clipH, dstH);
  if (left >= right || top >= bottom) return;
  blendPlane(dst, dstW, overlay, overlay + luma, w, h, x, y, left, top, right, bottom);
  const cw = chromaSize(w);
  const ch = chromaSize(h);
  const cx = x >> 1;
  const cy = y >> 1;
  const cl = left >> 1;
  const ct = top >> 1;
  const cr = chromaSize(right);
  const cb = chromaSize(bottom);
  blendPlane(dstU, dstCw, ovU, ovAc, cw, ch, cx, cy, cl, ct, cr, cb);
  blendPlane(dstV, dstCw, ovV, ovAc, cw, ch, cx, cy, cl, ct, cr, cb);
}

// ---------------------------------------------------------------- colour conversion

function matrixToYuv(matrix: i32): StaticArray<i32> {
  return matrix == 709 ? toYuv709 : toYuv601;
}

/** Luma of 4 RGBA pixels (one per i32 lane), Q12 coefficients. */
function lumaOf(px: v128, kr: v128, kg: v128, kb: v128): v128 {
  const byte = i32x4.splat(255);
  const r = v128.and(px, byte);
  const g = v128.and(i32x4.shr_u(px, 8), byte);
  const b = v128.and(i32x4.shr_u(px, 16), byte);
  const sum = i32x4.add(i32x4.add(i32x4.mul(r, kr), i32x4.mul(g, kg)), i32x4.mul(b, kb));
  return i32x4.add(i32x4.shr_s(i32x4.add(sum, i32x4.splat(2048)), 12), i32x4.splat(16));
}

/** Writes the Y plane of an RGBA image, 16 pixels per SIMD step. */
function rgbaToLuma(rgba: usize, w: i32, h: i32, dst: usize, m: StaticArray<i32>): void {
  const kr = i32x4.splat(m[0]);
  const kg = i32x4.splat(m[1]);
  const kb = i32x4.splat(m[2]);
  for (let j = 0; j < h; j++) {
    const s = rgba + <usize> (j * w) * 4;
    const d = dst + <usize> (j * w);
    let i = 0;
    for (; i + 16 <= w; i += 16) {
      const p = s + (<usize> i << 2);
      const y0 = lumaOf(v128.load(p), kr, kg, kb);
      const y1 = lumaOf(v128.load(p, 16), kr, kg, kb);
      const y2 = lumaOf(v128.load(p, 32), kr, kg, kb);
      const y3 = lumaOf(v128.load(p, 48), kr, kg, kb);
      v128.store(
        d + <usize> i,
        i8x16.narrow_i16x8_u(i16x8.narrow_i32x4_u(y0, y1), i16x8.narrow_i32x4_u(y2, y3)),
      );
    }
    for (; i < w; i++) {
      const p = s + (<usize> i << 2);
      const sum = m[0] * <i32> load<u8>(p) + m[1] * <i32> load<u8>(p, 1) +
        m[2] * <i32> load<u8>(p, 2);
      store<u8>(d + <usize> i, <u8> (((sum + 2048) >> 12) + 16));
    }
  }
}

/**
 * Sums R, G, B (and alpha) of the 2x2 block of chroma sample (cx, cy), repeating the last
 * column or row at odd edges. With `weighted`, colours are weighted by their alpha.
 * Returns the sums in lanes 0..3 (R, G, B, A).
 */
function blockSums(rgba: usize, w: i32, h: i32, cx: i32, cy: i32, weighted: bool): v128 {
  const x0 = cx << 1;
  const y0 = cy << 1;
  const x1 = min(x0 + 1, w - 1);
  const y1 = min(y0 + 1, h - 1);
  let sum = i32x4.splat(0);
  for (let k = 0; k < 4; k++) {
    const x = (k & 1) != 0 ? x1 : x0;
    const y = (k & 2) != 0 ? y1 : y0;
    const p = rgba + (<usize> (y * w + x) << 2);
    const px = i32x4(
      <i32> load<u8>(p),
      <i32> load<u8>(p, 1),
      <i32> load<u8>(p, 2),
      <i32> load<u8>(p, 3),
    );
    if (weighted) {
      const a = <i32> load<u8>(p, 3);
      sum = i32x4.add(sum, i32x4.replace_lane(i32x4.mul(px, i32x4.splat(a)), 3, a));
    } else {
      sum = i32x4.add(sum, px);
    }
  }
  return sum;
}

/** One chroma value from Q12 coefficients and the colour sums of 4 pixels. */
function chromaValue(r: i32, g: i32, b: i32, kr: i32, kg: i32, kb: i32): i32 {
  return ((kr * r + kg * g + kb * b + 8192) >> 14) + 128;
}

/**
 * Converts an RGBA image (bytes R, G, B, A) to I420 with the BT.601 or BT.709 limited-range
 * matrix (`matrix` is 601 or 709). Chroma is the average colour of each 2x2 block.
 */
export function rgbaToI420(rgba: usize, w: i32, h: i32, dst: usize, matrix: i32): void {
  const m = matrixToYuv(matrix);
  rgbaToLuma(rgba, w, h, dst, m);
  const cw = chromaSize(w);
  const ch = chromaSize(h);
  const u = dst + <usize> (w * h);
  const v = u + <usize> (cw * ch);
  const byte = i32x4.splat(255);
  const round = i32x4.splat(8192);
  const bias = i32x4.splat(128);
  const ur = i32x4.splat(m[3]);
  const ug = i32x4.splat(m[4]);
  const ub = i32x4.splat(m[5]);
  const vr = i32x4.splat(m[6]);
  const vg = i32x4.splat(m[7]);
  const vb = i32x4.splat(m[8]);
  // Columns and rows whose 2x2 blocks are complete go 4 chroma samples per SIMD step.
  const fullCols = w >> 1;
  const fullRows = h >> 1;
  for (let cy = 0; cy < ch; cy++) {
    let cx = 0;
    if (cy < fullRows) {
      const row0 = rgba + (<usize> (cy * 2 * w) << 2);
      const row1 = row0 + (<usize> w << 2);
      for (; cx + 4 <= fullCols; cx += 4) {
        const off = <usize> cx << 3;
        const a0 = v128.load(row0 + off);
        const a1 = v128.load(row0 + off, 16);
        const b0 = v128.load(row1 + off);
        const b1 = v128.load(row1 + off, 16);
        // Vertical sums per pixel, then the two pixels of each block.
        const rA = i32x4.add(v128.and(a0, byte), v128.and(b0, byte));
        const rB = i32x4.add(v128.and(a1, byte), v128.and(b1, byte));
        const gA = i32x4.add(
          v128.and(i32x4.shr_u(a0, 8), byte),
          v128.and(i32x4.shr_u(b0, 8), byte),
        );
        const gB = i32x4.add(
          v128.and(i32x4.shr_u(a1, 8), byte),
          v128.and(i32x4.shr_u(b1, 8), byte),
        );
        const bA = i32x4.add(
          v128.and(i32x4.shr_u(a0, 16), byte),
          v128.and(i32x4.shr_u(b0, 16), byte),
        );
        const bB = i32x4.add(
          v128.and(i32x4.shr_u(a1, 16), byte),
          v128.and(i32x4.shr_u(b1, 16), byte),
        );
        const r = i32x4.add(
          v128.shuffle<i32>(rA, rB, 0, 2, 4, 6),
          v128.shuffle<i32>(rA, rB, 1, 3, 5, 7),
        );
        const g = i32x4.add(
          v128.shuffle<i32>(gA, gB, 0, 2, 4, 6),
          v128.shuffle<i32>(gA, gB, 1, 3, 5, 7),
        );
        const b = i32x4.add(
          v128.shuffle<i32>(bA, bB, 0, 2, 4, 6),
          v128.shuffle<i32>(bA, bB, 1, 3, 5, 7),
        );
        const uq = i32x4.add(
          i32x4.shr_s(
            i32x4.add(
              i32x4.add(i32x4.mul(r, ur), i32x4.mul(g, ug)),
              i32x4.add(i32x4.mul(b, ub), round),
            ),
            14,
          ),
          bias,
        );
        const vq = i32x4.add(
          i32x4.shr_s(
            i32x4.add(
              i32x4.add(i32x4.mul(r, vr), i32x4.mul(g, vg)),
              i32x4.add(i32x4.mul(b, vb), round),
            ),
            14,
          ),
          bias,
        );
        const packed = i8x16.narrow_i16x8_u(i16x8.narrow_i32x4_u(uq, vq), i16x8.splat(0));
        const at = <usize> (cy * cw + cx);
        store<i32>(u + at, i32x4.extract_lane(packed, 0));
        store<i32>(v + at, i32x4.extract_lane(packed, 1));
      }
    }
    for (; cx < cw; cx++) {
      const s = blockSums(rgba, w, h, cx, cy, false);
      const r = i32x4.extract_lane(s, 0);
      const g = i32x4.extract_lane(s, 1);
      const b = i32x4.extract_lane(s, 2);
      const at = <usize> (cy * cw + cx);
      store<u8>(u + at, <u8> chromaValue(r, g, b, m[3], m[4], m[5]));
      store<u8>(v + at, <u8> chromaValue(r, g, b, m[6], m[7], m[8]));
    }
  }
}

/**
 * Prepares an RGBA image for `blendOverlay`: writes Y (w * h), A (w * h), then U, V and the
 * chroma alpha (each chroma-sized). Chroma is the alpha-weighted average colour of each 2x2
 * block, so transparent pixels do not tint the edge; chroma alpha is the block's mean alpha.
 */
export function rgbaToOverlay(rgba: usize, w: i32, h: i32, dst: usize, matrix: i32): void {
  const m = matrixToYuv(matrix);
  rgbaToLuma(rgba, w, h, dst, m);
  const luma = <usize> (w * h);
  const alpha = dst + luma;
  for (let i: usize = 0; i < luma; i++) store<u8>(alpha + i, load<u8>(rgba + (i << 2), 3));
  const cw = chromaSize(w);
  const ch = chromaSize(h);
  const u = dst + luma * 2;
  const v = u + <usize> (cw * ch);
  const ac = v + <usize> (cw * ch);
  for (let cy = 0; cy < ch; cy++) {
    for (let cx = 0; cx < cw; cx++) {
      const s = blockSums(rgba, w, h, cx, cy, true);
      const a = i32x4.extract_lane(s, 3);
      const at = <usize> (cy * cw + cx);
      store<u8>(ac + at, <u8> ((a + 2) >> 2));
      if (a == 0) {
        store<u8>(u + at, 128);
        store<u8>(v + at, 128);
        continue;
      }
      // Weighted sums scaled to the 4-pixel range of chromaValue, rounded to nearest.
      const r = <i32> ((<i64> i32x4.extract_lane(s, 0) * 4 + (a >> 1)) / a);
      const g = <i32> ((<i64> i32x4.extract_lane(s, 1) * 4 + (a >> 1)) / a);
      const b = <i32> ((<i64> i32x4.extract_lane(s, 2) * 4 + (a >> 1)) / a);
      store<u8>(u + at, <u8> chromaValue(r, g, b, m[3], m[4], m[5]));
      store<u8>(v + at, <u8> chromaValue(r, g, b, m[6], m[7], m[8]));
    }
  }
}

/** Four i32 lanes >> 12, narrowed with saturation to bytes 0..255 in the low 8 lanes. */
function toBytes(low: v128, high: v128): v128 {
  const words = i16x8.narrow_i32x4_s(i32x4.shr_s(low, 12), i32x4.shr_s(high, 12));
  return i8x16.narrow_i16x8_u(words, words);
}

function clampByte(v: i32): u8 {
  return <u8> (v < 0 ? 0 : v > 255 ? 255 : v);
}

/**
 * Converts an I420 frame to RGBA (alpha 255) with the BT.601 or BT.709 limited-range matrix
 * (`matrix` is 601 or 709); each chroma sample covers its 2x2 block.
 */
export function i420ToRgba(src: usize, w: i32, h: i32, rgba: usize, matrix: i32): void {
  const k = matrix == 709 ? toRgb709 : toRgb601;
  const cw = chromaSize(w);
  const uPlane = src + <usize> (w * h);
  const vPlane = uPlane + <usize> (cw * chromaSize(h));
  const widen = i8x16(0, 0, 1, 1, 2, 2, 3, 3, -1, -1, -1, -1, -1, -1, -1, -1);
  const opaque = i8x16.splat(-1);
  const round = i32x4.splat(2048);
  const kY = i16x8.splat(<i16> k[0]);
  const kVR = i16x8.splat(<i16> k[1]);
  const kG = i16x8(
    <i16> k[2],
    <i16> k[3],
    <i16> k[2],
    <i16> k[3],
    <i16> k[2],
    <i16> k[3],
    <i16> k[2],
    <i16> k[3],
  );
  const kUB = i16x8.splat(<i16> k[4]);
  for (let j = 0; j < h; j++) {
    const yRow = src + <usize> (j * w);
    const uRow = uPlane + <usize> ((j >> 1) * cw);
    const vRow = vPlane + <usize> ((j >> 1) * cw);
    const out = rgba + (<usize> (j * w) << 2);
    let i = 0;
    for (; i + 8 <= w; i += 8) {
      const y = v128.load8x8_u(yRow + <usize> i);
      const u = i16x8.extend_low_i8x16_u(
        i8x16.swizzle(v128.load32_zero(uRow + <usize> (i >> 1)), widen),
      );
      const v = i16x8.extend_low_i8x16_u(
        i8x16.swizzle(v128.load32_zero(vRow + <usize> (i >> 1)), widen),
      );
      const c = i16x8.sub(y, i16x8.splat(16));
      const d = i16x8.sub(u, i16x8.splat(128));
      const e = i16x8.sub(v, i16x8.splat(128));
      const cLow = i32x4.add(i32x4.extmul_low_i16x8_s(c, kY), round);
      const cHigh = i32x4.add(i32x4.extmul_high_i16x8_s(c, kY), round);
      const r = toBytes(
        i32x4.add(cLow, i32x4.extmul_low_i16x8_s(e, kVR)),
        i32x4.add(cHigh, i32x4.extmul_high_i16x8_s(e, kVR)),
      );
      // G = C - kUG x D - kVG x E: one dot product per pixel with interleaved (D, E).
      const deLow = i16x8.shuffle(d, e, 0, 8, 1, 9, 2, 10, 3, 11);
      const deHigh = i16x8.shuffle(d, e, 4, 12, 5, 13, 6, 14, 7, 15);
      const g = toBytes(
        i32x4.sub(cLow, i32x4.dot_i16x8_s(deLow, kG)),
        i32x4.sub(cHigh, i32x4.dot_i16x8_s(deHigh, kG)),
      );
      const b = toBytes(
        i32x4.add(cLow, i32x4.extmul_low_i16x8_s(d, kUB)),
        i32x4.add(cHigh, i32x4.extmul_high_i16x8_s(d, kUB)),
      );
      const rg = i8x16.shuffle(r, g, 0, 16, 1, 17, 2, 18, 3, 19, 4, 20, 5, 21, 6, 22, 7, 23);
      const ba = i8x16.shuffle(b, opaque, 0, 16, 1, 17, 2, 18, 3, 19, 4, 20, 5, 21, 6, 22, 7, 23);
      const p = out + (<usize> i << 2);
      v128.store(p, i16x8.shuffle(rg, ba, 0, 8, 1, 9, 2, 10, 3, 11));
      v128.store(p, i16x8.shuffle(rg, ba, 4, 12, 5, 13, 6, 14, 7, 15), 16);
    }
    for (; i < w; i++) {
      const c = k[0] * (<i32> load<u8>(yRow + <usize> i) - 16) + 2048;
      const d = <i32> load<u8>(uRow + <usize> (i >> 1)) - 128;
      const e = <i32> load<u8>(vRow + <usize> (i >> 1)) - 128;
      const p = out + (<usize> i << 2);
      store<u8>(p, clampByte((c + k[1] * e) >> 12));
      store<u8>(p, clampByte((c - k[2] * d - k[3] * e) >> 12), 1);
      store<u8>(p, clampByte((c + k[4] * d) >> 12), 2);
      store<u8>(p, 255, 3);
    }
  }
}
