import assert from "node:assert/strict";
import { buildWasm } from "../../wasm/build.ts";
import { i420Size, overlaySize, type Rect } from "./i420.ts";
import { type I420Ref, VideoKernels } from "./video_kernels.ts";
import {
  blendReference,
  fillReference,
  i420ToRgbaReference,
  rgbaToI420Reference,
  rgbaToOverlayReference,
  scaleReference,
} from "./video_reference.ts";
import { KernelError } from "./errors.ts";

/** The video kernels use the references' fixed-point arithmetic: no pixel may differ. */
const maxPixelError = 0;

await buildWasm({ ifStale: true });
const kernels = await VideoKernels.create();

/** Deterministic pseudo-random bytes (xorshift), so a failure reproduces. */
function randomBytes(length: number, seed: number): Uint8Array {
  const out = new Uint8Array(length);
  let s = seed >>> 0 || 1;
  for (let i = 0; i < length; i++) {
    s ^= s << 13;
    s ^= s >>> 17;
    s ^= s << 5;
    out[i] = s & 255;
  }
  return out;
}

function assertClose(actual: Uint8Array, expected: Uint8Array, what: string): void {
  assert.equal(actual.length, expected.length, `${what}: length`);
  for (let i = 0; i < actual.length; i++) {
    if (Math.abs(actual[i] - expected[i]) > maxPixelError) {
      assert.fail(`${what}: byte ${i} is ${actual[i]}, reference ${expected[i]}`);
    }
  }
}

function upload(bytes: Uint8Array): number {
  const ptr = kernels.heap.alloc(bytes.length);
  kernels.heap.bytes(ptr, bytes.length).set(bytes);
  return ptr;
}

function frameOf(bytes: Uint8Array, width: number, height: number): I420Ref {
  return { ptr: upload(bytes), width, height };
}

function download(ref: I420Ref, bytes = i420Size(ref.width, ref.height)): Uint8Array {
  return kernels.heap.bytes(ref.ptr, bytes).slice();
}

function release(...refs: (I420Ref | number)[]): void {
  for (const ref of refs) kernels.heap.free(typeof ref === "number" ? ref : ref.ptr);
}

const scaleCases: [string, number, number, Rect, number, number, Rect][] = [
  ["720p down to a quarter", 1280, 720, full(1280, 720), 1280, 720, rect(640, 360, 320, 180)],
  ["360p up into 720p", 640, 360, full(640, 360), 1280, 720, rect(0, 0, 1280, 720)],
  [
    "720p halved (the SIMD halving pass)",
    1280,
    720,
    full(1280, 720),
    1280,
    720,
    rect(0, 0, 640, 360),
  ],
  ["halved from odd offsets", 200, 100, rect(1, 1, 198, 98), 300, 200, rect(3, 5, 99, 49)],
  [
    "slight growth (the scalar two-tap pass)",
    640,
    360,
    full(640, 360),
    720,
    400,
    rect(10, 20, 700, 380),
  ],
  ["odd growth factor", 97, 61, full(97, 61), 1280, 720, rect(2, 4, 1001, 555)],
  ["odd sizes, odd offsets", 333, 197, rect(3, 5, 301, 181), 451, 263, rect(7, 9, 211, 177)],
  ["non-integer shrink", 1920, 1080, full(1920, 1080), 1280, 720, full(1280, 720)],
  ["shrink one axis, grow the other", 100, 40, full(100, 40), 64, 90, rect(0, 1, 33, 87)],
  ["1x1 source", 1, 1, full(1, 1), 17, 9, rect(1, 1, 15, 7)],
  ["into 1x1", 37, 21, full(37, 21), 5, 5, rect(2, 2, 1, 1)],
  ["same size copy", 64, 48, full(64, 48), 64, 48, full(64, 48)],
];

function full(width: number, height: number): Rect {
  return { x: 0, y: 0, width, height };
}
function rect(x: number, y: number, width: number, height: number): Rect {
  return { x, y, width, height };
}

for (const [name, sw, sh, crop, dw, dh, target] of scaleCases) {
  Deno.test(`scale matches the reference: ${name}`, () => {
    const src = randomBytes(i420Size(sw, sh), sw * 31 + sh);
    const canvas = randomBytes(i420Size(dw, dh), dw + dh * 7);
    const s = frameOf(src, sw, sh);
    const d = frameOf(canvas, dw, dh);
    kernels.scale(s, crop, d, target);
    const expected = canvas.slice();
    scaleReference(src, sw, sh, crop, expected, dw, dh, target);
    assert.notDeepEqual(expected, canvas, "the reference paints the target");
    assertClose(download(d), expected, name);
    release(s, d);
  });
}

Deno.test("scale keeps a flat colour exactly flat", () => {
  const src = new Uint8Array(i420Size(97, 55)).fill(200);
  const s = frameOf(src, 97, 55);
  const d = kernels.allocI420(40, 30);
  kernels.scale(s, full(97, 55), d, full(40, 30));
  assert.ok(download(d).every((b) => b === 200));
  release(s, d);
});

Deno.test("scale, fill and blend reject windows outside their frames with a KernelError", () => {
  const s = kernels.allocI420(16, 16);
  const d = kernels.allocI420(32, 32);
  const overlay = kernels.allocOverlay(4, 4);
  assert.throws(() => kernels.scale(s, rect(8, 0, 9, 16), d, full(32, 32)), KernelError);
  assert.throws(() => kernels.scale(s, full(16, 16), d, rect(0, 0, 0, 5)), KernelError);
  assert.throws(() => kernels.fill(d, { y: 1, u: 2, v: 3 }, rect(30, 30, 3, 1)), KernelError);
  assert.throws(() => kernels.blend(d, overlay, 0, 0, rect(30, 0, 4, 4)), KernelError);
  release(s, d, overlay);
});

for (
  const [w, h, r] of [[1280, 720, rect(640, 0, 640, 360)], [7, 5, rect(1, 1, 5, 3)], [
    1,
    1,
    full(1, 1),
  ]] as const
) {
  Deno.test(`fill matches the reference: ${w}x${h}`, () => {
    const canvas = randomBytes(i420Size(w, h), w);
    const d = frameOf(canvas, w, h);
    const color = { y: 81, u: 90, v: 240 };
    kernels.fill(d, color, r);
    const expected = canvas.slice();
    fillReference(expected, w, h, color, r);
    assertClose(download(d), expected, "fill");
    release(d);
  });
}

const conversionSizes: [number, number][] = [[1280, 720], [33, 17], [1, 1], [2, 3], [18, 2]];
for (const matrix of [601, 709] as const) {
  for (const [w, h] of conversionSizes) {
    Deno.test(`RGBA -> I420 and back match the references: BT.${matrix} ${w}x${h}`, () => {
      const rgba = randomBytes(w * h * 4, w * h + matrix);
      const rgbaPtr = upload(rgba);
      const yuv = kernels.allocI420(w, h);
      kernels.rgbaToI420(rgbaPtr, yuv, matrix);
      const expected = new Uint8Array(i420Size(w, h));
      rgbaToI420Reference(rgba, w, h, expected, matrix);
      assertClose(download(yuv), expected, "rgbaToI420");

      kernels.i420ToRgba(yuv, rgbaPtr, matrix);
      const back = new Uint8Array(w * h * 4);
      i420ToRgbaReference(expected, w, h, back, matrix);
      assertClose(kernels.heap.bytes(rgbaPtr, w * h * 4).slice(), back, "i420ToRgba");
      release(rgbaPtr, yuv);
    });
  }
}

Deno.test("RGBA -> I420 -> RGBA keeps colours of flat areas (BT.709)", () => {
  const [w, h] = [16, 16];
  const rgba = new Uint8Array(w * h * 4);
  for (let i = 0; i < w * h; i++) rgba.set([200, 40, 90, 255], i * 4);
  const rgbaPtr = upload(rgba);
  const yuv = kernels.allocI420(w, h);
  kernels.rgbaToI420(rgbaPtr, yuv, 709);
  kernels.i420ToRgba(yuv, rgbaPtr, 709);
  const back = kernels.heap.bytes(rgbaPtr, 4);
  for (let c = 0; c < 3; c++) assert.ok(Math.abs(back[c] - rgba[c]) <= 2, `channel ${c}`);
  release(rgbaPtr, yuv);
});

const overlayCases: [string, number, number, number, number, Rect?][] = [
  ["inside", 200, 100, 40, 30],
  ["partly outside left and top", 64, 48, -13, -7],
  ["partly outside right and bottom", 65, 47, 1250, 700],
  ["wholly outside", 16, 16, 1300, 10],
  ["1x1 at an odd position", 1, 1, 5, 3],
  ["clipped to a tile on all sides", 200, 100, 630, 350, {
    x: 640,
    y: 360,
    width: 100,
    height: 40,
  }],
  ["clipped to an odd window", 65, 47, 11, 9, { x: 13, y: 15, width: 21, height: 17 }],
  ["outside its clip window", 32, 32, 0, 0, { x: 640, y: 360, width: 640, height: 360 }],
];
for (const [name, ow, oh, x, y, clip] of overlayCases) {
  Deno.test(`overlay preparation and blend match the references: ${name}`, () => {
    const [w, h] = [1280, 720];
    const rgba = randomBytes(ow * oh * 4, ow * 13 + oh);
    // Fully transparent and fully opaque pixels are the common case in watermarks.
    for (let i = 1; i < ow * oh; i += 3) rgba[i * 4 + 3] = i % 2 === 0 ? 0 : 255;
    const rgbaPtr = upload(rgba);
    const overlay = kernels.allocOverlay(ow, oh);
    kernels.prepareOverlay(rgbaPtr, overlay, 601);
    const prepared = new Uint8Array(overlaySize(ow, oh));
    rgbaToOverlayReference(rgba, ow, oh, prepared, 601);
    assertClose(download(overlay, overlaySize(ow, oh)), prepared, "rgbaToOverlay");

    const canvas = randomBytes(i420Size(w, h), 5);
    const d = frameOf(canvas, w, h);
    kernels.blend(d, overlay, x, y, clip);
    const expected = canvas.slice();
    blendReference(expected, w, h, prepared, ow, oh, x, y, clip);
    const window = clip ?? { x: 0, y: 0, width: w, height: h };
    const visible = x < window.x + window.width && y < window.y + window.height &&
      x + ow > window.x && y + oh > window.y;
    assert.equal(visible, !expected.every((b, i) => b === canvas[i]), "visible parts change");
    if (clip) {
      // Luma outside the window is untouched.
      const out = download(d);
      for (let j = 0; j < h; j++) {
        for (let i = 0; i < w; i++) {
          const inside = i >= clip.x && i < clip.x + clip.width && j >= clip.y &&
            j < clip.y + clip.height;
          if (!inside && out[j * w + i] !== canvas[j * w + i]) {
            assert.fail(`luma at ${i},${j} outside the clip window changed`);
          }
        }
      }
    }
    assertClose(download(d), expected, "blend");
    release(rgbaPtr, overlay, d);
  });
}
