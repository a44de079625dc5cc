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
  readonly #maxBytes: number;
  /** Bytes of the buffers kept. */
  #bytes = 0;

  /**
   * @param maxPerSize buffers kept per byte size; more are left to the garbage collector.
   * @param maxBytes bytes kept in all: what an idle pool may hold on to.
   */
  constructor(maxPerSize = defaultPooledPerSize, maxBytes = Infinity) {
    this.#maxPerSize = maxPerSize;
    this.#maxBytes = maxBytes;
  }

  /** A buffer of exactly `bytes` bytes, reused when one is free (contents undefined). */
  take(bytes: number): ArrayBuffer {
    const buffer = this.#free.get(bytes)?.pop();
    if (!buffer) return new ArrayBuffer(bytes);
    this.#bytes -= bytes;
    return buffer;
  }

  /** Gives a buffer back for reuse; detached (transferred) buffers are ignored. */
  give(buffer: ArrayBuffer): void {
    if (buffer.detached) return;
    let list = this.#free.get(buffer.byteLength);
    if (!list) {
      list = [];
      this.#free.set(buffer.byteLength, list);
    }
    if (list.length >= this.#maxPerSize || this.#bytes + buffer.byteLength > this.#maxBytes) return;
    // Given twice, it would be handed to two users at once.
    if (list.includes(buffer)) return;
    list.push(buffer);
    this.#bytes += buffer.byteLength;
  }

  /** Drops every pooled buffer. */
  clear(): void {
    this.#free.clear();
    this.#bytes = 0;
  }
}

/**
 * The pictures' pool of the process: video decoders read pictures into its buffers, and the
 * composers that are handed them move them to their Worker uncopied and give them back
 * here, so decoding at 30 fps allocates (and zeroes) no picture buffers. Room for a few
 * pictures in flight per input of a few mixers; at most 64 MiB kept once they stop.
 */
export const pictureBuffers = new BufferPool(32, 64 * 1024 * 1024);
