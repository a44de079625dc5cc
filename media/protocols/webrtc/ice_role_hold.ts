/**
 * Keeps each ICE agent's role through a renegotiation.
 *
 * werift sets every agent's role from the type of each local description (offer: controlling,
 * answer: controlled), a renegotiation's too, and only a nominated pair stops it. An SFU server
 * offer made while the participant's checks are still running (its first answer came from the
 * server, so the server is controlled) turned the server controlling mid-check; the browser
 * keeps its role (RFC 8445 §6.1.1 fixes it for the session, JSEP leaves it alone without an ICE
 * restart), so both ended controlling and a werift client's DTLS was seen never to start.
 */
import type { RTCPeerConnection } from "werift";

/** The part of werift's ICE `Connection` the hold needs. */
interface IceAgent {
  iceControlling: boolean;
  /** werift's backing field, read by its getter. */
  _iceControlling: boolean;
}

/**
 * Runs `run` (a description step of a renegotiation) with writes of every existing ICE agent's
 * role ignored. Role-conflict repair (werift's `switchRole`) bypasses the setter and still
 * applies. Agents of transports the step creates are not held: they take their role as usual.
 */
export async function holdIceRoles<T>(pc: RTCPeerConnection, run: () => Promise<T>): Promise<T> {
  const agents = pc.dtlsTransports.map((t) => t.iceTransport.connection as unknown as IceAgent);
  for (const agent of agents) {
    Object.defineProperty(agent, "iceControlling", {
      configurable: true,
      get(this: IceAgent) {
        return this._iceControlling;
      },
      set(_value: boolean) {},
    });
  }
  try {
    return await run();
  } finally {
    // The prototype's accessor takes over again.
    for (const agent of agents) delete (agent as Partial<IceAgent>).iceControlling;
  }
}
