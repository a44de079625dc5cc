import assert from "node:assert/strict";
import { buildWasm } from "../../wasm/build.ts";
import { AudioKernels, type AudioLevels, type SampleFormat } from "./audio_kernels.ts";
import {
  levelsReference,
  mixReference,
  resampleReference,
  softClipReference,
} from "./audio_reference.ts";
import { resampleRatesHz } from "./resample_filter.ts";
import { Resampler } from "./resampler.ts";
import { KernelError } from "./errors.ts";

/** Int16 output: the kernel sums in Float32, the reference in Float64; at most 1 LSB apart. */
const maxInt16Error = 1;
/** Float32 output of the mixer, relative to full scale. */
const maxFloat32Error = 1e-6;
/** RMS and peak, relative to full scale (the kernel accumulates squares in Float32). */
const maxLevelError = 1e-5;
/** Resampled samples, relative to full scale (Float32 SIMD sums vs Float64). */
const maxResampleError = 1e-5;

await buildWasm({ ifStale: true });
const kernels = await AudioKernels.create();
const { heap } = kernels;

function random(seed: number): () => number {
  let s = seed >>> 0 || 1;
  return () => {
    s ^= s << 13;
    s ^= s >>> 17;
    s ^= s << 5;
    return (s >>> 0) / 4294967296;
  };
}

function noise(format: SampleFormat, count: number, seed: number, scale = 1) {
  const next = random(seed);
  if (format === "int16") {
    return Int16Array.from({ length: count }, () => Math.round((next() * 2 - 1) * 32767 * scale));
  }
  return Float32Array.from({ length: count }, () => (next() * 2 - 1) * scale);
}

function upload(samples: Int16Array | Float32Array): number {
  const ptr = heap.alloc(samples.byteLength);
  heap.bytes(ptr, samples.byteLength).set(
    new Uint8Array(samples.buffer, samples.byteOffset, samples.byteLength),
  );
  return ptr;
}

function assertWithin(
  actual: ArrayLike<number>,
  expected: ArrayLike<number>,
  tolerance: number,
  what: string,
) {
  assert.equal(actual.length, expected.length, `${what}: length`);
  for (let i = 0; i < actual.length; i++) {
    if (!(Math.abs(actual[i] - expected[i]) <= tolerance)) {
      assert.fail(`${what}: sample ${i} is ${actual[i]}, reference ${expected[i]}`);
    }
  }
}

const mixCases: [string, SampleFormat[], SampleFormat, number, number][] = [
  ["2 Int16 stereo 20 ms at 48 kHz", ["int16", "int16"], "int16", 1920, 0.5],
  ["5 Float32 mono 20 ms at 8 kHz", Array(5).fill("float32"), "float32", 160, 0.4],
  ["mixed formats, odd count", ["int16", "float32", "int16"], "int16", 1323, 0.7],
  ["one sample", ["float32"], "int16", 1, 1],
  ["loud inputs that clip", ["int16", "int16", "int16"], "int16", 882, 1],
  ["loud Float32 that clips", ["float32", "float32"], "float32", 441, 1],
];

for (const [name, formats, outFormat, count, scale] of mixCases) {
  Deno.test(`mix matches the reference: ${name}`, () => {
    const inputs = formats.map((format, i) => ({
      samples: noise(format, count, 7 + i * 101, scale),
      gain: 0.5 + i * 0.4,
      format,
    }));
    const acc = heap.alloc(count * 4);
    const ptrs = inputs.map((input) => upload(input.samples));
    const out = heap.alloc(count * 4);
    kernels.clear(acc, count);
    inputs.forEach((input, i) => kernels.mixAdd(acc, ptrs[i], input.format, count, input.gain));
    kernels.mixOut(acc, out, outFormat, count);
    const actual = outFormat === "int16" ? heap.int16(out, count) : heap.float32(out, count);
    const expected = outFormat === "int16" ? new Int16Array(count) : new Float32Array(count);
    mixReference(inputs, expected);
    const tolerance = outFormat === "int16" ? maxInt16Error : maxFloat32Error;
    assertWithin(actual, expected, tolerance, name);
    for (const ptr of [acc, out, ...ptrs]) heap.free(ptr);
  });
}

Deno.test("mix of silent inputs is silent, and clipping stays inside full scale", () => {
  const count = 960;
  const acc = heap.alloc(count * 4);
  const silent = upload(new Int16Array(count));
  const loud = upload(new Int16Array(count).fill(-32768));
  const out = heap.alloc(count * 2);
  kernels.clear(acc, count);
  kernels.mixAdd(acc, silent, "int16", count, 1);
  kernels.mixAdd(acc, silent, "int16", count, 3);
  kernels.mixOut(acc, out, "int16", count);
  assert.ok(heap.int16(out, count).every((s) => s === 0));
  for (let i = 0; i < 4; i++) kernels.mixAdd(acc, loud, "int16", count, 1);
  kernels.mixOut(acc, out, "int16", count);
  const expected = Math.round(softClipReference(-4) * 32767);
  assert.ok(expected > -32767 && expected < -30000, `soft clip of -4 is ${expected}`);
  assert.ok(heap.int16(out, count).every((s) => Math.abs(s - expected) <= maxInt16Error));
  for (const ptr of [acc, silent, loud, out]) heap.free(ptr);
});

const levelCases: [string, Int16Array | Float32Array][] = [
  ["Int16 noise", noise("int16", 1920, 3)],
  ["Float32 noise, odd count", noise("float32", 883, 4)],
  ["silence", new Int16Array(960)],
  ["clipping Int16", new Int16Array(962).map((_, i) => (i % 2 ? 32767 : -32768))],
  ["clipping Float32", new Float32Array(7).fill(-1)],
  ["empty", new Float32Array(0)],
];
for (const [name, samples] of levelCases) {
  Deno.test(`levels match the reference: ${name}`, () => {
    const ptr = upload(samples);
    const format = samples instanceof Int16Array ? "int16" : "float32";
    const actual: AudioLevels = { rms: -1, peak: -1 };
    kernels.levels(ptr, format, samples.length, actual);
    const expected = levelsReference(samples);
    assert.ok(Math.abs(actual.rms - expected.rms) <= maxLevelError, `rms ${actual.rms}`);
    assert.ok(Math.abs(actual.peak - expected.peak) <= maxLevelError, `peak ${actual.peak}`);
    heap.free(ptr);
  });
}

Deno.test("Int16 to Float32 conversion is exact", () => {
  const samples = noise("int16", 1001, 9) as Int16Array;
  samples[0] = -32768;
  samples[1] = 32767;
  const src = upload(samples);
  const dst = heap.alloc(samples.length * 4);
  kernels.int16ToFloat32(src, dst, samples.length);
  assert.deepEqual(heap.float32(dst, samples.length), Float32Array.from(samples, (s) => s / 32768));
  heap.free(src);
  heap.free(dst);
});

for (const fromHz of resampleRatesHz) {
  for (const toHz of resampleRatesHz) {
    if (fromHz === toHz) continue;
    Deno.test(`streaming resampler matches the reference: ${fromHz} -> ${toHz} Hz`, () => {
      for (const channels of [1, 2]) {
        const chunkFrames = fromHz / 50;
        // 100 ms in chunks of 20 ms, 7 frames and the rest: the split must not matter.
        const input = noise("float32", (fromHz / 10) * channels, fromHz + toHz) as Float32Array;
        const resampler = new Resampler(kernels, fromHz, toHz, channels);
        const out: number[] = [];
        const cuts = [0, chunkFrames, chunkFrames + 7, 3 * chunkFrames, fromHz / 10];
        for (let i = 1; i < cuts.length; i++) {
          const chunk = input.subarray(cuts[i - 1] * channels, cuts[i] * channels);
          out.push(...resampler.process(chunk));
        }
        const expected = resampleReference(resampler.filter, input);
        assertWithin(out, expected, maxResampleError, `${channels} channel(s)`);
        // All but the filter's look-ahead is out already.
        const lookAheadFrames = Math.ceil((resampler.filter.taps / 2) * toHz / fromHz) + 1;
        assert.ok(out.length / channels >= (toHz / 10) - lookAheadFrames);
        resampler.close();
      }
    });
  }
}

Deno.test("resampled sine keeps its shape: 1 kHz from 44.1 to 48 kHz", () => {
  const fromHz = 44100;
  const toHz = 48000;
  const input = Float32Array.from(
    { length: fromHz / 5 },
    (_, i) => 0.5 * Math.sin(2 * Math.PI * 1000 * i / fromHz),
  );
  const resampler = new Resampler(kernels, fromHz, toHz, 1);
  const out = resampler.process(input).slice();
  // The first outputs see the silence before the input's start through the filter.
  const settleFrames = resampler.filter.taps;
  resampler.close();
  let worst = 0;
  for (let k = settleFrames; k < out.length; k++) {
    worst = Math.max(worst, Math.abs(out[k] - 0.5 * Math.sin(2 * Math.PI * 1000 * k / toHz)));
  }
  assert.ok(worst < 2e-3, `largest deviation from the ideal sine: ${worst}`);
});

Deno.test("resampler refuses unsupported rates and channel counts with a KernelError", () => {
  assert.throws(() => new Resampler(kernels, 22050, 48000, 1), KernelError);
  assert.throws(() => new Resampler(kernels, 8000, 48000, 3), KernelError);
});
