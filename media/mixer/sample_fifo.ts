/**
 * A fixed-capacity ring of interleaved Float32 audio: the jitter buffer of one mixer input.
 * Writing maps 1 or 2 source channels onto the ring's channel count (mono is copied to both
 * sides, stereo is averaged to mono).
 */

/** FIFO of audio frames of `channels` interleaved Float32 samples. */
export class SampleFifo {
  /** Channels of every frame in the ring. */
  readonly channels: number;
  readonly #ring: Float32Array;
  readonly #capacityFrames: number;
  #readFrame = 0;
  #frames = 0;

  /** A ring holding at most `capacityFrames` frames of `channels` channels. */
  constructor(capacityFrames: number, channels: number) {
    this.channels = channels;
    this.#capacityFrames = capacityFrames;
    this.#ring = new Float32Array(capacityFrames * channels);
  }

  /** Frames buffered. */
  get frames(): number {
    return this.#frames;
  }

  /**
   * Appends `samples` (interleaved, `channels` per frame). Frames that do not fit push out
   * the oldest ones; returns how many frames were pushed out.
   */
  write(samples: Float32Array, channels: number): number {
    const frames = samples.length / channels;
    const out = this.channels;
    let lost = 0;
    for (let f = 0; f < frames; f++) {
      if (this.#frames === this.#capacityFrames) {
        this.drop(1);
        lost++;
      }
      const at = ((this.#readFrame + this.#frames) % this.#capacityFrames) * out;
      const s = f * channels;
      if (channels === out) {
        for (let c = 0; c < out; c++) this.#ring[at + c] = samples[s + c];
      } else if (channels === 1) {
        this.#ring[at] = this.#ring[at + 1] = samples[s];
      } else {
        this.#ring[at] = (samples[s] + samples[s + 1]) / 2;
      }
      this.#frames++;
    }
    return lost;
  }

  /** Moves up to `into.length / channels` frames into `into`; returns the frames moved. */
  read(into: Float32Array): number {
    const frames = Math.min(this.#frames, into.length / this.channels);
    const first = Math.min(frames, this.#capacityFrames - this.#readFrame);
    const c = this.channels;
    into.set(this.#ring.subarray(this.#readFrame * c, (this.#readFrame + first) * c));
    into.set(this.#ring.subarray(0, (frames - first) * c), first * c);
    this.drop(frames);
    return frames;
  }

  /** Discards the `frames` oldest frames (at most all). */
  drop(frames: number): void {
    const n = Math.min(frames, this.#frames);
    this.#readFrame = (this.#readFrame + n) % this.#capacityFrames;
    this.#frames -= n;
  }
}
