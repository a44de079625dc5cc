/**
 * The last log lines kept in memory, for the web console's log view: a fixed ring of
 * formatted lines, each cut to a bounded length, so its memory is capped whatever is logged.
 */

/** Lines a ring keeps unless told otherwise. */
export const recentLogLinesDefault = 500;
/** Characters kept of one line; the rest of a longer line is cut. */
const maxLineChars = 4_000;

/** A bounded ring of the most recent log lines. */
export class LogRing {
  readonly #lines: string[] = [];
  readonly #capacity: number;
  #next = 0;

  /** A ring of `capacity` lines (at least 1). */
  constructor(capacity = recentLogLinesDefault) {
    this.#capacity = Math.max(1, Math.floor(capacity));
  }

  /** Keeps `line`, dropping the oldest when full. */
  add(line: string): void {
    const kept = line.length > maxLineChars ? line.slice(0, maxLineChars) : line;
    if (this.#lines.length < this.#capacity) this.#lines.push(kept);
    else this.#lines[this.#next] = kept;
    this.#next = (this.#next + 1) % this.#capacity;
  }

  /** The kept lines, oldest first; at most `limit` of the newest when given. */
  lines(limit = this.#capacity): string[] {
    const ordered = this.#lines.length < this.#capacity
      ? this.#lines.slice()
      : [...this.#lines.slice(this.#next), ...this.#lines.slice(0, this.#next)];
    return limit >= ordered.length ? ordered : ordered.slice(ordered.length - limit);
  }
}
