/**
 * werift's ICE transports on the ICE mux. A peer connection whose `iceInterfaceAddresses`
 * object came from `muxInterfaceAddresses` gets, in each of its UdpTransports, a MuxSocket
 * instead of a node:dgram socket (werift hands that object by identity to
 * `UdpTransport.init`), and once it has gathered, its local ufrag is registered on the mux so
 * the browser's Binding requests find it (again after an ICE restart, which gathers anew with
 * a new ufrag). Every other connection of the process (test clients, server-to-server links)
 * keeps werift's own sockets.
 */
import type { Socket } from "node:dgram";
import { Connection, UdpTransport } from "werift";
import { type IceMux, MuxSocket } from "./ice_mux.ts";

/** The mux of each tagged `iceInterfaceAddresses` object. */
const muxOfAddresses = new WeakMap<object, IceMux>();

/** `iceInterfaceAddresses` for a peer connection on `mux`: werift binds nothing of its own. */
export function muxInterfaceAddresses(mux: IceMux): Partial<Record<"udp4" | "udp6", string>> {
  const addresses = mux.family === 2 ? { udp4: mux.host } : { udp6: mux.host };
  muxOfAddresses.set(addresses, mux);
  return addresses;
}

/** The fields of werift's UdpTransport that `init` touches. */
interface WeriftUdpTransport {
  socket: Socket | MuxSocket;
  options: { interfaceAddresses?: object };
  init(): Promise<void>;
}

/** The fields of werift's ICE Connection the ufrag registration reads. */
interface WeriftConnection {
  localUsername: string;
  protocols: { transport?: { socket?: unknown } }[];
  gatherCandidates(): Promise<void>;
}

let installed = false;

/** Patches werift once per process (install after any other `UdpTransport.init` patch). */
export function installIceMux(): void {
  if (installed) return;
  installed = true;
  const transport = UdpTransport.prototype as unknown as WeriftUdpTransport;
  const init = transport.init;
  transport.init = async function (this: WeriftUdpTransport) {
    const addresses = this.options.interfaceAddresses;
    const mux = addresses && muxOfAddresses.get(addresses);
    if (!mux) return await init.call(this);
    // werift's constructor made a dgram socket and listens to it: its listener moves to the
    // mux socket, and the dgram socket, never bound, is closed.
    const dgram = this.socket as Socket;
    const listeners = dgram.listeners("message") as ((...args: unknown[]) => void)[];
    dgram.removeAllListeners("message");
    dgram.close();
    const socket = mux.socket();
    for (const listener of listeners) socket.on("message", listener);
    this.socket = socket;
  };
  const connection = Connection.prototype as unknown as WeriftConnection;
  const gather = connection.gatherCandidates;
  connection.gatherCandidates = async function (this: WeriftConnection) {
    await gather.call(this);
    for (const protocol of this.protocols) {
      const socket = protocol.transport?.socket;
      if (socket instanceof MuxSocket) socket.addUfrag(this.localUsername);
    }
  };
}
