/**
 * werift's ICE sockets bound without dying of the port probe's late close.
 *
 * Given a port range, werift's `UdpTransport.init` probes a port with a socket of its own,
 * closes it and binds its real socket to the port at once. Under Deno, a dgram socket's close
 * callback runs before the OS socket is closed (a pending receive still holds it): strace of
 * a mixer e2e run showed `bind(84, 127.0.0.1:31958) = -1 EADDRINUSE` before `close(82)` of
 * the probe that had bound that port. The error event has no listener in werift, so the
 * server process died. Here the bind of a probed port is retried until the probe is gone.
 */
import type { Socket } from "node:dgram";
import { findPort, UdpTransport } from "werift";

/** Pause between binds of a probed port, in ms. */
const bindRetryMs = 10;
/** Longest a probed port is retried: past it another process holds the port, in ms. */
const bindRetryLimitMs = 1000;

/** Binds `socket`; resolves with the bind error instead of letting the socket emit it. */
function bindOnce(socket: Socket, port: number, address?: string): Promise<Error | undefined> {
  return new Promise((resolve) => {
    const onError = (err: Error) => {
      socket.off("listening", onListening);
      resolve(err);
    };
    const onListening = () => {
      socket.off("error", onError);
      resolve(undefined);
    };
    socket.once("error", onError);
    socket.once("listening", onListening);
    socket.bind({ port, address });
  });
}

/**
 * Binds `socket` to `port`, again every `bindRetryMs` while it answers EADDRINUSE, for at most
 * `limitMs`; rejects with the last error.
 */
export async function bindRetrying(
  socket: Socket,
  port: number,
  address?: string,
  limitMs = bindRetryLimitMs,
): Promise<void> {
  const deadline = Date.now() + limitMs;
  for (;;) {
    const err = await bindOnce(socket, port, address);
    if (!err) return;
    if ((err as NodeJS.ErrnoException).code !== "EADDRINUSE" || Date.now() >= deadline) throw err;
    await new Promise((r) => setTimeout(r, bindRetryMs));
  }
}

/** The fields of werift's UdpTransport that its `init` reads. */
interface WeriftUdpTransport {
  socket: Socket;
  socketType: "udp4" | "udp6";
  options: {
    port?: number;
    portRange?: [number, number];
    interfaceAddresses?: Partial<Record<"udp4" | "udp6", string>>;
  };
  init(): Promise<void>;
}

let installed = false;

/**
 * Makes werift bind a probed port with `bindRetrying` (once per process); sockets bound to a
 * fixed port or to any port keep werift's own `init`. A port still taken after the retries
 * rejects the gathering, which werift logs and skips (the answer then has no candidate).
 */
export function installUdpBindRetry(): void {
  if (installed) return;
  installed = true;
  const prototype = UdpTransport.prototype as unknown as WeriftUdpTransport;
  const weriftInit = prototype.init;
  prototype.init = async function (this: WeriftUdpTransport) {
    const { port, portRange, interfaceAddresses } = this.options;
    if (port || !portRange) return await weriftInit.call(this);
    const address = interfaceAddresses?.[this.socketType];
    const probed = await findPort(portRange[0], portRange[1], this.socketType, interfaceAddresses);
    await bindRetrying(this.socket, probed, address);
  };
}
