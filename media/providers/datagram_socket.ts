/**
 * A bound UDP socket delivering datagrams to one handler: Deno's own (`Deno.listenDatagram`)
 * when the runtime offers it (`--unstable-net`, or `"unstable": ["net"]` in deno.json), else
 * node:dgram. On a loaded 2-core machine (load average 12) a 5 Mbit/s stream (500 datagrams/s)
 * cost node:dgram 57-61% of a core with 5 to 65% of its datagrams lost, Deno's 4.5% with none
 * lost; unloaded (load 5) both took about 4%.
 */
import dgram from "node:dgram";

/** Receives one datagram with its sender. */
export type DatagramHandler = (data: Uint8Array, address: string, port: number) => void;

/** A bound UDP socket. */
export interface DatagramSocket {
  /** Which implementation: "deno" or "node". */
  readonly kind: "deno" | "node";
  /** Starts delivering datagrams. */
  start(handler: DatagramHandler): void;
  /** Closes the socket. Idempotent. */
  close(): Promise<void>;
}

/** Largest datagram read, in bytes (a UDP payload). */
const maxDatagramBytes = 65_536;
/** Receive buffer asked of node:dgram, in bytes: a second of 30 Mbit/s in bursts. */
const nodeReceiveBufferBytes = 4 * 1024 * 1024;
/**
 * What Deno's node:dgram allocates for each read, in bytes (64 KiB unless told): MPEG-TS
 * datagrams are 7 TS packets, at most a jumbo frame.
 */
const nodeReadBytes = 16 * 1024;

/** What is used of Deno's unstable datagram API (absent from the stable type library). */
interface DenoDatagramConn {
  receive(buffer?: Uint8Array): Promise<[Uint8Array, { hostname: string; port: number }]>;
  close(): void;
}
type ListenDatagram = (options: {
  hostname: string;
  port: number;
  transport: "udp";
}) => DenoDatagramConn;

/** Binds `hostname:port`; undefined when the port is taken. */
export function bindDatagramSocket(
  hostname: string,
  port: number,
): Promise<DatagramSocket | undefined> {
  const listen = (Deno as unknown as { listenDatagram?: ListenDatagram }).listenDatagram;
  if (typeof listen === "function") {
    try {
      return Promise.resolve(new DenoSocket(listen({ hostname, port, transport: "udp" })));
    } catch {
      return Promise.resolve(undefined);
    }
  }
  return NodeSocket.bind(hostname, port);
}

class DenoSocket implements DatagramSocket {
  readonly kind = "deno";
  #conn: DenoDatagramConn;
  #reading: Promise<void> = Promise.resolve();
  #closed = false;

  constructor(conn: DenoDatagramConn) {
    this.#conn = conn;
  }

  start(handler: DatagramHandler): void {
    this.#reading = (async () => {
      const buffer = new Uint8Array(maxDatagramBytes);
      while (!this.#closed) {
        let received;
        try {
          received = await this.#conn.receive(buffer);
        } catch {
          if (this.#closed) return;
          continue; // an ICMP error of an earlier send: the socket still receives
        }
        const [data, from] = received;
        // The handler may keep the bytes: it gets its own copy, the buffer is reused.
        handler(data.slice(), from.hostname, from.port);
      }
    })();
  }

  async close(): Promise<void> {
    if (!this.#closed) {
      this.#closed = true;
      this.#conn.close();
    }
    await this.#reading;
  }
}

class NodeSocket implements DatagramSocket {
  readonly kind = "node";
  #socket: dgram.Socket;
  #closing: Promise<void> | undefined;

  private constructor(socket: dgram.Socket) {
    this.#socket = socket;
  }

  static bind(hostname: string, port: number): Promise<NodeSocket | undefined> {
    const socket = dgram.createSocket({
      type: hostname.includes(":") ? "udp6" : "udp4",
      recvBufferSize: nodeReadBytes,
    });
    return new Promise((resolve) => {
      const onError = () => {
        socket.close();
        resolve(undefined);
      };
      socket.once("error", onError);
      socket.bind(port, hostname, () => {
        socket.off("error", onError);
        try {
          socket.setRecvBufferSize(nodeReceiveBufferBytes);
        } catch {
          // The kernel's cap (net.core.rmem_max) stays: fine for a few Mbit/s.
        }
        resolve(new NodeSocket(socket));
      });
    });
  }

  start(handler: DatagramHandler): void {
    // Errors of a bound UDP socket are per datagram (ICMP unreachable): nothing to end.
    this.#socket.on("error", () => {});
    this.#socket.on(
      "message",
      (msg: Uint8Array, info: dgram.RemoteInfo) => handler(msg, info.address, info.port),
    );
  }

  close(): Promise<void> {
    this.#closing ??= new Promise((resolve) => {
      try {
        this.#socket.close(() => resolve());
      } catch {
        resolve(); // closed already
      }
    });
    return this.#closing;
  }
}
