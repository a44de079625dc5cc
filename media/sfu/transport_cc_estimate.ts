/**
 * A subscriber transport's bandwidth estimate from its transport-cc feedback: what it
 * received (bytes by arrival time) over the last `deliveryWindowMs`, and how far its packets'
 * one-way delay has risen over the lowest seen lately (a queue at a bottleneck). While no
 * queue builds, the estimate follows the delivery rate up (growing by `growthPerSecond`, to
 * at most `maxOverDelivery` times it, as a browser's estimate does, so the layer choice may
 * try a higher layer); once a queue of `overuseQueueMs` builds, it is cut to
 * `overuseBackoff` of the delivery rate, which then is the path's capacity. The result feeds
 * the layer choice as a browser's REMB does.
 */
import type { TransportCcLog } from "../send_engine/transport_cc_log.ts";
import type { TransportCcFeedback } from "../rtp/transport_cc.ts";

/** Arrival time over which the delivery rate is measured, in ms. */
export const deliveryWindowMs = 1000;
/** Shortest arrival span a delivery rate is taken over, in ms. */
const minSpanMs = 200;
/** How long the lowest one-way delay is remembered (its base), in ms. */
export const baseDelayWindowMs = 10_000;
/**
 * Queueing delay over the base that counts as a bottleneck, in ms. Above the jitter of a
 * receiver's clock (werift's feedback misplaces its reference time by up to 64 ms).
 */
export const overuseQueueMs = 100;
/** Share of the delivery rate the estimate is cut to at a bottleneck. */
export const overuseBackoff = 0.85;
/** Growth of the estimate per second while no queue builds (as a browser's, 8%). */
export const growthPerSecond = 1.08;
/** Highest estimate as a multiple of the delivery rate (a browser's bound). */
export const maxOverDelivery = 1.5;
/** Span of 24-bit reference times, in ms: arrival times are unwrapped by it. */
const referenceWrapMs = 2 ** 24 * 64;

/** The estimate of one transport. */
export class TransportCcEstimate {
  /** Feedback packets taken. */
  feedbacks = 0;
  /** Packets the feedback reported received. */
  packetsReceived = 0;
  /** Packets the feedback reported lost (not received when reported). */
  packetsLost = 0;
  /** The latest estimate, in kbit/s; 0 before the first. */
  kbps = 0;
  /** The latest delivery rate, in kbit/s. */
  deliveryKbps = 0;
  /** The latest queueing delay over the base, in ms. */
  queueMs = 0;
  // Samples in arrival order: arrival (ms, receiver clock), bytes.
  #arrivalMs: number[] = [];
  #bytes: number[] = [];
  #windowBytes = 0;
  /** Lowest delay of each 2-second bucket of the base window, and the bucket's start. */
  #baseBuckets: { startMs: number; minDelayMs: number }[] = [];
  #lastArrivalMs: number | undefined;
  #updatedMs: number | undefined;

  /**
   * Takes one feedback packet about packets recorded in `log`; returns the estimate (kbit/s),
   * or undefined while the feedback so far spans too little time to measure a rate.
   */
  onFeedback(
    feedback: TransportCcFeedback,
    log: TransportCcLog,
    nowMs: number,
  ): number | undefined {
    this.feedbacks++;
    this.packetsLost += feedback.statusCount - feedback.received.length;
    let delaySum = 0;
    let delays = 0;
    for (let i = 0; i < feedback.received.length; i++) {
      const sequence = feedback.received[i];
      const sentMs = log.sentMs(sequence);
      const bytes = log.bytes(sequence);
      if (sentMs === 0 || bytes === 0) continue;
      let arrivalMs = feedback.arrivalMs[i];
      const last = this.#lastArrivalMs;
      if (last !== undefined && Math.abs(arrivalMs - last) > referenceWrapMs / 2) {
        arrivalMs += arrivalMs < last ? referenceWrapMs : -referenceWrapMs;
      }
      this.packetsReceived++;
      this.#arrivalMs.push(arrivalMs);
      this.#bytes.push(bytes);
      this.#windowBytes += bytes;
      this.#lastArrivalMs = last === undefined ? arrivalMs : Math.max(last, arrivalMs);
      const delayMs = arrivalMs - sentMs;
      this.#noteDelay(delayMs, nowMs);
      delaySum += delayMs;
      delays++;
    }
    const newest = this.#lastArrivalMs;
    if (newest === undefined || delays === 0) return undefined;
    let drop = 0;
    while (drop < this.#arrivalMs.length && this.#arrivalMs[drop] < newest - deliveryWindowMs) {
      this.#windowBytes -= this.#bytes[drop];
      drop++;
    }
    if (drop > 0) {
      this.#arrivalMs.splice(0, drop);
      this.#bytes.splice(0, drop);
    }
    const spanMs = newest - this.#arrivalMs[0];
    if (spanMs < minSpanMs) return undefined;
    // The first sample opens the span: its bytes arrived before it.
    this.deliveryKbps = (this.#windowBytes - this.#bytes[0]) * 8 / spanMs;
    this.queueMs = delaySum / delays - this.#baseDelayMs();
    const sinceMs = this.#updatedMs === undefined ? 0 : nowMs - this.#updatedMs;
    this.#updatedMs = nowMs;
    if (this.queueMs > overuseQueueMs) {
      this.kbps = Math.min(this.kbps || Infinity, overuseBackoff * this.deliveryKbps);
    } else {
      const grown = this.kbps * growthPerSecond ** (sinceMs / 1000);
      this.kbps = Math.min(Math.max(grown, this.deliveryKbps), maxOverDelivery * this.deliveryKbps);
    }
    return this.kbps;
  }

  #noteDelay(delayMs: number, nowMs: number): void {
    const bucketMs = baseDelayWindowMs / 5;
    const buckets = this.#baseBuckets;
    const current = buckets[buckets.length - 1];
    if (!current || nowMs - current.startMs >= bucketMs) {
      buckets.push({ startMs: nowMs, minDelayMs: delayMs });
      while (buckets.length > 0 && nowMs - buckets[0].startMs > baseDelayWindowMs) buckets.shift();
    } else if (delayMs < current.minDelayMs) current.minDelayMs = delayMs;
  }

  #baseDelayMs(): number {
    let min = Infinity;
    for (const b of this.#baseBuckets) if (b.minDelayMs < min) min = b.minDelayMs;
    return min;
  }
}
