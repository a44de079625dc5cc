/**
 * An accept loop that no accept error can end: at the open-file limit (EMFILE) or on any
 * other failure it logs (at most once per interval, with the count of errors not logged),
 * pauses briefly so it does not spin, and keeps accepting. Only closing the listener ends it.
 */
import type { Logger } from "./log.ts";
import { descriptors } from "./fd_guard.ts";

/** First pause after a failed accept, in ms; doubles while accepts keep failing. */
export const acceptBackoffMs = 50;
/** Longest pause between failed accepts, in ms. */
export const maxAcceptBackoffMs = 1000;
/** Shortest interval between two logged accept errors, in ms. */
export const acceptErrorLogIntervalMs = 5000;

/**
 * Accepts connections of `listener` and hands each to `onConnection` until the listener is
 * closed (or `closing()` says it is being closed).
 */
export async function acceptLoop<C extends Deno.Conn>(
  listener: Deno.Listener<C>,
  onConnection: (conn: C) => void,
  log: Logger,
  closing: () => boolean,
): Promise<void> {
  let backoffMs = acceptBackoffMs;
  let lastLoggedAt = -Infinity;
  let unlogged = 0;
  for (;;) {
    let conn: C;
    try {
      conn = await listener.accept();
    } catch (err) {
      if (closing() || err instanceof Deno.errors.BadResource) return;
      const now = performance.now();
      if (now - lastLoggedAt >= acceptErrorLogIntervalMs) {
        log.error("accept failed; retrying", { err, errorsNotLogged: unlogged, backoffMs });
        lastLoggedAt = now;
        unlogged = 0;
      } else {
        unlogged++;
      }
      await new Promise((resolve) => setTimeout(resolve, backoffMs));
      backoffMs = Math.min(backoffMs * 2, maxAcceptBackoffMs);
      continue;
    }
    backoffMs = acceptBackoffMs;
    // Within the descriptor reserve: closed at once, so the REST listener keeps its share.
    if (!descriptors.admit()) {
      conn.close();
      continue;
    }
    onConnection(conn);
  }
}
