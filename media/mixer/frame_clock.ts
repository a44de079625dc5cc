/**
 * A drift-free periodic timer for output frames: tick n is due at start + n x interval, so
 * timer jitter never accumulates. When the event loop falls behind, the missed ticks are
 * skipped and the next tick carries its true index, keeping timestamps on the rate grid.
 */

/** Calls `onTick(index)` every `intervalMs` milliseconds until closed. */
export class FrameClock {
  readonly #intervalMs: number;
  readonly #onTick: (index: number) => void;
  #startMs = 0;
  #next = 0;
  #timer: ReturnType<typeof setTimeout> | undefined;

  /** A stopped clock; `start` starts it. */
  constructor(intervalMs: number, onTick: (index: number) => void) {
    if (!(intervalMs > 0)) throw new RangeError(`frame interval ${intervalMs} ms is not positive`);
    this.#intervalMs = intervalMs;
    this.#onTick = onTick;
  }

  /** Starts ticking now with tick 0, unless running already. */
  start(): void {
    if (this.#timer !== undefined) return;
    this.#startMs = performance.now();
    this.#next = 0;
    this.#schedule();
  }

  #schedule(): void {
    const delayMs = this.#startMs + this.#next * this.#intervalMs - performance.now();
    this.#timer = setTimeout(() => this.#fire(), Math.max(0, delayMs));
  }

  #fire(): void {
    const due = Math.floor((performance.now() - this.#startMs) / this.#intervalMs);
    const index = Math.max(this.#next, due);
    this.#next = index + 1;
    this.#schedule();
    this.#onTick(index);
  }

  /** Stops the clock; no tick fires afterwards. */
  close(): void {
    clearTimeout(this.#timer);
    this.#timer = undefined;
  }
}
