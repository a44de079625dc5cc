/**
 * UDP ports of the media range, handed to peer connections so that no two of this process
 * ever gather on the same port.
 *
 * werift, given a port range, probes from its lowest port upwards, closes the probe socket
 * and binds the port it found afterwards: peers gathering at the same time all find the same
 * port, and every bind but one fails with EADDRINUSE, an error event nobody listens to (the
 * process dies) or an answer without a candidate (the browser never connects: "Failed by ICE
 * timeout"). So each peer gets a range of its own, two ports wide since werift refuses a
 * one-port range: both are held while the peer gathers, the one it did not bind is given
 * back once its candidates are known. The cursor starts at a random pair and goes round,
 * so processes sharing a range seldom probe the same port at the same time.
 */
import { ServiceUnavailableError } from "../../../core/errors.ts";

/** The ports of one range held by this process's peers. */
export class UdpPortPool {
  readonly #held = new Set<number>();
  #cursor: number;

  /** `min`..`max`: the configured media port range, inclusive. */
  constructor(readonly min: number, readonly max: number) {
    this.#cursor = Math.floor(Math.random() * this.#pairSlots);
  }

  /** Pairs the range holds: pairs start at an even offset from `min`, so freed ones never straddle. */
  get #pairSlots(): number {
    return Math.floor((this.max - this.min + 1) / 2);
  }

  /** Ports held now. */
  get heldCount(): number {
    return this.#held.size;
  }

  /**
   * Holds two adjacent free ports and returns the lower one; a ServiceUnavailableError when
   * the range has no such pair left.
   */
  acquirePair(): number {
    const slots = this.#pairSlots;
    for (let i = 0; i < slots; i++) {
      const slot = (this.#cursor + i) % slots;
      const port = this.min + 2 * slot;
      if (this.#held.has(port) || this.#held.has(port + 1)) continue;
      this.#held.add(port).add(port + 1);
      this.#cursor = (slot + 1) % slots;
      return port;
    }
    throw new ServiceUnavailableError(
      `no free UDP port pair left in the media range ${this.min}-${this.max}`,
    );
  }

  /** Holds `port` for another user of the range (the ICE mux) until it is released. */
  reserve(port: number): void {
    this.#held.add(port);
  }

  /** Gives a port back. */
  release(port: number): void {
    this.#held.delete(port);
  }
}

const pools = new Map<string, UdpPortPool>();

/** The process-wide pool of a range (servers of one process share the OS's ports). */
export function portPoolOf(min: number, max: number): UdpPortPool {
  const key = `${min}-${max}`;
  let pool = pools.get(key);
  if (!pool) pools.set(key, pool = new UdpPortPool(min, max));
  return pool;
}
