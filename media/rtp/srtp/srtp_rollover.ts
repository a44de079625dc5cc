/**
 * The sender's packet index per SSRC (RFC 3711 §3.3.1): the rollover counter (ROC) goes up
 * when the 16-bit sequence number wraps, and a late packet (a retransmission from before the
 * wrap) is protected with the previous ROC instead of moving the counter back.
 */

interface SsrcIndex {
  roc: number;
  /** Highest sequence number protected so far (s_l). */
  highest: number;
}

const half = 0x8000;

/** Rollover counters of every SSRC one SRTP context protects. */
export class RolloverCounters {
  readonly #bySsrc = new Map<number, SsrcIndex>();

  /**
   * The ROC to protect the packet `sequence` of `ssrc` with; moves the counter forward when
   * the packet is the newest so far.
   */
  rocFor(ssrc: number, sequence: number): number {
    const state = this.#bySsrc.get(ssrc);
    if (!state) {
      this.#bySsrc.set(ssrc, { roc: 0, highest: sequence });
      return 0;
    }
    const { roc, highest } = state;
    let guess = roc;
    if (highest < half) {
      if (sequence - highest > half) guess = roc - 1;
    } else if (highest - half > sequence) {
      guess = roc + 1;
    }
    if (guess > roc || (guess === roc && sequence > highest)) {
      state.roc = guess;
      state.highest = sequence;
    }
    // Before the first wrap there is no earlier cycle: such a packet belongs to ROC 0.
    return guess < 0 ? 0 : guess >>> 0;
  }

  /** Starts `ssrc` at `roc` (a stream that moves here mid-way keeps its cycle). */
  set(ssrc: number, roc: number, highest: number): void {
    this.#bySsrc.set(ssrc, { roc, highest });
  }

  /** The current ROC of `ssrc` (0 when it has sent nothing). */
  current(ssrc: number): number {
    return this.#bySsrc.get(ssrc)?.roc ?? 0;
  }
}
