/** A fixed-bucket histogram of short durations (forwarding latency), without allocation per sample. */

/** Width of one bucket, in microseconds. */
export const latencyBucketUs = 5;
/** Buckets; durations beyond the last one count in it. */
const bucketCount = 20_000;

/** Counts durations and reads percentiles. */
export class LatencyHistogram {
  readonly #buckets = new Uint32Array(bucketCount);
  #count = 0;

  /** Number of samples. */
  get count(): number {
    return this.#count;
  }

  /** Adds one duration, in milliseconds. */
  add(ms: number): void {
    const index = Math.min(bucketCount - 1, Math.max(0, Math.floor(ms * 1000 / latencyBucketUs)));
    this.#buckets[index]++;
    this.#count++;
  }

  /** The duration below which `fraction` (0..1) of the samples fall, in milliseconds. */
  percentile(fraction: number): number {
    const target = Math.ceil(this.#count * fraction);
    let seen = 0;
    for (let i = 0; i < bucketCount; i++) {
      seen += this.#buckets[i];
      if (seen >= target && seen > 0) return (i + 1) * latencyBucketUs / 1000;
    }
    return 0;
  }

  /** Forgets every sample. */
  reset(): void {
    this.#buckets.fill(0);
    this.#count = 0;
  }
}
