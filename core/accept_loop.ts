/**
 * An accept loop that no accept error can end: at the open-file limit (EMFILE) or on any
 * other failure it logs (at most once per interval, with the count of errors not logged),
 * pauses briefly so it does not spin, and keeps accepting. Only closing the listener ends it.
 *
 * Accepts of a full backlog complete without a trip through the event loop, so a burst of
 * connections would be drained (and each handed on) in one go while /health and every other
 * connection wait; the loop therefore yields to the event loop after `acceptsPerTurn`.
 *
 * A TLS connection gets a deadline for its handshake (core/tls_handshake.ts), so a client
 * that opens TCP and never finishes TLS cannot hold a descriptor.
 */
import type { Logger } from "./log.ts";
import { descriptors } from "./fd_guard.ts";
import { closeConnection, guardTlsHandshake } from "./tls_handshake.ts";

/** First pause after a failed accept, in ms; doubles while accepts keep failing. */
export const acceptBackoffMs = 50;
/** Longest pause between failed accepts, in ms. */
export const maxAcceptBackoffMs = 1000;
/** Shortest interval between two logged accept errors, in ms. */
export const acceptErrorLogIntervalMs = 5000;
/**
 * Connections accepted before the loop lets other I/O and timers run. A turn costs about 2 ms
 * (timer clamp): every 4 accepts capped Web SDK connects at 1,600/s (bench/sessions.ts), every
 * 16 gives 4,500/s and still holds a burst's /health delay to a few ms of handshakes.
 */
export const acceptsPerTurn = 16;

/** Resolves after the event loop's next turn (timers and ready I/O ran in between). */
function nextTurn(): Promise<void> {
  return new Promise((resolve) => setTimeout(resolve, 0));
}

/**
 * Accepts connections of `listener` and hands each to `onConnection` until the listener is
 * closed (or `closing()` says it is being closed). A connection the descriptor guard refuses
 * goes to `onRefused` with the reason (default: closed at once). Connections are closed with
 * `closeConnection` (core/tls_handshake.ts), which frees a TLS one still in its handshake.
 */
export async function acceptLoop<C extends Deno.Conn>(
  listener: Deno.Listener<C>,
  onConnection: (conn: C) => void,
  log: Logger,
  closing: () => boolean,
  onRefused: (conn: C, reason: string) => void = (conn) => closeConnection(conn, log),
): Promise<void> {
  let backoffMs = acceptBackoffMs;
  let lastLoggedAt = -Infinity;
  let unlogged = 0;
  let acceptedThisTurn = 0;
  for (;;) {
    if (++acceptedThisTurn > acceptsPerTurn) {
      await nextTurn();
      acceptedThisTurn = 1;
    }
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
    guardTlsHandshake(conn, log);
    // Within the descriptor reserve: refused, so the REST listener keeps its share.
    if (!descriptors.admit()) {
      onRefused(conn, descriptors.refusal());
      continue;
    }
    onConnection(conn);
  }
}
