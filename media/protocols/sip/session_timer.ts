/**
 * SIP session timers, the minimal part of RFC 4028: the Session-Expires value of a 2xx (or
 * of an INVITE we answer) and one timer per call that either refreshes the session at half
 * the interval (when we are the refresher) or ends it when the far end let it expire.
 */

/** A Session-Expires value: the interval and who refreshes. */
export interface SessionExpires {
  seconds: number;
  refresher?: "uac" | "uas";
}

/** Parses `1800;refresher=uac`; undefined when absent or malformed. */
export function parseSessionExpires(value: string | undefined): SessionExpires | undefined {
  if (value === undefined) return undefined;
  const m = /^\s*(\d{1,9})\s*(?:;(.*))?$/.exec(value);
  if (!m) return undefined;
  const seconds = Number(m[1]);
  if (seconds < 1) return undefined;
  const refresher = /(?:^|;)\s*refresher\s*=\s*(uac|uas)\b/i.exec(m[2] ?? "")?.[1]?.toLowerCase();
  return refresher === "uac" || refresher === "uas" ? { seconds, refresher } : { seconds };
}

/** Writes a Session-Expires value. */
export function formatSessionExpires(value: SessionExpires): string {
  return value.refresher ? `${value.seconds};refresher=${value.refresher}` : `${value.seconds}`;
}

/** The timer of one session: refresh at half the interval, or expiry at its end. */
export class SessionTimer {
  readonly #refresh: () => void;
  readonly #expire: () => void;
  #timer?: ReturnType<typeof setTimeout>;
  #seconds = 0;
  #weRefresh = false;

  /** `refresh` sends the refreshing re-INVITE; `expire` ends a session nobody refreshed. */
  constructor(refresh: () => void, expire: () => void) {
    this.#refresh = refresh;
    this.#expire = expire;
  }

  /** Whether a session interval runs. */
  get active(): boolean {
    return this.#seconds > 0;
  }

  /** The running interval, 0 when none. */
  get seconds(): number {
    return this.#seconds;
  }

  /** Starts (or restarts) the interval after a 2xx that set it. */
  start(seconds: number, weRefresh: boolean): void {
    this.#seconds = seconds;
    this.#weRefresh = weRefresh;
    this.#arm();
  }

  /** The far end refreshed the session (a re-INVITE or UPDATE): the interval starts over. */
  refreshed(): void {
    if (this.#seconds > 0) this.#arm();
  }

  /** Stops the timer for good. */
  stop(): void {
    clearTimeout(this.#timer);
    this.#timer = undefined;
    this.#seconds = 0;
  }

  #arm(): void {
    clearTimeout(this.#timer);
    const ms = this.#seconds * 1000;
    this.#timer = this.#weRefresh
      ? setTimeout(() => this.#refresh(), ms / 2)
      : setTimeout(() => this.#expire(), ms);
  }
}
