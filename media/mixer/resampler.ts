/**
 * Streaming sample-rate converter for interleaved Float32 audio, on the resample kernel.
 * Chunks of any size go in; every output frame whose input has arrived comes out, so the
 * output count per chunk varies by a frame or so around chunk x toHz / fromHz.
 */

import type { AudioKernels } from "./audio_kernels.ts";
import { designResampleFilter, type ResampleFilter } from "./resample_filter.ts";

/** Converts one stream between two of `resampleRatesHz`. */
export class Resampler {
  /** The filter in use (exposed for the reference tests). */
  readonly filter: ResampleFilter;
  readonly #kernels: AudioKernels;
  readonly #table: number;
  #buffer = 0;
  #bufferFrames = 0;
  #output = 0;
  #outputFrames = 0;
  /** Frames held in the buffer: the input not yet fully used. */
  #held: number;
  /** Position of the next output's first tap in the buffer, in 1/phases frame. */
  #position = 0;
  #closed = false;

  /** A converter from `fromHz` to `toHz` for `channels` (1 or 2) interleaved channels. */
  constructor(kernels: AudioKernels, fromHz: number, toHz: number, channels: number) {
    this.#kernels = kernels;
    this.filter = designResampleFilter(fromHz, toHz, channels);
    const { coefficients, taps } = this.filter;
    this.#table = kernels.heap.alloc(coefficients.byteLength);
    kernels.heap.float32(this.#table, coefficients.length).set(coefficients);
    // Leading silence puts the first output on the first input sample.
    this.#held = taps / 2 - 1;
    this.#reserve(this.#held + taps, 0);
    kernels.heap.float32(this.#buffer, this.#held * channels).fill(0);
  }

  #reserve(inputFrames: number, outputFrames: number): void {
    const { heap } = this.#kernels;
    const channels = this.filter.channels;
    if (inputFrames > this.#bufferFrames) {
      const grown = heap.alloc(inputFrames * channels * 4);
      if (this.#bufferFrames > 0) {
        const count = this.#held * channels;
        heap.float32(grown, count).set(heap.float32(this.#buffer, count));
        heap.free(this.#buffer);
      }
      this.#buffer = grown;
      this.#bufferFrames = inputFrames;
    }
    if (outputFrames > this.#outputFrames) {
      if (this.#outputFrames > 0) heap.free(this.#output);
      this.#output = heap.alloc(outputFrames * channels * 4);
      this.#outputFrames = outputFrames;
    }
  }

  #outputFramesFor(inputFrames: number): number {
    const { phases, step, taps } = this.filter;
    const available = this.#held + inputFrames;
    return Math.max(0, Math.ceil(((available - taps + 1) * phases - this.#position) / step));
  }

  /**
   * Makes room for `frames` input frames and returns the heap offset where the caller writes
   * them (interleaved Float32) before calling `run(frames)`. The offset stays valid; views on
   * it must be made after the last allocation on the heap.
   */
  prepare(frames: number): number {
    this.#reserve(this.#held + frames, this.#outputFramesFor(frames));
    return this.#buffer + this.#held * this.filter.channels * 4;
  }

  /**
   * Resamples the `frames` input frames written at `prepare`'s offset and returns the output
   * frames now complete, as a view on kernel memory valid until the next allocation.
   */
  run(frames: number): Float32Array {
    const { phases, step, taps, channels } = this.filter;
    const available = this.#held + frames;
    const outFrames = this.#outputFramesFor(frames);
    this.#kernels.resample(
      this.#buffer,
      channels,
      this.#table,
      phases,
      taps,
      step,
      this.#position,
      this.#output,
      outFrames,
    );
    const end = this.#position + outFrames * step;
    const used = Math.floor(end / phases);
    this.#position = end - used * phases;
    this.#held = available - used;
    const { heap } = this.#kernels;
    heap.bytes(this.#buffer, available * channels * 4).copyWithin(0, used * channels * 4);
    // Without enough input yet, nothing is consumed and the taps stay for the next chunk.
    return heap.float32(this.#output, outFrames * channels);
  }

  /**
   * Resamples `input` (interleaved frames at the source rate; not a view on kernel memory)
   * and returns the output frames now complete, as a view valid until the next allocation.
   */
  process(input: Float32Array): Float32Array {
    const frames = input.length / this.filter.channels;
    const at = this.prepare(frames);
    this.#kernels.heap.float32(at, input.length).set(input);
    return this.run(frames);
  }

  /** Frees the kernel memory of this converter. */
  close(): void {
    if (this.#closed) return;
    this.#closed = true;
    const { heap } = this.#kernels;
    heap.free(this.#table);
    heap.free(this.#buffer);
    if (this.#outputFrames > 0) heap.free(this.#output);
  }
}
