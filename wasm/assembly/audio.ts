// @ts-nocheck: AssemblyScript source (i32, v128, load<T>); asc type-checks it, Deno does not.
/**
 * Audio kernels on interleaved PCM in linear memory: Int16 samples or Float32 samples in
 * [-1, 1]. Counts are samples (frames x channels). The mixer accumulates in Float32.
 *
 * The host owns the memory and passes byte offsets; SIMD loops handle 4 or 8 samples a step
 * and finish with a scalar tail, so they never touch bytes past a buffer.
 */

/** Level above which the soft clipper starts to bend the signal (full scale = 1). */
const kneeLevel: f32 = 0.75;
const int16Scale: f32 = 1.0 / 32768.0;

/** Soft clipper: identity up to the knee, then a smooth curve towards full scale. */
function softClip(x: f32): f32 {
  const ax = abs(x);
  const d = max<f32>(ax - kneeLevel, 0) / (1 - kneeLevel);
  const y = min<f32>(ax, kneeLevel) + (1 - kneeLevel) * (d / (1 + d));
  return x < 0 ? -y : y;
}

function softClip4(x: v128): v128 {
  const ax = f32x4.abs(x);
  const d = f32x4.div(
    f32x4.max(f32x4.sub(ax, f32x4.splat(kneeLevel)), f32x4.splat(0)),
    f32x4.splat(1 - kneeLevel),
  );
  const y = f32x4.add(
    f32x4.min(ax, f32x4.splat(kneeLevel)),
    f32x4.mul(f32x4.splat(1 - kneeLevel), f32x4.div(d, f32x4.add(f32x4.splat(1), d))),
  );
  return v128.or(y, v128.and(x, i32x4.splat(0x80000000)));
}

/** Adds `count` Int16 samples times `gain` into the Float32 accumulator. */
export function mixAddI16(acc: usize, src: usize, count: i32, gain: f32): void {
  const g = gain * int16Scale;
  const gv = f32x4.splat(g);
  let i = 0;
  for (; i + 8 <= count; i += 8) {
    const s = v128.load(src + (<usize> i << 1));
    const a = acc + (<usize> i << 2);
    const low = f32x4.convert_i32x4_s(i32x4.extend_low_i16x8_s(s));
    const high = f32x4.convert_i32x4_s(i32x4.extend_high_i16x8_s(s));
    v128.store(a, f32x4.add(v128.load(a), f32x4.mul(low, gv)));
    v128.store(a, f32x4.add(v128.load(a, 16), f32x4.mul(high, gv)), 16);
  }
  for (; i < count; i++) {
    const a = acc + (<usize> i << 2);
    store<f32>(a, load<f32>(a) + <f32> load<i16>(src + (<usize> i << 1)) * g);
  }
}

/** Adds `count` Float32 samples times `gain` into the Float32 accumulator. */
export function mixAddF32(acc: usize, src: usize, count: i32, gain: f32): void {
  const gv = f32x4.splat(gain);
  let i = 0;
  for (; i + 4 <= count; i += 4) {
    const at = <usize> i << 2;
    v128.store(acc + at, f32x4.add(v128.load(acc + at), f32x4.mul(v128.load(src + at), gv)));
  }
  for (; i < count; i++) {
    const at = <usize> i << 2;
    store<f32>(acc + at, load<f32>(acc + at) + load<f32>(src + at) * gain);
  }
}

/** Writes the soft-clipped accumulator as Int16 samples (rounded to nearest). */
export function mixOutI16(acc: usize, dst: usize, count: i32): void {
  const scale = f32x4.splat(32767);
  let i = 0;
  for (; i + 8 <= count; i += 8) {
    const a = acc + (<usize> i << 2);
    const low = i32x4.trunc_sat_f32x4_s(f32x4.nearest(f32x4.mul(softClip4(v128.load(a)), scale)));
    const high = i32x4.trunc_sat_f32x4_s(
      f32x4.nearest(f32x4.mul(softClip4(v128.load(a, 16)), scale)),
    );
    v128.store(dst + (<usize> i << 1), i16x8.narrow_i32x4_s(low, high));
  }
  for (; i < count; i++) {
    const y = nearest<f32>(softClip(load<f32>(acc + (<usize> i << 2))) * 32767);
    store<i16>(dst + (<usize> i << 1), <i16> (<i32> y));
  }
}

/** Writes the soft-clipped accumulator as Float32 samples. */
export function mixOutF32(acc: usize, dst: usize, count: i32): void {
  let i = 0;
  for (; i + 4 <= count; i += 4) {
    const at = <usize> i << 2;
    v128.store(dst + at, softClip4(v128.load(acc + at)));
  }
  for (; i < count; i++) {
    const at = <usize> i << 2;
    store<f32>(dst + at, softClip(load<f32>(acc + at)));
  }
}

/**
 * Measures `count` Int16 samples: writes RMS and peak, both relative to full scale (32768),
 * as two Float32 at `out`.
 */
export function levelsI16(src: usize, count: i32, out: usize): void {
  let squares = f32x4.splat(0);
  let peak = i32x4.splat(0);
  let i = 0;
  for (; i + 8 <= count; i += 8) {
    const s = v128.load(src + (<usize> i << 1));
    const low = i32x4.extend_low_i16x8_s(s);
    const high = i32x4.extend_high_i16x8_s(s);
    peak = i32x4.max_s(peak, i32x4.max_s(i32x4.abs(low), i32x4.abs(high)));
    const fl = f32x4.convert_i32x4_s(low);
    const fh = f32x4.convert_i32x4_s(high);
    squares = f32x4.add(squares, f32x4.add(f32x4.mul(fl, fl), f32x4.mul(fh, fh)));
  }
  let sum = <f64> f32x4.extract_lane(squares, 0) + <f64> f32x4.extract_lane(squares, 1) +
    <f64> f32x4.extract_lane(squares, 2) + <f64> f32x4.extract_lane(squares, 3);
  let top = max(
    max(i32x4.extract_lane(peak, 0), i32x4.extract_lane(peak, 1)),
    max(i32x4.extract_lane(peak, 2), i32x4.extract_lane(peak, 3)),
  );
  for (; i < count; i++) {
    const v = <i32> load<i16>(src + (<usize> i << 1));
    sum += <f64> (v * v);
    top = max(top, abs(v));
  }
  store<f32>(out, count > 0 ? <f32> (Math.sqrt(sum / <f64> count) / 32768) : 0);
  store<f32>(out, <f32> top * int16Scale, 4);
}

/** Measures `count` Float32 samples: writes RMS and peak as two Float32 at `out`. */
export function levelsF32(src: usize, count: i32, out: usize): void {
  let squares = f32x4.splat(0);
  let peak = f32x4.splat(0);
  let i = 0;
  for (; i + 4 <= count; i += 4) {
    const s = v128.load(src + (<usize> i << 2));
    peak = f32x4.max(peak, f32x4.abs(s));
    squares = f32x4.add(squares, f32x4.mul(s, s));
  }
  let sum = <f64> f32x4.extract_lane(squares, 0) + <f64> f32x4.extract_lane(squares, 1) +
    <f64> f32x4.extract_lane(squares, 2) + <f64> f32x4.extract_lane(squares, 3);
  let top = max(
    max(f32x4.extract_lane(peak, 0), f32x4.extract_lane(peak, 1)),
    max(f32x4.extract_lane(peak, 2), f32x4.extract_lane(peak, 3)),
  );
  for (; i < count; i++) {
    const v = load<f32>(src + (<usize> i << 2));
    sum += <f64> v * <f64> v;
    top = max(top, abs(v));
  }
  store<f32>(out, count > 0 ? <f32> Math.sqrt(sum / <f64> count) : 0);
  store<f32>(out, top, 4);
}

/** Converts `count` Int16 samples to Float32 in [-1, 1). */
export function int16ToFloat32(src: usize, dst: usize, count: i32): void {
  const scale = f32x4.splat(int16Scale);
  let i = 0;
  for (; i + 8 <= count; i += 8) {
    const s = v128.load(src + (<usize> i << 1));
    const d = dst + (<usize> i << 2);
    v128.store(d, f32x4.mul(f32x4.convert_i32x4_s(i32x4.extend_low_i16x8_s(s)), scale));
    v128.store(d, f32x4.mul(f32x4.convert_i32x4_s(i32x4.extend_high_i16x8_s(s)), scale), 16);
  }
  for (; i < count; i++) {
    store<f32>(dst + (<usize> i << 2), <f32> load<i16>(src + (<usize> i << 1)) * int16Scale);
  }
}

/**
 * Resamples interleaved Float32 by the rational factor L/M with a polyphase FIR table
 * (`phases` = L phases of `taps` coefficients, each repeated per channel so that one f32x4
 * covers 4 / channels taps). Output k uses input frames from floor((start + k * step) / L),
 * with phase (start + k * step) mod L; the host guarantees those frames exist.
 */
export function resample(
  src: usize,
  channels: i32,
  table: usize,
  phases: i32,
  taps: i32,
  step: i32,
  start: i32,
  dst: usize,
  frames: i32,
): void {
  const width = taps * channels;
  for (let k = 0; k < frames; k++) {
    const position = start + k * step;
    const first = position / phases;
    const phase = position - first * phases;
    const x = src + (<usize> (first * channels) << 2);
    const h = table + (<usize> (phase * width) << 2);
    let acc = f32x4.splat(0);
    for (let t = 0; t < width; t += 4) {
      const at = <usize> t << 2;
      acc = f32x4.add(acc, f32x4.mul(v128.load(x + at), v128.load(h + at)));
    }
    const out = dst + (<usize> (k * channels) << 2);
    if (channels == 1) {
      store<f32>(
        out,
        (f32x4.extract_lane(acc, 0) + f32x4.extract_lane(acc, 1)) +
          (f32x4.extract_lane(acc, 2) + f32x4.extract_lane(acc, 3)),
      );
    } else {
      store<f32>(out, f32x4.extract_lane(acc, 0) + f32x4.extract_lane(acc, 2));
      store<f32>(out, f32x4.extract_lane(acc, 1) + f32x4.extract_lane(acc, 3), 4);
    }
  }
}
