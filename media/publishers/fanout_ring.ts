/**
 * The ring a stream's players of one protocol share (RTMP, RTSP): what is made once per
 * frame (chunked messages, interleaved RTP packets) is appended under a growing sequence
 * number, and each player holds only the sequence number it writes next. A player more than
 * the ring's capacity behind skips to the newest startable entry (a keyframe), or waits for
 * the next one; entries no player will write and none may start at are let go at once.
 * Frames and bytes per entry feed the reader metrics: the shared reader counted them once,
 * players count them as each writes them.
 */
import type { ReaderTally } from "../stream_tally.ts";

/** Marks a player that waits for the next startable entry. */
export const waitingForKey = -1;

/** A bounded log of entries with per-player positions kept by the caller. */
export class FanoutRing<T> {
  readonly #items: (T | undefined)[];
  /** Frames and media bytes in each slot, for the reader metrics. */
  readonly #frames: Uint16Array;
  readonly #bytes: Float64Array;
  /** Sequence number of the next entry (the ring holds the `capacity` before it). */
  #head = 0;
  /** Sequence number of the oldest entry still held. */
  #tail = 0;
  /** Sequence number of the newest entry a player may start at, or -1. */
  #lastKey = -1;

  /** `capacity`: entries held, and how far a player may lag before it skips. */
  constructor(readonly capacity: number) {
    this.#items = new Array(capacity);
    this.#frames = new Uint16Array(capacity);
    this.#bytes = new Float64Array(capacity);
  }

  /** Sequence number of the next entry. */
  get head(): number {
    return this.#head;
  }

  /** Where a new player starts: the newest startable entry still held, else `waitingForKey`. */
  get start(): number {
    return this.#lastKey >= this.#tail ? this.#lastKey : waitingForKey;
  }

  /** The lowest position entries are kept from when no player is behind it. */
  get keyFloor(): number {
    return this.#lastKey >= 0 ? this.#lastKey : this.#head;
  }

  /** The entry `seq` (held: between the tail and the head). */
  at(seq: number): T {
    return this.#items[seq % this.capacity]!;
  }

  /** Entry `seq` when still held. */
  held(seq: number): T | undefined {
    return seq >= this.#tail && seq < this.#head ? this.#items[seq % this.capacity] : undefined;
  }

  /**
   * Appends an entry of `frames` frames and `bytes` media bytes (taken off `tally`, which
   * counts them again as players write them); returns its sequence number.
   */
  append(
    item: T,
    frames: number,
    bytes: number,
    startable: boolean,
    tally: ReaderTally | undefined,
  ): number {
    const seq = this.#head++;
    const slot = seq % this.capacity;
    this.#items[slot] = item;
    this.#frames[slot] = frames;
    this.#bytes[slot] = bytes;
    if (tally) {
      tally.deliveredFrames -= frames;
      tally.deliveredBytes -= bytes;
    }
    if (startable) this.#lastKey = seq;
    // Slots before `head - capacity` hold newer entries already.
    this.#tail = Math.max(this.#tail, this.#head - this.capacity);
    return seq;
  }

  /**
   * The position a player at `seq` writes next: `seq`, or when it lags more than the ring
   * holds, the newest startable entry (else `waitingForKey`), the frames skipped counted as
   * dropped on `tally`.
   */
  catchUp(seq: number, tally: ReaderTally | undefined): number {
    if (seq === waitingForKey || this.#head - seq <= this.capacity) return seq;
    const key = this.#lastKey > seq && this.#lastKey >= this.#tail;
    const to = key ? this.#lastKey : waitingForKey;
    if (tally) tally.droppedFrames += this.#framesBetween(seq, key ? this.#lastKey : this.#head);
    return to;
  }

  /** Counts entry `seq` as written to one more player on `tally`. */
  deliver(seq: number, tally: ReaderTally | undefined): void {
    if (!tally) return;
    const slot = seq % this.capacity;
    tally.deliveredFrames += this.#frames[slot];
    tally.deliveredBytes += this.#bytes[slot];
  }

  /** Lets go of the entries before `floor` (the lowest position any player still needs). */
  release(floor: number): void {
    for (; this.#tail < floor; this.#tail++) this.#items[this.#tail % this.capacity] = undefined;
  }

  /** Lets go of every entry; the next one appended is the first a player may start at. */
  clear(): void {
    this.#items.fill(undefined);
    this.#tail = this.#head;
    this.#lastKey = -1;
  }

  /** Frames in the entries from `from` up to `to` (exclusive) still held. */
  #framesBetween(from: number, to: number): number {
    let frames = 0;
    for (let seq = Math.max(from, this.#head - this.capacity); seq < to; seq++) {
      frames += this.#frames[seq % this.capacity];
    }
    return frames;
  }
}

/**
 * Keeps a kind's reader metrics counting players, not shared readers: the shared reader,
 * while attached, counts one, and each further player one more. Returns the new count of
 * players added beyond the reader, to pass back as `counted` next time.
 */
export function countFanoutPlayers(
  tally: ReaderTally | undefined,
  players: number,
  attached: boolean,
  counted: number,
): number {
  if (!tally) return counted;
  const now = attached ? Math.max(0, players - 1) : players;
  tally.attached += now - counted;
  return now;
}
