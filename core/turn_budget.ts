/**
 * Slices bursts of work that can wait (Web SDK messages, REST operations) across turns of the
 * event loop. The event loop runs the continuations of every operation that completed since
 * its last turn in one go: the `connection` messages of 300 clients that arrived together
 * ran back to back, and a `/health` request that came in meanwhile was read only once all
 * had run. Work that passes `admit()` runs at once while the current slice has time left;
 * beyond `budgetMs` it waits, in arrival order, for a later turn, so I/O and timers (the
 * control plane) run between slices. Work that must not wait (`/health`) never passes here.
 *
 * WebSocket handshakes are not sliced: their request heads arrive spread over turns, and in
 * a burst of 200 none waited (tests/turn_budget_test.ts).
 *
 * A slice ends at the next tick of an interval of `tickMs` (a timer fires only between turns,
 * never within one): a timer armed per turn cost about half a microsecond for every REST
 * request under load (one request a turn), the interval's ticks a thousand a second while
 * work comes in. It stops at the first tick that saw no work since the one before. A slice may
 * so span a few short turns, which only makes it end sooner, never later.
 */

/** Time gated work may take in one turn of the event loop before the rest waits, in ms. */
export const defaultTurnBudgetMs = 4;
/** Interval of the ticks that end slices while work comes in, in ms. */
const tickMs = 1;

/** A budget of event-loop time per turn for work that can wait; see the module comment. */
export class TurnBudget {
  readonly #budgetMs: number;
  /** When the current slice began (performance.now()); undefined between slices. */
  #sliceStartedAt: number | undefined;
  #waiting: (() => void)[] = [];
  #ticker: ReturnType<typeof setInterval> | undefined;
  /** Whether a slice started since the last tick (the ticks stop after one without). */
  #admittedSinceTick = false;
  #deferred = 0;

  /** @param budgetMs time gated work may take per turn, in ms. */
  constructor(budgetMs = defaultTurnBudgetMs) {
    this.#budgetMs = budgetMs;
  }

  /**
   * Undefined when the work may run now; else a promise that resolves in a later turn, after
   * the work that waited before it. `await budget.admit()` does either.
   */
  admit(): Promise<void> | undefined {
    if (this.#waiting.length === 0) {
      if (this.#sliceStartedAt === undefined) {
        this.#sliceStartedAt = performance.now();
        this.#admittedSinceTick = true;
        this.#ticker ??= setInterval(this.#tick, tickMs);
        return undefined;
      }
      if (performance.now() - this.#sliceStartedAt < this.#budgetMs) return undefined;
    }
    this.#deferred++;
    const { promise, resolve } = Promise.withResolvers<void>();
    this.#waiting.push(resolve);
    this.#ticker ??= setInterval(this.#tick, tickMs);
    return promise;
  }

  /** Work waiting for a later turn now. */
  get waiting(): number {
    return this.#waiting.length;
  }

  /** Work that waited for a later turn since the start. */
  get deferred(): number {
    return this.#deferred;
  }

  /** Ends the current slice; the waiting work gets a new one, or the ticks stop when idle. */
  #tick = (): void => {
    this.#sliceStartedAt = undefined;
    if (this.#waiting.length === 0) {
      if (!this.#admittedSinceTick) {
        clearInterval(this.#ticker);
        this.#ticker = undefined;
      }
      this.#admittedSinceTick = false;
      return;
    }
    this.#admittedSinceTick = true;
    this.#sliceStartedAt = performance.now();
    this.#releaseNext();
  };

  /**
   * Lets the first waiting work run; once it has run up to its next wait (its continuation is
   * the microtask queued before ours), the next one if the slice has time left.
   */
  #releaseNext = (): void => {
    if (this.#waiting.length === 0 || this.#sliceStartedAt === undefined) return;
    if (performance.now() - this.#sliceStartedAt >= this.#budgetMs) return;
    this.#waiting.shift()!();
    queueMicrotask(this.#releaseNext);
  };
}

/**
 * The budget of this process's event loop, shared by all work that can wait: the messages of
 * Web SDK sockets (signaling/websocket/socket.ts) and REST operations (routes/http.ts).
 */
export const turns = new TurnBudget();
