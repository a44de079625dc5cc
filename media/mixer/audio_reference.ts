/**
 * Plain TypeScript references of the audio kernels, in double precision, for the tests and
 * the benchmark baseline.
 */

import type { AudioLevels } from "./audio_kernels.ts";
import type { ResampleFilter } from "./resample_filter.ts";

/** Level where the soft clipper starts bending (must match wasm/assembly/audio.ts). */
export const softClipKneeLevel = 0.75;

/** The soft clipper: identity up to the knee, then a smooth curve towards full scale. */
export function softClipReference(x: number): number {
  const k = softClipKneeLevel;
  const ax = Math.abs(x);
  const d = Math.max(ax - k, 0) / (1 - k);
  const y = Math.min(ax, k) + (1 - k) * d / (1 + d);
  return x < 0 ? -y : y;
}

function normalized(samples: Int16Array | Float32Array, i: number): number {
  return samples instanceof Int16Array ? samples[i] / 32768 : samples[i];
}

/**
 * Reference of the mix: the sum of every input times its gain, soft-clipped, written to
 * `out` (Int16 scaled by 32767 and rounded, or Float32).
 */
export function mixReference(
  inputs: { samples: Int16Array | Float32Array; gain: number }[],
  out: Int16Array | Float32Array,
): void {
  for (let i = 0; i < out.length; i++) {
    let sum = 0;
    for (const input of inputs) sum += normalized(input.samples, i) * input.gain;
    const y = softClipReference(sum);
    out[i] = out instanceof Int16Array ? Math.round(y * 32767) : y;
  }
}

/** Reference of the level meter: RMS and peak relative to full scale. */
export function levelsReference(samples: Int16Array | Float32Array): AudioLevels {
  let squares = 0;
  let peak = 0;
  for (let i = 0; i < samples.length; i++) {
    const v = normalized(samples, i);
    squares += v * v;
    peak = Math.max(peak, Math.abs(v));
  }
  return { rms: samples.length > 0 ? Math.sqrt(squares / samples.length) : 0, peak };
}

/**
 * Reference of the resampler on a whole signal at once: the same filter and alignment as
 * `Resampler`, every output whose input is complete.
 */
export function resampleReference(filter: ResampleFilter, input: Float32Array): Float32Array {
  const { phases, step, taps, channels, coefficients } = filter;
  const lead = taps / 2 - 1;
  const frames = lead + input.length / channels;
  const at = (frame: number, c: number) => frame < lead ? 0 : input[(frame - lead) * channels + c];
  const outFrames = Math.max(0, Math.ceil(((frames - taps + 1) * phases) / step));
  const out = new Float32Array(outFrames * channels);
  for (let k = 0; k < outFrames; k++) {
    const first = Math.floor(k * step / phases);
    const phase = k * step - first * phases;
    for (let c = 0; c < channels; c++) {
      let sum = 0;
      for (let i = 0; i < taps; i++) {
        sum += coefficients[(phase * taps + i) * channels + c] * at(first + i, c);
      }
      out[k * channels + c] = sum;
    }
  }
  return out;
}
