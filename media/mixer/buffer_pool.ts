/**
 * Recycles the ArrayBuffers that frames travel in between threads, so steady-state
 * composing allocates no frame buffers: a buffer transferred to a Worker comes back with the
 * reply and waits here for the next frame of the same size.
 */

/** Buffers kept per byte size by default; more are left to the garbage collector. */
const defaultPooledPerSize = 8;

/** A pool of ArrayBuffers by exact byte length. */
export class BufferPool {
  readonly #free = new Map<number, ArrayBuffer[]>();
  readonly #maxPerSize: number;

  /** @param maxPerSize buffers kept per byte size; more are left to the garbage collector. */
  constructor(maxPerSize = defaultPooledPerSize) {
    this.#maxPerSize = maxPerSize;
  }

  /** A buffer of exactly `bytes` bytes, reused when one is free (contents undefined). */
  take(bytes: number): ArrayBuffer {
    return this.#free.get(bytes)?.pop() ?? new ArrayBuffer(bytes);
  }

  /** Gives a buffer back for reuse; detached (transferred) buffers are ignored. */
  give(buffer: ArrayBuffer): void {
    if (buffer.detached) return;
    let list = this.#free.get(buffer.byteLength);
    if (!list) {
      list = [];
      this.#free.set(buffer.byteLength, list);
    }
    // Given twice, it would be handed to two users at once.
    if (list.length < this.#maxPerSize && !list.includes(buffer)) list.push(buffer);
  }

  /** Drops every pooled buffer. */
  clear(): void {
    this.#free.clear();
  }
}

/**
 * The pictures' pool of the process: video decoders read pictures into its buffers, and the
 * composers that are handed them move them to their Worker uncopied and give them back
 * here, so decoding at 30 fps allocates (and zeroes) no picture buffers. Room for a few
 * pictures in flight per input of a few mixers.
 */
export const pictureBuffers = new BufferPool(32);
