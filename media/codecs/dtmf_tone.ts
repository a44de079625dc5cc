/**
 * DTMF in the audio band: the dual tones of ITU-T Q.23 (a low-group and a high-group
 * frequency per key) generated as 16-bit PCM, and a detector that finds them in received
 * audio with the Goertzel algorithm, one block of samples at a time.
 */

/** The keys, row by row: row r uses `dtmfLowHz[r]`, column c `dtmfHighHz[c]`. */
export const dtmfKeys = "123A456B789C*0#D";
/** Q.23 low-group frequencies, in Hz (rows). */
export const dtmfLowHz = [697, 770, 852, 941] as const;
/** Q.23 high-group frequencies, in Hz (columns). */
export const dtmfHighHz = [1209, 1336, 1477, 1633] as const;

/** Amplitude of each of the two tones, as a fraction of full scale (about -12 dBFS each). */
export const dtmfToneAmplitude = 0.25;
/** Samples per detection block at 8 kHz (25.6 ms): the classic Goertzel size for DTMF. */
export const dtmfBlockSamples = 205;

/** The two frequencies of a key, in Hz; undefined for a character that is not a key. */
export function dtmfFrequencies(key: string): [low: number, high: number] | undefined {
  const index = dtmfKeys.indexOf(key.toUpperCase());
  if (key.length !== 1 || index < 0) return undefined;
  return [dtmfLowHz[index >> 2], dtmfHighHz[index & 3]];
}

/**
 * The tone of `key` for `durationMs` at `sampleRate` Hz as 16-bit samples; a RangeError for a
 * character that is not a key.
 */
export function dtmfTone(key: string, durationMs: number, sampleRate = 8000): Int16Array {
  const pair = dtmfFrequencies(key);
  if (!pair) throw new RangeError(`not a DTMF key: ${JSON.stringify(key)}`);
  const out = new Int16Array(Math.round(durationMs * sampleRate / 1000));
  const amplitude = dtmfToneAmplitude * 32767;
  const [w1, w2] = pair.map((f) => 2 * Math.PI * f / sampleRate);
  for (let i = 0; i < out.length; i++) {
    out[i] = Math.round(amplitude * (Math.sin(w1 * i) + Math.sin(w2 * i)));
  }
  return out;
}

/**
 * Power of `frequency` in `samples[start, start + length)` by the Goertzel recurrence,
 * scaled so that a sine of amplitude A over the block gives about (A * length / 2)^2.
 */
export function goertzelPower(
  samples: ArrayLike<number>,
  frequency: number,
  sampleRate: number,
  start = 0,
  length = samples.length - start,
): number {
  const coefficient = 2 * Math.cos(2 * Math.PI * frequency / sampleRate);
  let s1 = 0;
  let s2 = 0;
  for (let i = start; i < start + length; i++) {
    const s0 = samples[i] + coefficient * s1 - s2;
    s2 = s1;
    s1 = s0;
  }
  return s1 * s1 + s2 * s2 - coefficient * s1 * s2;
}

/** Least share of a block's energy the two tones must hold together. */
const minToneShare = 0.4;
/** Largest ratio between the powers of the two tones (8 dB of twist either way). */
const maxTwistRatio = 6.3;
/** Least ratio of a group's strongest tone over its second (about 8 dB). */
const minGroupDominance = 6.3;
/** Least mean square of a block to be looked at (an RMS of 160, about -46 dBFS). */
const minMeanSquare = 160 * 160;

/**
 * Finds DTMF keys in 16-bit audio at 8 kHz: a key is reported once when two blocks in a row
 * hold it, and again only after a block without it (the gap between two presses).
 */
export class DtmfDetector {
  #onKey: (key: string) => void;
  #block = new Float64Array(dtmfBlockSamples);
  #filled = 0;
  #previous: string | undefined;
  #reported: string | undefined;

  /** `onKey` receives each detected key. */
  constructor(onKey: (key: string) => void) {
    this.#onKey = onKey;
  }

  /** Feeds samples (8 kHz, 16-bit range). */
  push(samples: ArrayLike<number>): void {
    for (let i = 0; i < samples.length; i++) {
      this.#block[this.#filled++] = samples[i];
      if (this.#filled === dtmfBlockSamples) {
        this.#filled = 0;
        this.#decide(blockKey(this.#block));
      }
    }
  }

  #decide(key: string | undefined): void {
    if (key !== undefined && key === this.#previous && key !== this.#reported) {
      this.#reported = key;
      this.#onKey(key);
    }
    if (key === undefined) this.#reported = undefined;
    this.#previous = key;
  }
}

/** The key one block holds, if any. */
function blockKey(block: Float64Array): string | undefined {
  let energy = 0;
  for (let i = 0; i < block.length; i++) energy += block[i] * block[i];
  if (energy / block.length < minMeanSquare) return undefined;
  // A sine of amplitude A holds A^2 N / 2 of the energy and gives a power of (A N / 2)^2.
  const toShare = 2 / (block.length * energy);
  const low = strongest(block, dtmfLowHz);
  const high = strongest(block, dtmfHighHz);
  if (low.index < 0 || high.index < 0) return undefined;
  if ((low.power + high.power) * toShare < minToneShare) return undefined;
  const twist = low.power / high.power;
  if (twist > maxTwistRatio || twist < 1 / maxTwistRatio) return undefined;
  return dtmfKeys[low.index * 4 + high.index];
}

/** The dominant frequency of a group, or index -1 when none stands out. */
function strongest(
  block: Float64Array,
  group: readonly number[],
): { index: number; power: number } {
  const powers = group.map((f) => goertzelPower(block, f, 8000));
  let best = 0;
  for (let i = 1; i < powers.length; i++) if (powers[i] > powers[best]) best = i;
  for (let i = 0; i < powers.length; i++) {
    if (i !== best && powers[i] * minGroupDominance > powers[best]) return { index: -1, power: 0 };
  }
  return { index: best, power: powers[best] };
}
