/**
 * A token bucket per subscriber track for NACK answers. A path that loses packets because it
 * is overloaded asks for ever more resends; answering all of them multiplies the load until
 * nothing gets through, so resends beyond the budget are skipped.
 */

/** Resends one subscriber track may get per second (a third of a 640x480 stream's packets). */
export const retransmitsPerSecond = 50;

/** Resend allowance of one subscriber track. */
export class RetransmitBudget {
  #tokens = retransmitsPerSecond;
  #refilledMs = performance.now();

  /** Takes one resend from the budget; false when it is spent. */
  take(nowMs: number): boolean {
    const elapsedMs = nowMs - this.#refilledMs;
    if (elapsedMs > 0) {
      this.#tokens = Math.min(
        retransmitsPerSecond,
        this.#tokens + elapsedMs * retransmitsPerSecond / 1000,
      );
      this.#refilledMs = nowMs;
    }
    if (this.#tokens < 1) return false;
    this.#tokens--;
    return true;
  }
}
