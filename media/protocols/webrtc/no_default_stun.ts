/**
 * werift's ICE without its built-in STUN server. Given no STUN server (`iceServers: []`),
 * werift 0.25 still gathers a server-reflexive candidate from stun.l.google.com:19302: a DNS
 * query and a STUN request off the machine for every peer, which a server on a private
 * network must not send. Here a connection has the STUN server it was given, or none.
 */
import { Connection } from "werift";

/** The part of werift's ICE connection this patch touches. */
interface WeriftConnection {
  options: { stunServer?: unknown };
  stunServer: unknown;
  applyStunTurnServersFromOptions(): void;
}

let installed = false;

/** Drops werift's default STUN server from every ICE connection made afterwards (idempotent). */
export function installNoDefaultStun(): void {
  if (installed) return;
  installed = true;
  const prototype = Connection.prototype as unknown as WeriftConnection;
  const weriftApply = prototype.applyStunTurnServersFromOptions;
  prototype.applyStunTurnServersFromOptions = function (this: WeriftConnection) {
    weriftApply.call(this);
    if (!this.options.stunServer) this.stunServer = undefined;
  };
}
