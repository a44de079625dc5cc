/**
 * Caps on what one server holds at once (connections, sessions, streams, pulls, jobs). A cap
 * is a counter with a ceiling: `tryAcquire()` either takes a slot or counts a refusal, so an
 * operator sees in `/health` both how close the server runs to a cap and how often it said no.
 */
import type { Config } from "../config.ts";

/** One capped resource. */
export class Cap {
  #current = 0;
  #refused = 0;

  /**
   * @param name what is capped, as it appears in errors and `/health` ("sessions").
   * @param max the most slots held at once.
   */
  constructor(readonly name: string, readonly max: number) {}

  /** Slots held now. */
  get current(): number {
    return this.#current;
  }

  /** Refusals since start. */
  get refused(): number {
    return this.#refused;
  }

  /** Takes a slot; false (and one more refusal counted) when the cap is reached. */
  tryAcquire(): boolean {
    if (this.#current >= this.max) {
      this.#refused++;
      return false;
    }
    this.#current++;
    return true;
  }

  /** Gives back a slot taken by tryAcquire. */
  release(): void {
    if (this.#current > 0) this.#current--;
  }

  /** The message of a refusal, for a 503 body, a close reason or an RTMP status. */
  refusal(): string {
    return `${this.name} limit of ${this.max} reached`;
  }

  /** Figures for `/health`. */
  toJSON(): { current: number; max: number; refused: number } {
    return { current: this.#current, max: this.max, refused: this.#refused };
  }
}

/**
 * Counts slots per key (a client address) under one ceiling each, dropping a key's entry when
 * its count returns to zero, so the map never outgrows the connections it counts.
 */
export class KeyedCap {
  readonly #counts = new Map<string, number>();
  #refused = 0;

  /**
   * @param name what is capped ("connections per address").
   * @param maxPerKey the most slots one key holds at once.
   */
  constructor(readonly name: string, readonly maxPerKey: number) {}

  /** Refusals since start. */
  get refused(): number {
    return this.#refused;
  }

  /** Takes a slot for `key`; false (and one refusal counted) when `key` holds the most. */
  tryAcquire(key: string): boolean {
    const count = this.#counts.get(key) ?? 0;
    if (count >= this.maxPerKey) {
      this.#refused++;
      return false;
    }
    this.#counts.set(key, count + 1);
    return true;
  }

  /** Gives back a slot of `key`. */
  release(key: string): void {
    const count = this.#counts.get(key) ?? 0;
    if (count <= 1) this.#counts.delete(key);
    else this.#counts.set(key, count - 1);
  }

  /** The message of a refusal. */
  refusal(): string {
    return `${this.name} limit of ${this.maxPerKey} reached`;
  }

  /** Figures for `/health`. */
  toJSON(): { keys: number; maxPerKey: number; refused: number } {
    return { keys: this.#counts.size, maxPerKey: this.maxPerKey, refused: this.#refused };
  }
}

/** The server-wide caps of `config.limits`; per-listener connection caps live with each listener. */
export interface Limits {
  readonly sessions: Cap;
  readonly streams: Cap;
  readonly pulls: Cap;
  readonly pushes: Cap;
  readonly vods: Cap;
  readonly recorders: Cap;
  readonly transcoders: Cap;
  readonly mixers: Cap;
  readonly calls: Cap;
}

/** Builds the server-wide caps from the configuration. */
export function createLimits(limits: Config["limits"]): Limits {
  return {
    sessions: new Cap("sessions", limits.sessions),
    streams: new Cap("streams", limits.streams),
    pulls: new Cap("pulls", limits.pulls),
    pushes: new Cap("pushes", limits.pushes),
    vods: new Cap("vods", limits.vods),
    recorders: new Cap("recorders", limits.recorders),
    transcoders: new Cap("transcoders", limits.transcoders),
    mixers: new Cap("mixers", limits.mixers),
    calls: new Cap("calls", limits.calls),
  };
}
