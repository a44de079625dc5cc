/**
 * Typed host API of the audio kernels (wasm/assembly/audio.ts). Buffers live in the
 * instance's heap and are named by byte offset; counts are samples (frames x channels) of
 * interleaved PCM, Int16 or Float32 in [-1, 1].
 */

import { KernelError } from "./errors.ts";
import { instantiateKernels } from "./kernel_module.ts";
import type { WasmHeap } from "./wasm_heap.ts";

/** Loudness of a buffer, relative to full scale (1 = 0 dBFS). */
export interface AudioLevels {
  /** Root mean square of the samples. */
  rms: number;
  /** Largest absolute sample. */
  peak: number;
}

interface AudioExports {
  mixAddI16(acc: number, src: number, count: number, gain: number): void;
  mixAddF32(acc: number, src: number, count: number, gain: number): void;
  mixOutI16(acc: number, dst: number, count: number): void;
  mixOutF32(acc: number, dst: number, count: number): void;
  levelsI16(src: number, count: number, out: number): void;
  levelsF32(src: number, count: number, out: number): void;
  int16ToFloat32(src: number, dst: number, count: number): void;
  resample(...args: number[]): void;
}

/** Sample formats of interleaved PCM the kernels read. */
export type SampleFormat = "int16" | "float32";

/** One instance of the audio kernels with its own memory. */
export class AudioKernels {
  /** The allocator of this instance's memory. */
  readonly heap: WasmHeap;
  readonly #exports: AudioExports;
  /** Two Float32 the level kernels write into. */
  readonly #levels: number;

  private constructor(heap: WasmHeap, exports: AudioExports) {
    this.heap = heap;
    this.#exports = exports;
    this.#levels = heap.alloc(8);
  }

  /** Loads a fresh instance. */
  static async create(): Promise<AudioKernels> {
    const { exports, heap } = await instantiateKernels("audio");
    return new AudioKernels(heap, exports as unknown as AudioExports);
  }

  /** Zeroes the Float32 accumulator of `count` samples at `acc`. */
  clear(acc: number, count: number): void {
    this.heap.float32(acc, count).fill(0);
  }

  /** Adds `count` samples at `src` times `gain` (linear) into the accumulator `acc`. */
  mixAdd(acc: number, src: number, format: SampleFormat, count: number, gain: number): void {
    if (format === "int16") this.#exports.mixAddI16(acc, src, count, gain);
    else this.#exports.mixAddF32(acc, src, count, gain);
  }

  /** Writes the accumulator, soft-clipped to full scale, as `count` samples at `dst`. */
  mixOut(acc: number, dst: number, format: SampleFormat, count: number): void {
    if (format === "int16") this.#exports.mixOutI16(acc, dst, count);
    else this.#exports.mixOutF32(acc, dst, count);
  }

  /** Measures `count` samples at `src` into `into` (returned). */
  levels(src: number, format: SampleFormat, count: number, into: AudioLevels): AudioLevels {
    if (format === "int16") this.#exports.levelsI16(src, count, this.#levels);
    else this.#exports.levelsF32(src, count, this.#levels);
    const out = this.heap.float32(this.#levels, 2);
    into.rms = out[0];
    into.peak = out[1];
    return into;
  }

  /** Converts `count` Int16 samples at `src` to Float32 at `dst`. */
  int16ToFloat32(src: number, dst: number, count: number): void {
    this.#exports.int16ToFloat32(src, dst, count);
  }

  /**
   * Runs the polyphase resampler (see `Resampler`): `frames` output frames at `dst` from
   * input frames at `src`, starting at position `start` in units of 1/`phases` frame.
   */
  resample(
    src: number,
    channels: number,
    table: number,
    phases: number,
    taps: number,
    step: number,
    start: number,
    dst: number,
    frames: number,
  ): void {
    if ((taps * channels) % 4 !== 0) {
      throw new KernelError(`resampler taps x channels ${taps}x${channels} is not a multiple of 4`);
    }
    this.#exports.resample(src, channels, table, phases, taps, step, start, dst, frames);
  }
}
