/**
 * The descriptor guard: listeners and outbound connections stop taking descriptors once the
 * process is within `limits.fdReserve` of its open-file limit, so the reserve stays for what
 * cannot be refused cleanly at the limit: the REST listener (Deno.serve ends its listener,
 * dropping the connections waiting in its backlog, when accept fails for lack of a
 * descriptor), recording files, engine pipes and hook requests. A refusal is counted.
 *
 * REST requests may use the reserve but not its last quarter (`requestFloor`), kept for
 * /health, files and pipes: Deno.serve shows no connection to refuse, so a request past it is
 * refused instead (503) and its connection shut down once answered (core/http_listener.ts).
 * A connection a request came on first since the last count is counted as one descriptor.
 *
 * Counting /proc/self/fd costs about 1 ms per thousand descriptors, so the count is taken at
 * most once a second while far from the limit (every admission adds one to it in between,
 * erring on the safe side) and at most every 100 ms within `nearLimitDescriptors` of the
 * threshold, where a burst Deno.serve accepts in one go must be seen soon. A count that fails
 * once counting worked means no descriptor was free to read the directory: taken as full.
 */
import { openFiles } from "./fd_limit.ts";

/** Most descriptors the default reserve keeps: half the limit, up to this. */
export const maxDefaultReserve = 1024;
/** Interval between counts while below the threshold, in ms. */
const recountMs = 1000;
/** Interval between counts while near or past the threshold, in ms. */
const recountNearLimitMs = 100;
/** Descriptors below the threshold from which counts are taken at `recountNearLimitMs`. */
const nearLimitDescriptors = 1024;

/** Descriptors kept free for the REST listener, files and pipes; refuses beyond. */
export class DescriptorGuard {
  #reserve?: number;
  #count = 0;
  #limit = -1;
  #countedAt = -Infinity;
  #refused = 0;
  #refusedRequests = 0;
  /**
   * Peers REST requests came from since the last count: each port's last address. A port's
   * address held by another peer counts that peer anew (one descriptor too many, the safe
   * side); keying by a joined `address|port` text cost about 0.3 µs a request.
   */
  #requestPeers = new Map<number, string>();

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
    this.#recount();
    if (this.#limit < 0) return true;
    if (this.#full()) {
      this.#refused++;
      return false;
    }
    this.#count++;
    return true;
  }

  /**
   * True when a REST request from `peer` (its connection's remote address and port) may be
   * served; false once fewer than `requestFloor` descriptors are left. Its connection is
   * counted once between two counts.
   */
  admitRequest(peer: { readonly hostname: string; readonly port: number }): boolean {
    if (this.#reserve === 0) return true;
    this.#recount();
    if (this.#limit < 0) return true;
    if (this.#count + 1 > this.#limit - this.requestFloor) return false;
    const port = peer.port;
    const hostname = peer.hostname;
    if (this.#requestPeers.get(port) !== hostname) {
      this.#requestPeers.set(port, hostname);
      this.#count++;
    }
    return true;
  }

  /** Descriptors REST requests leave free: the last quarter of the reserve. */
  get requestFloor(): number {
    return Math.ceil(this.reserve / 4);
  }

  /** The message of a refusal. */
  refusal(): string {
    return `open-file limit of ${this.#limit} nearly reached (${this.reserve} kept free)`;
  }

  /** Counts a REST request refused (`admitRequest` false) and gives its message. */
  refuseRequest(): string {
    this.#refusedRequests++;
    return `open-file limit of ${this.#limit} nearly reached (${this.requestFloor} kept free)`;
  }

  /** Figures for `/health`: `refused` connections, `refusedRequests` REST requests. */
  toJSON(): { reserve: number; refused: number; refusedRequests: number } {
    return {
      reserve: this.reserve,
      refused: this.#refused,
      refusedRequests: this.#refusedRequests,
    };
  }

  /** Counts the open descriptors again when the last count is stale. */
  #recount(): void {
    const now = performance.now();
    const near = this.#limit >= 0 &&
      this.#count + nearLimitDescriptors > this.#limit - this.reserve;
    if (now - this.#countedAt < (near ? recountNearLimitMs : recountMs)) return;
    this.#countedAt = now;
    this.#requestPeers.clear();
    const files = openFiles();
    if (files) {
      this.#limit = files.limit;
      this.#count = files.open;
    } else if (this.#limit >= 0) {
      this.#count = this.#limit;
    }
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
