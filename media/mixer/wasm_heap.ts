/**
 * Host-side allocator over the linear memory of a kernel instance. The kernels are built with
 * `--runtime stub` and allocate nothing; the host places every buffer and grows the memory.
 *
 * Growing the memory detaches every typed-array view on it, so views are made fresh by
 * `bytes`/`int16`/`float32` for each use and never kept across an `alloc`.
 */

const pageBytes = 65536;
/** Alignment of every block, in bytes (one v128). */
const alignBytes = 16;
/** Spare bytes after every block: SIMD loops may read (never write) past a row's end. */
const slackBytes = 16;

interface Span {
  start: number;
  size: number;
}

/** First-fit allocator of 16-byte-aligned blocks in a `WebAssembly.Memory`. */
export class WasmHeap {
  readonly #memory: WebAssembly.Memory;
  /** Free spans below `#top`, sorted by start, never adjacent. */
  readonly #free: Span[] = [];
  /** Size of each live block by its start. */
  readonly #live = new Map<number, number>();
  #top: number;

  /** Manages `memory` from its current end on (the module's static data lies below). */
  constructor(memory: WebAssembly.Memory) {
    this.#memory = memory;
    this.#top = memory.buffer.byteLength;
  }

  /** Bytes of the linear memory now. */
  get memoryBytes(): number {
    return this.#memory.buffer.byteLength;
  }

  /** Reserves `bytes` bytes (growing the memory if needed) and returns their offset. */
  alloc(bytes: number): number {
    const size = Math.ceil((Math.max(bytes, 1) + slackBytes) / alignBytes) * alignBytes;
    const index = this.#free.findIndex((span) => span.size >= size);
    let start: number;
    if (index >= 0) {
      const span = this.#free[index];
      start = span.start;
      if (span.size === size) this.#free.splice(index, 1);
      else this.#free[index] = { start: start + size, size: span.size - size };
    } else {
      start = this.#top;
      this.#top += size;
      const missing = this.#top - this.#memory.buffer.byteLength;
      if (missing > 0) this.#memory.grow(Math.ceil(missing / pageBytes));
    }
    this.#live.set(start, size);
    return start;
  }

  /** Returns a block from `alloc` to the heap. */
  free(ptr: number): void {
    const size = this.#live.get(ptr);
    if (size === undefined) throw new RangeError(`no block at ${ptr}`);
    this.#live.delete(ptr);
    let span: Span = { start: ptr, size };
    let at = this.#free.findIndex((s) => s.start > ptr);
    if (at < 0) at = this.#free.length;
    const next = this.#free[at];
    if (next && span.start + span.size === next.start) {
      span = { start: span.start, size: span.size + next.size };
      this.#free.splice(at, 1);
    }
    const previous = this.#free[at - 1];
    if (previous && previous.start + previous.size === span.start) {
      previous.size += span.size;
      span = previous;
    } else {
      this.#free.splice(at, 0, span);
    }
    // A free span at the top goes back to the bump region.
    if (span.start + span.size === this.#top) {
      this.#top = span.start;
      this.#free.splice(this.#free.indexOf(span), 1);
    }
  }

  /** A byte view of `length` bytes at `ptr`; valid until the next `alloc`. */
  bytes(ptr: number, length: number): Uint8Array {
    return new Uint8Array(this.#memory.buffer, ptr, length);
  }

  /** An Int16 view of `count` samples at `ptr`; valid until the next `alloc`. */
  int16(ptr: number, count: number): Int16Array {
    return new Int16Array(this.#memory.buffer, ptr, count);
  }

  /** A Float32 view of `count` samples at `ptr`; valid until the next `alloc`. */
  float32(ptr: number, count: number): Float32Array {
    return new Float32Array(this.#memory.buffer, ptr, count);
  }
}
