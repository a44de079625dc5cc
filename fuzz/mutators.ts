/**
 * Mutators of the fuzz runner: each input is a seed of the corpus with a few stacked
 * mutations (bit flips, byte inserts and deletes, splices with another seed, interesting
 * values, truncation, repeated ranges). An input depends only on the run's seed and its index,
 * so any finding replays from those two numbers.
 */
import { prng } from "../media/formats/test_fixtures.ts";

export { prng };

/** A seeded PRNG: a function giving numbers in [0, 1). */
export type Rng = () => number;

/** The PRNG of input `index` of a run seeded with `seed`. */
export function inputRng(seed: number, index: number): Rng {
  return prng(Math.imul(seed ^ 0x5bd1e995, 0x9e3779b1) ^ Math.imul(index + 1, 0x85ebca6b));
}

/** Values that sit on the edges parsers check: zero, sign bits, all ones, small lengths. */
const interesting8 = [0, 1, 0x7f, 0x80, 0xff, 0x10, 0x20, 0x40];
const interesting16 = [0, 0x0100, 0x7fff, 0x8000, 0xffff, 0x0fff, 0x1000];
const interesting32 = [0, 0x7fffffff, 0x80000000, 0xffffffff, 0x00010000, 0x01000000, 0xfffe];

const pick = <T>(rng: Rng, items: readonly T[]): T => items[Math.floor(rng() * items.length)];
const below = (rng: Rng, n: number): number => Math.floor(rng() * n);

/** A length for an edit: mostly short, sometimes up to a tenth of the input. */
function editLength(rng: Rng, size: number): number {
  return rng() < 0.8 ? 1 + below(rng, 8) : 1 + below(rng, Math.max(1, size >> 3));
}

function flipBits(rng: Rng, data: Uint8Array): Uint8Array {
  if (data.length === 0) return data;
  const out = data.slice();
  const flips = 1 + below(rng, 8);
  for (let i = 0; i < flips; i++) out[below(rng, out.length)] ^= 1 << below(rng, 8);
  return out;
}

function setBytes(rng: Rng, data: Uint8Array): Uint8Array {
  if (data.length === 0) return data;
  const out = data.slice();
  const n = 1 + below(rng, 4);
  for (let i = 0; i < n; i++) out[below(rng, out.length)] = below(rng, 256);
  return out;
}

function insertBytes(rng: Rng, data: Uint8Array): Uint8Array {
  const at = below(rng, data.length + 1);
  const n = editLength(rng, data.length);
  const out = new Uint8Array(data.length + n);
  out.set(data.subarray(0, at));
  const fill = rng() < 0.5 ? below(rng, 256) : -1;
  for (let i = 0; i < n; i++) out[at + i] = fill >= 0 ? fill : below(rng, 256);
  out.set(data.subarray(at), at + n);
  return out;
}

function deleteBytes(rng: Rng, data: Uint8Array): Uint8Array {
  if (data.length === 0) return data;
  const at = below(rng, data.length);
  const n = Math.min(editLength(rng, data.length), data.length - at);
  const out = new Uint8Array(data.length - n);
  out.set(data.subarray(0, at));
  out.set(data.subarray(at + n), at);
  return out;
}

function repeatRange(rng: Rng, data: Uint8Array): Uint8Array {
  if (data.length === 0) return data;
  const from = below(rng, data.length);
  const n = Math.min(editLength(rng, data.length), data.length - from);
  const at = below(rng, data.length + 1);
  const times = 1 + below(rng, 4);
  const out = new Uint8Array(data.length + n * times);
  out.set(data.subarray(0, at));
  for (let i = 0; i < times; i++) out.set(data.subarray(from, from + n), at + i * n);
  out.set(data.subarray(at), at + n * times);
  return out;
}

function interestingValue(rng: Rng, data: Uint8Array): Uint8Array {
  const width = pick(rng, [1, 2, 4]);
  if (data.length < width) return data;
  const out = data.slice();
  const at = below(rng, out.length - width + 1);
  const view = new DataView(out.buffer, out.byteOffset, out.byteLength);
  const littleEndian = rng() < 0.25;
  if (width === 1) out[at] = pick(rng, interesting8);
  else if (width === 2) view.setUint16(at, pick(rng, interesting16), littleEndian);
  else view.setUint32(at, pick(rng, interesting32), littleEndian);
  return out;
}

function truncate(rng: Rng, data: Uint8Array): Uint8Array {
  return data.subarray(0, below(rng, data.length + 1));
}

/** This input's head joined to another seed's tail (or middle), at random points. */
function splice(rng: Rng, data: Uint8Array, seeds: readonly Uint8Array[]): Uint8Array {
  const other = pick(rng, seeds);
  const head = below(rng, data.length + 1);
  const from = below(rng, other.length + 1);
  const to = rng() < 0.5 ? other.length : from + below(rng, other.length - from + 1);
  const out = new Uint8Array(head + (to - from));
  out.set(data.subarray(0, head));
  out.set(other.subarray(from, to), head);
  return out;
}

/** Weighted mutators; splice needs the other seeds. */
const mutators: [
  number,
  (rng: Rng, data: Uint8Array, seeds: readonly Uint8Array[]) => Uint8Array,
][] = [
  [4, flipBits],
  [2, setBytes],
  [2, insertBytes],
  [2, deleteBytes],
  [1, repeatRange],
  [3, interestingValue],
  [1, truncate],
  [1, splice],
];
const totalWeight = mutators.reduce((n, [w]) => n + w, 0);

/**
 * Input `index` of a run: a seed picked by the PRNG with one to four stacked mutations,
 * capped at `maxBytes`.
 */
export function makeInput(
  seeds: readonly Uint8Array[],
  seed: number,
  index: number,
  maxBytes: number,
): Uint8Array {
  const rng = inputRng(seed, index);
  let data = pick(rng, seeds);
  const rounds = 1 + below(rng, 4);
  for (let r = 0; r < rounds; r++) {
    let roll = rng() * totalWeight;
    for (const [weight, mutate] of mutators) {
      roll -= weight;
      if (roll < 0) {
        data = mutate(rng, data, seeds);
        break;
      }
    }
  }
  return data.length > maxBytes ? data.subarray(0, maxBytes) : data;
}
