/**
 * The bitrate the server tells a publisher it may send (REMB), so the browser's send-side
 * estimator (which without transport-wide feedback has no delay-based estimate) can leave its
 * starting rate: the configured cap while the publisher's packets arrive without loss, cut
 * like a loss-based estimator when they do not (to what arrives, less half the loss), and
 * grown back by a fixed share per second once clean again.
 */

/** How often a publisher is sent its REMB, in milliseconds. */
export const uplinkRembIntervalMs = 500;
/** Loss share (0-1) over one update above which the estimate is cut. */
export const uplinkLossDownFraction = 0.1;
/** Loss share (0-1) at or under which the estimate grows back. */
export const uplinkLossCleanFraction = 0.02;
/** Growth per second of a clean estimate, as a factor. */
export const uplinkGrowthPerSecond = 1.08;
/** The estimate is never cut under this by default, in kbit/s. */
export const uplinkMinKbps = 100;

/** One publisher's estimate, fed its cumulative packet counts. */
export class UplinkEstimate {
  readonly capKbps: number;
  /** The estimate is never cut under this, in kbit/s. */
  readonly minKbps: number;
  #kbps: number;
  #expected = 0;
  #received = 0;
  #atMs: number | undefined;

  /**
   * `capKbps`: the most the publisher is told it may send (config sfu.maxPublishBitrateKbps,
   * media.maxPublishBitrateKbps); `minKbps`: the least, however much is lost (at most the cap).
   */
  constructor(capKbps: number, minKbps = uplinkMinKbps) {
    this.capKbps = capKbps;
    this.minKbps = Math.min(minKbps, capKbps);
    this.#kbps = capKbps;
  }

  /** The estimate now, in kbit/s. */
  get kbps(): number {
    return this.#kbps;
  }

  /**
   * Updates the estimate from the packets `expected` (by sequence numbers) and `received` so
   * far over the publisher's video, and the rate that arrives (kbit/s); returns it.
   */
  update(expected: number, received: number, receivedKbps: number, nowMs: number): number {
    const expectedDelta = expected - this.#expected;
    const receivedDelta = received - this.#received;
    const elapsedMs = this.#atMs === undefined ? 0 : nowMs - this.#atMs;
    this.#expected = expected;
    this.#received = received;
    this.#atMs = nowMs;
    // A layer that restarted under a new SSRC resets its counts: only resynchronized.
    if (expectedDelta <= 0 || receivedDelta < 0) return this.#kbps;
    const loss = Math.max(0, (expectedDelta - receivedDelta) / expectedDelta);
    if (loss > uplinkLossDownFraction) {
      const cut = Math.min(this.#kbps, receivedKbps) * (1 - loss / 2);
      this.#kbps = Math.max(this.minKbps, Math.min(this.#kbps, cut));
    } else if (loss <= uplinkLossCleanFraction) {
      const grown = this.#kbps * uplinkGrowthPerSecond ** (elapsedMs / 1000);
      this.#kbps = Math.min(this.capKbps, grown);
    }
    return this.#kbps;
  }
}
