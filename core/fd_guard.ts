/**
 * The descriptor guard: listeners and outbound connections stop taking descriptors once the
 * process is within `limits.fdReserve` of its open-file limit, so the reserve stays for what
 * cannot be refused cleanly at the limit: the REST listener (Deno.serve ends its listener,
 * dropping the connections waiting in its backlog, when accept fails for lack of a
 * descriptor), recording files, engine pipes and hook requests. A refusal is counted.
 *
 * Counting /proc/self/fd costs about 1 ms per thousand descriptors, so the count is taken at
 * most once a second while far from the limit (every admission adds one to it in between,
 * erring on the safe side) and at most every 100 ms near it, to see descriptors come free.
 */
import { openFiles } from "./fd_limit.ts";

/** Most descriptors the default reserve keeps: half the limit, up to this. */
export const maxDefaultReserve = 1024;
/** Interval between counts while below the threshold, in ms. */
const recountMs = 1000;
/** Interval between counts while at or above the threshold, in ms. */
const recountNearLimitMs = 100;

/** Descriptors kept free for the REST listener, files and pipes; refuses beyond. */
export class DescriptorGuard {
  #reserve?: number;
  #count = 0;
  #limit = -1;
  #countedAt = -Infinity;
  #refused = 0;

  /**
   * @param reserve descriptors left free below the soft open-file limit; undefined: half the
   * limit, at most `maxDefaultReserve`.
   */
  constructor(reserve?: number) {
    this.#reserve = reserve;
  }

  /** Descriptors left free below the limit (0 while the limit is not known). */
  get reserve(): number {
    if (this.#limit < 0) return this.#reserve ?? 0;
    return this.#reserve ?? Math.min(maxDefaultReserve, Math.floor(this.#limit / 2));
  }

  /** Sets the reserve (`limits.fdReserve`); undefined for the default. */
  configure(reserve: number | undefined): void {
    this.#reserve = reserve;
  }

  /**
   * True (and one descriptor counted) when a new connection may take a descriptor; false
   * (one refusal counted) within the reserve. Always true where descriptors cannot be
   * counted (no FFI permission), and with a reserve of 0 (the guard off).
   */
  admit(): boolean {
    if (this.#reserve === 0) return true;
    const now = performance.now();
    if (now - this.#countedAt >= (this.#full() ? recountNearLimitMs : recountMs)) {
      this.#countedAt = now;
      const files = openFiles();
      this.#limit = files?.limit ?? -1;
      this.#count = files?.open ?? 0;
    }
    if (this.#limit < 0) return true;
    if (this.#full()) {
      this.#refused++;
      return false;
    }
    this.#count++;
    return true;
  }

  /** The message of a refusal. */
  refusal(): string {
    return `open-file limit of ${this.#limit} nearly reached (${this.reserve} kept free)`;
  }

  /** Figures for `/health`. */
  toJSON(): { reserve: number; refused: number } {
    return { reserve: this.reserve, refused: this.#refused };
  }

  #full(): boolean {
    return this.#limit >= 0 && this.#count + 1 > this.#limit - this.reserve;
  }
}

/**
 * The guard of this process (descriptors are a process-wide resource); the server sets its
 * reserve from `limits.fdReserve` at start.
 */
export const descriptors = new DescriptorGuard();
