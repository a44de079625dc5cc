/**
 * A deadline for the TLS handshake of accepted connections. Deno runs a server's handshake in
 * a task of its own that holds the socket: closing a connection whose handshake is pending
 * does not free its descriptor until the client sends or closes, so a client that opens TCP
 * and never finishes TLS kept a descriptor forever. A connection whose handshake is not done
 * by the deadline is closed, and a pending one closed for any reason has its socket shut down
 * (core/socket_shutdown.ts): the task then fails and the descriptor comes free.
 */
import type { Logger } from "./log.ts";
import { shutdownSocket } from "./socket_shutdown.ts";

/** Time an accepted TLS connection has to finish its handshake, in ms. */
export const tlsHandshakeTimeoutMs = 5_000;

/** Connections whose TLS handshake has not settled yet. */
const pending = new Set<Deno.Conn>();
let warnedNoShutdown = false;

/**
 * Watches the handshake of an accepted TLS connection: one not done within `timeoutMs` is
 * closed (`closeConnection`). A plain TCP connection is left alone.
 */
export function guardTlsHandshake(
  conn: Deno.Conn,
  log: Logger,
  timeoutMs: number = tlsHandshakeTimeoutMs,
): void {
  if (!isTls(conn)) return;
  pending.add(conn);
  const timer = setTimeout(() => {
    log.debug("TLS handshake timed out", { clientAddress: remoteHost(conn), timeoutMs });
    closeConnection(conn, log);
  }, timeoutMs);
  conn.handshake().catch(() => {}).finally(() => {
    clearTimeout(timer);
    pending.delete(conn);
  });
}

/**
 * Closes a connection that may be closed already; one still in its TLS handshake also has
 * its socket shut down, else its descriptor stays held until the client acts.
 */
export function closeConnection(conn: Deno.Conn, log: Logger): void {
  // Read before closing: a closed connection may no longer tell its addresses.
  const ends = pending.has(conn)
    ? { localPort: (conn.localAddr as Deno.NetAddr).port, remote: conn.remoteAddr as Deno.NetAddr }
    : undefined;
  try {
    conn.close();
  } catch {
    // Closed already (by a deadline or the peer's reset).
  }
  if (ends === undefined || shutdownSocket(ends) || warnedNoShutdown) return;
  warnedNoShutdown = true;
  log.warn("a TLS connection closed in its handshake keeps its descriptor until the client acts", {
    reason: "socket shutdown needs --allow-ffi on Linux",
  });
}

function isTls(conn: Deno.Conn): conn is Deno.TlsConn {
  return typeof (conn as Partial<Deno.TlsConn>).handshake === "function";
}

function remoteHost(conn: Deno.Conn): string | undefined {
  return (conn.remoteAddr as Deno.NetAddr).hostname;
}
