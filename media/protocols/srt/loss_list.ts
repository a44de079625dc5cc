/**
 * The receiver's loss list: sequence numbers detected missing, in arrival order of the gaps
 * (which is sequence order, as gaps are found past the highest number received), each with
 * the time it was last reported in a NAK, so the periodic NAK repeats only stale ones.
 */
import type { LossRange } from "./packet.ts";
import { seqAdd, seqDiff } from "./seq.ts";

/** Missing sequence numbers and when each was last asked for. */
export class LossList {
  /** seq → time of its last NAK in ms. Map keeps insertion (= sequence) order. */
  #lastNakMs = new Map<number, number>();

  /** Number of missing packets. */
  get size(): number {
    return this.#lastNakMs.size;
  }

  /** Adds `from..to` (inclusive, wrapping), reported in a NAK at `nowMs`. */
  addRange(from: number, to: number, nowMs: number): void {
    const n = seqDiff(from, to);
    for (let i = 0; i <= n; i++) this.#lastNakMs.set(seqAdd(from, i), nowMs);
  }

  /** Removes one number (it arrived, or was dropped); true when it was listed. */
  remove(seq: number): boolean {
    return this.#lastNakMs.delete(seq);
  }

  /** Whether `seq` is missing. */
  has(seq: number): boolean {
    return this.#lastNakMs.has(seq);
  }

  /** First missing number, or undefined. */
  first(): number | undefined {
    for (const seq of this.#lastNakMs.keys()) return seq;
    return undefined;
  }

  /** Removes every number before `seq` (delivery moved past them); returns how many. */
  removeBefore(seq: number): number {
    let removed = 0;
    for (const s of this.#lastNakMs.keys()) {
      if (seqDiff(s, seq) <= 0) break;
      this.#lastNakMs.delete(s);
      removed++;
    }
    return removed;
  }

  /**
   * Ranges last reported before `nowMs - intervalMs`, marked reported now (periodic NAK).
   * At most `maxRanges`, so one NAK fits a datagram.
   */
  due(nowMs: number, intervalMs: number, maxRanges = 300): LossRange[] {
    const ranges: LossRange[] = [];
    for (const [seq, last] of this.#lastNakMs) {
      if (nowMs - last < intervalMs) continue;
      const tail = ranges[ranges.length - 1];
      if (tail && seqAdd(tail.to, 1) === seq) tail.to = seq;
      else if (ranges.length === maxRanges) break;
      else ranges.push({ from: seq, to: seq });
      this.#lastNakMs.set(seq, nowMs);
    }
    return ranges;
  }
}
