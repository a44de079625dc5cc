/**
 * Recycles the ArrayBuffers that frames travel in between threads, so steady-state
 * composing allocates no frame buffers: a buffer transferred to a Worker comes back with the
 * reply and waits here for the next frame of the same size.
 */

/** Buffers kept per byte size; more are left to the garbage collector. */
const maxPooledPerSize = 8;

/** A pool of ArrayBuffers by exact byte length. */
export class BufferPool {
  readonly #free = new Map<number, ArrayBuffer[]>();

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
    if (list.length < maxPooledPerSize) list.push(buffer);
  }

  /** Drops every pooled buffer. */
  clear(): void {
    this.#free.clear();
  }
}
