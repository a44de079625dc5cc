/**
 * Design of the polyphase low-pass filters of the resampler: a Blackman-windowed sinc,
 * one phase per output position between two input samples.
 */

import { KernelError } from "./errors.ts";

/** Sample rates the resampler converts between, in Hz. */
export const resampleRatesHz = [8000, 16000, 44100, 48000] as const;

/** Zero crossings of the sinc on each side of its centre: longer means sharper. */
const zeroCrossings = 10;
/** Passband edge as a fraction of the lower Nyquist frequency; the rest is transition. */
const passbandFraction = 0.92;

/** A polyphase filter for the rational factor `phases` / `step` (output / input rate). */
export interface ResampleFilter {
  /** Upsampling factor L: output positions between two input samples. */
  phases: number;
  /** Downsampling factor M: input positions (in 1/L frame) between two outputs. */
  step: number;
  /** Input frames each output frame reads; a multiple of 4. */
  taps: number;
  /** Channels the coefficients are laid out for (1 or 2). */
  channels: number;
  /**
   * phases x taps x channels coefficients: phase p, tap i, repeated once per channel, so
   * the kernel multiplies interleaved samples lane by lane.
   */
  coefficients: Float32Array;
}

function gcd(a: number, b: number): number {
  return b === 0 ? a : gcd(b, a % b);
}

function checkRate(rate: number): void {
  if (!(resampleRatesHz as readonly number[]).includes(rate)) {
    throw new KernelError(`sample rate ${rate} Hz is not one of ${resampleRatesHz.join(", ")}`);
  }
}

/** Designs the filter from `fromHz` to `toHz` for interleaved audio of 1 or 2 channels. */
export function designResampleFilter(
  fromHz: number,
  toHz: number,
  channels: number,
): ResampleFilter {
  checkRate(fromHz);
  checkRate(toHz);
  if (channels !== 1 && channels !== 2) {
    throw new KernelError(`the resampler takes 1 or 2 channels, not ${channels}`);
  }
  const g = gcd(fromHz, toHz);
  const phases = toHz / g;
  const step = fromHz / g;
  // Cutoff in cycles per input sample, below the lower of the two Nyquist frequencies.
  const cutoff = 0.5 * Math.min(1, phases / step) * passbandFraction;
  const taps = Math.ceil(zeroCrossings / cutoff / 4) * 4;
  const half = taps / 2;
  const coefficients = new Float32Array(phases * taps * channels);
  const tap = new Float64Array(taps);
  for (let p = 0; p < phases; p++) {
    let sum = 0;
    for (let i = 0; i < taps; i++) {
      const d = i - (half - 1) - p / phases;
      const x = 2 * cutoff * d;
      const sinc = x === 0 ? 1 : Math.sin(Math.PI * x) / (Math.PI * x);
      const window = Math.abs(d) >= half
        ? 0
        : 0.42 + 0.5 * Math.cos(Math.PI * d / half) + 0.08 * Math.cos(2 * Math.PI * d / half);
      tap[i] = sinc * window;
      sum += tap[i];
    }
    for (let i = 0; i < taps; i++) {
      // Unit gain at DC in every phase, so a constant signal stays constant.
      for (let c = 0; c < channels; c++) {
        coefficients[(p * taps + i) * channels + c] = tap[i] / sum;
      }
    }
  }
  return { phases, step, taps, channels, coefficients };
}
