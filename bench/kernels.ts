/**
 * Benchmark of the media kernels: each WASM SIMD kernel against its plain TypeScript
 * reference on 1280x720 frames and 20 ms of 48 kHz stereo, then the composer's frames/s for
 * 4 inputs of 640x360 into 1280x720 with one and with two Workers.
 *
 * Run: deno run -A bench/kernels.ts (about 30 s).
 */

import { buildWasm } from "../wasm/build.ts";
import { AudioKernels } from "../media/mixer/audio_kernels.ts";
import {
  levelsReference,
  mixReference,
  resampleReference,
} from "../media/mixer/audio_reference.ts";
import { i420Size, overlaySize } from "../media/mixer/i420.ts";
import { Resampler } from "../media/mixer/resampler.ts";
import type { LayoutName } from "../media/mixer/layout.ts";
import { type RawVideoFrame, VideoComposer } from "../media/mixer/video_composer.ts";
import { VideoKernels } from "../media/mixer/video_kernels.ts";
import {
  blendReference,
  fillReference,
  i420ToRgbaReference,
  rgbaToI420Reference,
  scaleReference,
} from "../media/mixer/video_reference.ts";

/** Time each side of a comparison runs for, in ms. */
const sampleMs = 400;
/** Width of the name column of the report, in characters. */
const nameWidth = 50;
/** Time each composer configuration runs for, in ms. */
const composerRunMs = 2500;

/** Mean ms per call of `fn`, after a warm-up, over about `sampleMs`. */
function measure(fn: () => void): number {
  for (let i = 0; i < 3; i++) fn();
  let calls = 0;
  const started = performance.now();
  let elapsed = 0;
  while (elapsed < sampleMs) {
    fn();
    calls++;
    elapsed = performance.now() - started;
  }
  return elapsed / calls;
}

function randomBytes(length: number): Uint8Array {
  const out = new Uint8Array(length);
  for (let i = 0; i < length; i += 65536) crypto.getRandomValues(out.subarray(i, i + 65536));
  return out;
}

function compare(name: string, wasm: () => void, reference: () => void): void {
  const wasmMs = measure(wasm);
  const referenceMs = measure(reference);
  const time = (ms: number) => (ms < 0.1 ? `${(ms * 1000).toFixed(2)} us` : `${ms.toFixed(3)} ms`);
  console.log(
    `${name.padEnd(nameWidth)}${time(wasmMs).padStart(12)}${time(referenceMs).padStart(13)}` +
      `${(referenceMs / wasmMs).toFixed(1).padStart(9)}x`,
  );
}

async function benchVideo(): Promise<void> {
  const video = await VideoKernels.create();
  const [w, h] = [1280, 720];
  const hd = { x: 0, y: 0, width: w, height: h };
  const quarter = { x: 0, y: 0, width: 640, height: 360 };
  const big = video.allocI420(w, h);
  const small = video.allocI420(640, 360);
  const canvas = video.allocI420(w, h);
  const rgba = video.heap.alloc(w * h * 4);
  const overlay = video.allocOverlay(w, h);
  const bigBytes = randomBytes(i420Size(w, h));
  const smallBytes = randomBytes(i420Size(640, 360));
  const rgbaBytes = randomBytes(w * h * 4);
  const canvasBytes = new Uint8Array(i420Size(w, h));
  const overlayBytes = randomBytes(overlaySize(w, h));
  video.i420Bytes(big).set(bigBytes);
  video.i420Bytes(small).set(smallBytes);
  video.heap.bytes(rgba, rgbaBytes.length).set(rgbaBytes);
  video.heap.bytes(overlay.ptr, overlayBytes.length).set(overlayBytes);
  // Scratch for scale is allocated on first use; do it before timing.
  video.scale(big, hd, canvas, quarter);
  video.scale(small, quarter, canvas, hd);

  compare(
    "scale 1280x720 -> 640x360 (area)",
    () => video.scale(big, hd, canvas, quarter),
    () => scaleReference(bigBytes, w, h, hd, canvasBytes, w, h, quarter),
  );
  compare(
    "scale 640x360 -> 1280x720 (bilinear)",
    () => video.scale(small, quarter, canvas, hd),
    () => scaleReference(smallBytes, 640, 360, quarter, canvasBytes, w, h, hd),
  );
  const color = { y: 16, u: 128, v: 128 };
  compare(
    "fill 1280x720",
    () => video.fill(canvas, color),
    () => fillReference(canvasBytes, w, h, color, hd),
  );
  compare(
    "blend RGBA overlay 1280x720",
    () => video.blend(canvas, overlay, 0, 0),
    () => blendReference(canvasBytes, w, h, overlayBytes, w, h, 0, 0),
  );
  compare(
    "RGBA -> I420 1280x720 (BT.709)",
    () => video.rgbaToI420(rgba, canvas, 709),
    () => rgbaToI420Reference(rgbaBytes, w, h, canvasBytes, 709),
  );
  const rgbaOut = new Uint8Array(w * h * 4);
  compare(
    "I420 -> RGBA 1280x720 (BT.709)",
    () => video.i420ToRgba(big, rgba, 709),
    () => i420ToRgbaReference(bigBytes, w, h, rgbaOut, 709),
  );
}

async function benchAudio(): Promise<void> {
  const audio = await AudioKernels.create();
  const { heap } = audio;
  const count = 960 * 2;
  const inputs = Array.from({ length: 4 }, (_, i) => ({
    samples: new Int16Array(randomBytes(count * 2).buffer),
    gain: 0.3 + 0.1 * i,
  }));
  const acc = heap.alloc(count * 4);
  const out = heap.alloc(count * 2);
  const ptrs = inputs.map((input) => {
    const ptr = heap.alloc(count * 2);
    heap.int16(ptr, count).set(input.samples);
    return ptr;
  });
  const mixed = new Int16Array(count);
  compare(
    "mix 4 x Int16 20 ms 48 kHz stereo",
    () => {
      audio.clear(acc, count);
      for (let i = 0; i < 4; i++) audio.mixAdd(acc, ptrs[i], "int16", count, inputs[i].gain);
      audio.mixOut(acc, out, "int16", count);
    },
    () => mixReference(inputs, mixed),
  );
  const levels = { rms: 0, peak: 0 };
  compare(
    "levels Int16 20 ms 48 kHz stereo",
    () => audio.levels(ptrs[0], "int16", count, levels),
    () => levelsReference(inputs[0].samples),
  );
  for (const [from, to] of [[48000, 44100], [44100, 48000], [48000, 16000]]) {
    const frames = from / 50;
    const chunk = new Float32Array(frames * 2).map(() => Math.random() * 2 - 1);
    const resampler = new Resampler(audio, from, to, 2);
    compare(
      `resample ${from / 1000} -> ${to / 1000} kHz 20 ms stereo`,
      () => resampler.process(chunk),
      () => resampleReference(resampler.filter, chunk),
    );
    resampler.close();
  }
}

async function benchComposer(workers: number, layout: LayoutName): Promise<number> {
  using composer = new VideoComposer({ width: 1280, height: 720, frameRate: 30, layout, workers });
  const ids = ["a", "b", "c", "d"];
  const pictures = ids.map(() => randomBytes(i420Size(640, 360)));
  for (const id of ids) composer.addInput(id);
  let tick = 0;
  const step = async (): Promise<void> => {
    ids.forEach((id, i) => {
      const frame: RawVideoFrame = { width: 640, height: 360, data: pictures[i], pts: tick * 3000 };
      composer.push(id, frame);
    });
    composer.recycle(await composer.compose(tick++));
  };
  for (let i = 0; i < 5; i++) await step(); // Workers load their wasm
  const started = performance.now();
  const startTick = tick;
  // Keep every Worker busy: one job in flight per Worker, plus one queued.
  const inFlight = new Set<Promise<void>>();
  while (performance.now() - started < composerRunMs) {
    while (inFlight.size < workers * 2) {
      ids.forEach((id, i) =>
        composer.push(id, { width: 640, height: 360, data: pictures[i], pts: tick * 3000 })
      );
      const job = composer.compose(tick++).then((frame) => composer.recycle(frame));
      inFlight.add(job);
      job.finally(() => inFlight.delete(job));
    }
    await Promise.race(inFlight);
  }
  await Promise.all(inFlight);
  return (tick - startTick) / ((performance.now() - started) / 1000);
}

if (import.meta.main) {
  await buildWasm({ ifStale: true });
  console.log(
    `${"kernel".padEnd(nameWidth)}${"wasm simd".padStart(12)}${"ts reference".padStart(13)}${
      "ratio".padStart(10)
    }`,
  );
  await benchVideo();
  await benchAudio();
  // grid: every picture fits its 640x360 cell as is; center: one grows to 1024x576, three
  // shrink into the strip, which exercises the scaler.
  for (const layout of ["grid", "center"] as const) {
    for (const workers of [1, 2]) {
      const fps = await benchComposer(workers, layout);
      const name = `composer 4 x 640x360 -> 1280x720 ${layout}, ${workers} worker`;
      console.log(
        `${(workers > 1 ? `${name}s` : name).padEnd(nameWidth)}${
          fps.toFixed(1).padStart(12)
        } frames/s`,
      );
    }
  }
}
