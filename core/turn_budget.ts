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
 */

/** Time gated work may take in one turn of the event loop before the rest waits, in ms. */
export const defaultTurnBudgetMs = 4;

/** A budget of event-loop time per turn for work that can wait; see the module comment. */
export class TurnBudget {
  readonly #budgetMs: number;
  /** When the current slice began (performance.now()); undefined between slices. */
  #sliceStartedAt: number | undefined;
  #waiting: (() => void)[] = [];
  #timer: ReturnType<typeof setTimeout> | undefined;
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
        this.#armTimer();
        return undefined;
      }
      if (performance.now() - this.#sliceStartedAt < this.#budgetMs) return undefined;
    }
    this.#deferred++;
    const { promise, resolve } = Promise.withResolvers<void>();
    this.#waiting.push(resolve);
    this.#armTimer();
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

  /**
   * Ends the current slice at the next turn (a timer fires only once the turn that set it
   * has ended); there, the waiting work gets a new slice.
   */
  #armTimer(): void {
    this.#timer ??= setTimeout(() => this.#nextTurn(), 0);
  }

  #nextTurn(): void {
    this.#timer = undefined;
    this.#sliceStartedAt = undefined;
    if (this.#waiting.length === 0) return;
    this.#sliceStartedAt = performance.now();
    this.#armTimer();
    this.#releaseNext();
  }

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
