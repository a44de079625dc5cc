import assert from "node:assert/strict";
import {
  DtmfDetector,
  dtmfFrequencies,
  dtmfKeys,
  dtmfTone,
  dtmfToneAmplitude,
  goertzelPower,
} from "./dtmf_tone.ts";
import { g711Decode, g711Encode } from "./g711.ts";

/** Q.23: each frequency within ±1.8% of nominal. */
const q23Tolerance = 0.018;

/** Frequency of the strongest peak between `fromHz` and `toHz`, by Goertzel at 0.5 Hz steps. */
function peakHz(samples: Int16Array, fromHz: number, toHz: number): number {
  let best = fromHz;
  let bestPower = -1;
  for (let f = fromHz; f <= toHz; f += 0.5) {
    const p = goertzelPower(samples, f, 8000);
    if (p > bestPower) [best, bestPower] = [f, p];
  }
  return best;
}

/** Keys found in `samples`, fed in packet-sized pieces as a receiver would. */
function detect(samples: Int16Array, piece = 160): string {
  let keys = "";
  const detector = new DtmfDetector((k) => keys += k);
  for (let i = 0; i < samples.length; i += piece) detector.push(samples.subarray(i, i + piece));
  return keys;
}

function concat(parts: Int16Array[]): Int16Array {
  const out = new Int16Array(parts.reduce((n, p) => n + p.length, 0));
  let at = 0;
  for (const p of parts) {
    out.set(p, at);
    at += p.length;
  }
  return out;
}

Deno.test("DTMF tones: every key's two frequencies are within Q.23 tolerance and level", () => {
  for (const key of dtmfKeys) {
    const [low, high] = dtmfFrequencies(key)!;
    const tone = dtmfTone(key, 100);
    assert.equal(tone.length, 800);
    const lowHz = peakHz(tone, 650, 1000);
    const highHz = peakHz(tone, 1150, 1700);
    assert.ok(Math.abs(lowHz - low) / low <= q23Tolerance, `${key}: low ${lowHz} vs ${low}`);
    assert.ok(Math.abs(highHz - high) / high <= q23Tolerance, `${key}: high ${highHz} vs ${high}`);
    // Each tone at the stated amplitude: power of a sine of amplitude A over N is (A N / 2)^2.
    const amplitude = 2 * Math.sqrt(goertzelPower(tone, low, 8000)) / tone.length;
    assert.ok(Math.abs(amplitude / 32767 - dtmfToneAmplitude) < 0.02, `${key}: ${amplitude}`);
  }
  assert.equal(dtmfFrequencies("x"), undefined);
  assert.throws(() => dtmfTone("x", 100), RangeError);
});

Deno.test("DTMF detector: every key, once each, through G.711, in 100 ms tones with 50 ms gaps", () => {
  const gap = new Int16Array(400);
  const digits = "0123456789*#ABCD11";
  const audio = concat([...digits].flatMap((k) => [dtmfTone(k, 100), gap]));
  assert.equal(detect(audio), digits);
  for (const codec of ["PCMU", "PCMA"] as const) {
    assert.equal(detect(g711Decode(codec, g711Encode(codec, audio)), 333), digits, codec);
  }
});

Deno.test("DTMF detector: tones 1.5% off are found; white noise, one tone and silence are not", () => {
  const off = new Int16Array(800);
  for (let i = 0; i < off.length; i++) {
    off[i] = 8000 * (Math.sin(2 * Math.PI * 697 * 1.015 * i / 8000) +
      Math.sin(2 * Math.PI * 1209 * 0.985 * i / 8000));
  }
  assert.equal(detect(off), "1");
  let seed = 1;
  const noise = Int16Array.from({ length: 8000 }, () => {
    seed = (seed * 1103515245 + 12345) & 0x7fffffff;
    return (seed % 16000) - 8000;
  });
  assert.equal(detect(noise), "");
  const single = Int16Array.from(
    { length: 8000 },
    (_, i) => 10000 * Math.sin(2 * Math.PI * 1000 * i / 8000),
  );
  assert.equal(detect(single), "");
  const lowOnly = Int16Array.from(
    { length: 8000 },
    (_, i) => 10000 * Math.sin(2 * Math.PI * 770 * i / 8000),
  );
  assert.equal(detect(lowOnly), "");
  assert.equal(detect(new Int16Array(8000)), "");
  // A weak tone under the level floor is ignored (about -60 dBFS).
  const weak = dtmfTone("5", 200).map((s) => s / 300);
  assert.equal(detect(weak), "");
  // A tone with noise 20 dB below it is still found.
  const noisy = dtmfTone("9", 200).map((s, i) => s + noise[i] / 10);
  assert.equal(detect(noisy), "9");
});
