/**
 * Connections to a TCP passive ICE candidate held to what ICE sends first (RFC 6544 §7.2: the
 * connection carries RFC 4571 frames, the first a connectivity check). werift accepts any
 * connection on the listening port and hands every frame of it on (to DTLS, to SRTP), however
 * it started, and waits for as many bytes as a first "length" of an HTTP request or of random
 * bytes says. Here a connection whose first frame is not a STUN Binding request naming the
 * peer's ufrag is closed at once, and one that sends no complete first frame within
 * `firstFrameTimeoutMs` too; nothing of it reaches werift, and the peer's other connections
 * are untouched.
 */
import type { Socket } from "node:net";
import { TcpPassiveProtocol } from "werift";
import { bindingRequestUsername, localUfragOf } from "./stun_username.ts";

/** Time a new connection has to complete its first frame, in ms. */
export const firstFrameTimeoutMs = 10_000;
/** Longest first frame let through, in bytes: a Binding request is about 100. */
const maxFirstFrameBytes = 1500;
/** Bytes of an RFC 4571 frame's length field. */
const lengthFieldBytes = 2;
/** Bytes of a STUN header, the least a Binding request has. */
const stunHeaderBytes = 20;

let refused = 0;

/** Connections closed for their first bytes or their silence since the process started. */
export function refusedTcpConnections(): number {
  return refused;
}

/** The fields of werift's TcpPassiveProtocol the gate touches. */
interface WeriftTcpPassive {
  localCandidate?: { ufrag?: string };
  registerSocket(socket: Socket, remoteAddr: unknown): unknown;
}

type DataListener = (chunk: Uint8Array) => void;

/**
 * Whether `frame` may open a connection: a Binding request whose USERNAME starts with
 * `ufrag` (any ufrag when werift has not named one).
 */
export function opensIceTcp(frame: Uint8Array, ufrag: string | undefined): boolean {
  const username = bindingRequestUsername(frame);
  if (username === undefined) return false;
  return ufrag === undefined || localUfragOf(username) === ufrag;
}

/**
 * Holds `socket`'s bytes from `deliver` until its first frame opens ICE (`opensIceTcp`), then
 * passes them and everything after; closes it otherwise.
 */
function gate(socket: Socket, ufrag: () => string | undefined, deliver: DataListener): void {
  let held = new Uint8Array(0);
  const refuse = () => {
    refused++;
    held = new Uint8Array(0);
    socket.destroy();
  };
  const timer = setTimeout(refuse, firstFrameTimeoutMs);
  socket.once("close", () => clearTimeout(timer));
  const onData = (chunk: Uint8Array) => {
    if (socket.destroyed) return;
    const joined = new Uint8Array(held.length + chunk.length);
    joined.set(held);
    joined.set(chunk, held.length);
    held = joined;
    if (held.length < lengthFieldBytes) return;
    const length = (held[0] << 8) | held[1];
    if (length < stunHeaderBytes || length > maxFirstFrameBytes) return refuse();
    if (held.length < lengthFieldBytes + length) return;
    const frame = held.subarray(lengthFieldBytes, lengthFieldBytes + length);
    if (!opensIceTcp(frame, ufrag())) return refuse();
    clearTimeout(timer);
    socket.off("data", onData);
    socket.on("data", deliver);
    deliver(held);
    held = new Uint8Array(0);
  };
  socket.on("data", onData);
}

let installed = false;

/** Puts the gate on every connection werift's passive TCP candidates accept (idempotent). */
export function installIceTcpGate(): void {
  if (installed) return;
  installed = true;
  const prototype = TcpPassiveProtocol.prototype as unknown as WeriftTcpPassive;
  const register = prototype.registerSocket;
  prototype.registerSocket = function (this: WeriftTcpPassive, socket, remoteAddr) {
    const entry = register.call(this, socket, remoteAddr);
    // werift's reader moves behind the gate.
    const readers = socket.listeners("data") as DataListener[];
    socket.removeAllListeners("data");
    const deliver: DataListener = (chunk) => {
      for (const reader of readers) reader.call(socket, chunk);
    };
    gate(socket, () => this.localCandidate?.ufrag, deliver);
    return entry;
  };
}
