/**
 * The transport-wide sequence numbers of one transport (transport-cc) and what was sent under
 * each: one SharedArrayBuffer written by whoever sends on the transport (the send engine's
 * Workers, each with a share of its tracks, or werift's path on the main thread) and read on
 * the main thread when the receiver's feedback names the numbers. The counter is taken with
 * an atomic add, so copies sent from two Workers at once get distinct numbers.
 */

/**
 * Packets remembered: feedback about older numbers finds them overwritten (2 s of a
 * subscriber receiving 1,000 packets/s; a browser sends feedback about every 100 ms).
 */
export const transportCcLogPackets = 2048;

const counterBytes = 8;

/** Shared send record of one transport. */
export class TransportCcLog {
  /** The memory, to hand to a Worker (`new TransportCcLog(buffer)` there). */
  readonly buffer: SharedArrayBuffer;
  readonly #counter: Int32Array;
  /** Bytes sent (SRTP included) under each number, by number mod transportCcLogPackets. */
  readonly #bytes: Int32Array;
  /** Send time of each number, ms since the epoch (Workers' clocks share it). */
  readonly #sentMs: Float64Array;

  /** A new log, or a view of `buffer` (another thread's log). */
  constructor(buffer?: SharedArrayBuffer) {
    this.buffer = buffer ??
      new SharedArrayBuffer(counterBytes + transportCcLogPackets * (4 + 8));
    this.#counter = new Int32Array(this.buffer, 0, 1);
    this.#sentMs = new Float64Array(this.buffer, counterBytes, transportCcLogPackets);
    this.#bytes = new Int32Array(
      this.buffer,
      counterBytes + transportCcLogPackets * 8,
      transportCcLogPackets,
    );
  }

  /** Takes the next sequence number (16 bits) for a packet about to be sent. */
  next(): number {
    return Atomics.add(this.#counter, 0, 1) & 0xffff;
  }

  /** Records that `sequence` went out with `bytes` at `sentMs` (ms since the epoch). */
  record(sequence: number, bytes: number, sentMs: number): void {
    const slot = sequence % transportCcLogPackets;
    this.#sentMs[slot] = sentMs;
    this.#bytes[slot] = bytes;
  }

  /** Numbers taken so far (mod 2^32). */
  get taken(): number {
    return Atomics.load(this.#counter, 0) >>> 0;
  }

  /** Send time of `sequence` (ms since the epoch), 0 when none is recorded. */
  sentMs(sequence: number): number {
    return this.#sentMs[sequence % transportCcLogPackets];
  }

  /** Bytes sent under `sequence`, 0 when none is recorded. */
  bytes(sequence: number): number {
    return this.#bytes[sequence % transportCcLogPackets];
  }
}
