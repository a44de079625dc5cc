/**
 * The SIP transport layer (RFC 3261 §18, RFC 3581 rport): one UDP socket and one TCP listener
 * on the same port, outgoing TCP connections reused both ways, framing of TCP streams, and
 * the stamping of `received`/`rport` on the top Via of requests received. Malformed input is
 * answered "400 Bad Request" when enough of it can be read to route an answer, else dropped,
 * and counted either way; nothing a peer sends ends the receive loops.
 */
import dgram from "node:dgram";
import { acceptLoop } from "../../../core/accept_loop.ts";
import { ParseError } from "../../../core/errors.ts";
import { Cap } from "../../../core/limits.ts";
import type { Logger } from "../../../core/log.ts";
import { SipTransportError } from "./errors.ts";
import { formatVia, parseVia, type Via } from "./headers.ts";
import {
  maxSipMessageBytes,
  parseSipMessage,
  serializeSipMessage,
  SipHeaders,
  type SipMessage,
  type SipRequest,
  type SipResponse,
  SipStreamParser,
} from "./message.ts";

/** The transports served. */
export type SipTransportName = "UDP" | "TCP";

/** Where a message comes from or goes to. */
export interface SipPeer {
  transport: SipTransportName;
  host: string;
  port: number;
}

/** Options of SipTransport.open. */
export interface SipTransportOptions {
  /** Address bound by the UDP socket and the TCP listener. */
  hostname: string;
  /** Port bound; 0 takes any free port, the same number for UDP and TCP. */
  port: number;
  log: Logger;
  /** Host written into the Via of requests sent (default `hostname`; set it for 0.0.0.0). */
  advertisedHost?: string;
  /** Idle time after which a TCP connection is closed, in ms (default sipTcpIdleMs). */
  tcpIdleMs?: number;
  /** Most TCP connections held at once (default maxSipTcpConnections). */
  maxTcpConnections?: number;
}

/**
 * Idle time after which a TCP connection is closed, in ms: well past a transaction's 64*T1
 * (32 s) and a 2xx's wait for its ACK, so only connections nobody uses are closed.
 */
export const sipTcpIdleMs = 5 * 64 * 1000;
/** Longest wait for an outgoing TCP connection, in ms. */
export const sipTcpConnectTimeoutMs = 5_000;
/** Longest wait for one message written to a TCP connection, in ms; then it is closed. */
export const sipTcpWriteTimeoutMs = 10_000;
/** Most TCP connections (incoming and outgoing) held at once; more are refused. */
export const maxSipTcpConnections = 1024;
/** Default SIP port of a sent-by without one (RFC 3261 §18.2.2, §19.1.2). */
export const defaultSipPort = 5060;
/** Attempts at a free port number that both UDP and TCP can bind. */
const portBindAttempts = 20;
/** Bytes read from a TCP connection at once. */
const tcpReadBytes = 16 * 1024;

/** A TCP connection and its framing. */
interface Connection {
  readonly key: string;
  readonly peer: SipPeer;
  readonly conn: Deno.TcpConn;
  readonly parser: SipStreamParser;
  /** The chain of writes, so messages never interleave. */
  writing: Promise<void>;
  lastActivityMs: number;
  idleTimer?: ReturnType<typeof setTimeout>;
  closed: boolean;
  /** Resolves when the read loop ended. */
  done?: Promise<void>;
}

/** The map key of a peer's connection. */
function peerKey(host: string, port: number): string {
  return `${host}|${port}`;
}

/** Whether a datagram holds line ends only (a CRLF keep-alive, RFC 5626 §3.5.1). */
function isKeepAlive(data: Uint8Array): boolean {
  return data.every((b) => b === 0x0d || b === 0x0a || b === 0x20);
}

/**
 * The destination of a response (RFC 3261 §18.2.2, RFC 3581 §4): over TCP the peer the
 * request came from (its connection); over UDP the `received` address (else the sent-by host)
 * and the `rport` port (else the sent-by port, 5060 by default) of the request's top Via.
 */
export function responsePeer(topVia: Via, from: SipPeer): SipPeer {
  if (from.transport === "TCP") return from;
  const rport = topVia.params.get("rport");
  return {
    transport: "UDP",
    host: topVia.params.get("received") || topVia.host,
    port: rport ? Number(rport) : topVia.port ?? defaultSipPort,
  };
}

/**
 * Headers with `vias` as the Via values, written at the place of the first Via (at the top
 * when there was none), one a line; every other header keeps its place.
 */
export function withVias(headers: SipHeaders, vias: string[]): SipHeaders {
  const out = new SipHeaders();
  let written = false;
  const writeVias = () => {
    for (const via of vias) out.add("Via", via);
    written = true;
  };
  if (!headers.has("Via")) writeVias();
  for (const [name, value] of headers) {
    if (name !== "Via") out.add(name, value);
    else if (!written) writeVias();
  }
  return out;
}

/**
 * A response to `request` (RFC 3261 §8.2.6.1): its Via values, From, To, Call-ID and CSeq
 * copied, `toTag` added to a To without a tag, then `extra` headers and the body.
 */
export function buildResponse(
  request: SipRequest,
  status: number,
  reason: string,
  o: { toTag?: string; headers?: [string, string][]; body?: Uint8Array; contentType?: string } = {},
): SipResponse {
  const headers = new SipHeaders();
  for (const via of request.headers.getAll("Via")) headers.add("Via", via);
  for (const name of ["From", "To", "Call-ID", "CSeq"]) {
    let value = request.headers.get(name);
    if (value === undefined) continue;
    if (name === "To" && o.toTag !== undefined && tagOf(value) === undefined) {
      value += `;tag=${o.toTag}`;
    }
    headers.add(name, value);
  }
  for (const [name, value] of o.headers ?? []) headers.add(name, value);
  const body = o.body ?? new Uint8Array(0);
  if (o.contentType !== undefined) headers.set("Content-Type", o.contentType);
  return { kind: "response", status, reason, headers, body };
}

/** The `tag` parameter of a From or To value, undefined when it has none. */
export function tagOf(value: string): string | undefined {
  // Header parameters follow the <URI>, or the bare URI (whose own parameters they are then).
  const gt = value.lastIndexOf(">");
  const params = gt >= 0 ? value.slice(gt + 1) : value;
  const m = /;\s*tag\s*=\s*([^\s;,]+)/i.exec(params);
  return m ? m[1] : undefined;
}

/** The header lines a 400 answer needs (RFC 3261 §8.2.6.1), by lower-case name or compact form. */
const answerHeaders = new Map([
  ["via", "Via"],
  ["v", "Via"],
  ["from", "From"],
  ["f", "From"],
  ["to", "To"],
  ["t", "To"],
  ["call-id", "Call-ID"],
  ["i", "Call-ID"],
  ["cseq", "CSeq"],
]);

/**
 * The "400 Bad Request" for a request the parser refused, when its request line and the
 * headers an answer copies can still be read (its top Via parses); undefined otherwise.
 * The parser's complaint goes into a Warning (RFC 3261 §20.43) so the sender can see why.
 */
function badRequestAnswer(
  datagram: Uint8Array,
  error: ParseError,
): { response: SipResponse; topVia: Via } | undefined {
  const text = new TextDecoder().decode(datagram.subarray(0, Math.min(datagram.length, 8192)));
  const lines = text.replace(/^[\r\n]+/, "").split(/\r?\n/);
  const requestLine = /^([A-Za-z]+) \S+ SIP\/2\.0$/i.exec(lines[0]);
  // An ACK is never answered (RFC 3261 §17.1.1.3).
  if (!requestLine || requestLine[1].toUpperCase() === "ACK") return undefined;
  const headers = new SipHeaders();
  try {
    for (const line of lines.slice(1)) {
      if (line === "") break;
      const colon = line.indexOf(":");
      const name = answerHeaders.get(line.slice(0, colon).trim().toLowerCase());
      if (colon > 0 && name !== undefined) headers.add(name, line.slice(colon + 1).trim());
    }
    const topVia = parseVia(headers.get("Via") ?? "");
    const reason = error.message.replace(/[^\x20-\x7e]/g, "?").replaceAll('"', "'").slice(0, 120);
    const request: SipRequest = {
      kind: "request",
      method: requestLine[1],
      uri: "sip:invalid",
      headers,
      body: new Uint8Array(0),
    };
    const response = buildResponse(request, 400, "Bad Request", {
      headers: [["Warning", `399 - "${reason}"`]],
    });
    return { response, topVia };
  } catch {
    return undefined;
  }
}

/**
 * The UDP socket and TCP listener of a SIP endpoint. Messages received go to `onMessage`;
 * `send` writes one to a peer.
 */
export class SipTransport {
  /** The bound address. */
  readonly hostname: string;
  /** The bound port (UDP and TCP). */
  readonly port: number;
  /** Host written into the Via of requests sent. */
  readonly advertisedHost: string;
  /** Receives every well-formed message; requests carry received/rport on their top Via. */
  onMessage: (message: SipMessage, from: SipPeer) => void = () => {};
  /** Counters: messages received and sent, malformed input dropped or answered, open TCP. */
  readonly stats = { received: 0, sent: 0, malformed: 0, tcpConnections: 0 };

  readonly #log: Logger;
  readonly #udp: dgram.Socket;
  readonly #listener: Deno.TcpListener;
  readonly #tcpIdleMs: number;
  /** The connection used to send to each peer. */
  readonly #connections = new Map<string, Connection>();
  /** Every open connection (two with one peer when both connected at once). */
  readonly #open = new Set<Connection>();
  readonly #connecting = new Map<string, Promise<Connection>>();
  readonly #cap: Cap;
  #acceptLoop?: Promise<void>;
  #closing?: Promise<void>;

  private constructor(
    o: SipTransportOptions,
    udp: dgram.Socket,
    listener: Deno.TcpListener,
  ) {
    this.hostname = o.hostname;
    this.port = (listener.addr as Deno.NetAddr).port;
    this.advertisedHost = o.advertisedHost ?? o.hostname;
    this.#log = o.log;
    this.#udp = udp;
    this.#listener = listener;
    this.#tcpIdleMs = o.tcpIdleMs ?? sipTcpIdleMs;
    this.#cap = new Cap("SIP TCP connections", o.maxTcpConnections ?? maxSipTcpConnections);
  }

  /** Binds UDP and TCP on `hostname:port` (port 0: a free port both can take). */
  static async open(o: SipTransportOptions): Promise<SipTransport> {
    for (let attempt = 1;; attempt++) {
      const udp = dgram.createSocket({ type: o.hostname.includes(":") ? "udp6" : "udp4" });
      await new Promise<void>((resolve, reject) => {
        udp.once("error", reject);
        udp.bind(o.port, o.hostname, () => {
          udp.off("error", reject);
          resolve();
        });
      }).catch((err) => {
        udp.close();
        throw new SipTransportError(`cannot bind SIP UDP ${o.hostname}:${o.port}: ${err}`, {
          cause: err,
        });
      });
      const port = udp.address().port;
      let listener: Deno.TcpListener;
      try {
        listener = Deno.listen({ hostname: o.hostname, port, transport: "tcp" });
      } catch (err) {
        await new Promise<void>((resolve) => udp.close(() => resolve()));
        // With a free port asked for, the UDP port's TCP twin may be taken: try another.
        if (o.port === 0 && err instanceof Deno.errors.AddrInUse && attempt < portBindAttempts) {
          continue;
        }
        throw new SipTransportError(`cannot bind SIP TCP ${o.hostname}:${port}: ${err}`, {
          cause: err,
        });
      }
      const transport = new SipTransport(o, udp, listener);
      transport.#start();
      return transport;
    }
  }

  #start(): void {
    this.#udp.on("error", (err: Error) => this.#log.debug("SIP UDP error", { err }));
    this.#udp.on("message", (data: Uint8Array, info: dgram.RemoteInfo) => {
      this.#onDatagram(data, { transport: "UDP", host: info.address, port: info.port });
    });
    this.#acceptLoop = acceptLoop(
      this.#listener,
      (conn) => this.#onAccepted(conn),
      this.#log,
      () => this.#closing !== undefined,
    );
  }

  #onDatagram(data: Uint8Array, from: SipPeer): void {
    if (isKeepAlive(data)) return;
    if (data.length > maxSipMessageBytes) {
      this.#malformed(from, `datagram of ${data.length} bytes`);
      return;
    }
    let message: SipMessage;
    try {
      message = parseSipMessage(data);
    } catch (err) {
      // Whatever the parser throws stays here: an exception out of a socket's event handler
      // would end the process.
      this.#malformed(from, (err as Error).message);
      if (!(err instanceof ParseError)) {
        this.#log.error("SIP parser failed", { err });
        return;
      }
      const answer = badRequestAnswer(data, err);
      if (answer) {
        this.#sendQuietly(answer.response, responsePeer(answer.topVia, from));
      }
      return;
    }
    this.#deliver(message, from);
  }

  #malformed(from: SipPeer, reason: string): void {
    this.stats.malformed++;
    this.#log.debug("malformed SIP input", { from: `${from.host}:${from.port}`, reason });
  }

  /** Stamps the top Via of a request (RFC 3261 §18.2.1, RFC 3581 §4) and hands it on. */
  #deliver(message: SipMessage, from: SipPeer): void {
    this.stats.received++;
    try {
      if (message.kind === "request") {
        const vias = message.headers.getAll("Via");
        const top = parseVia(vias[0]);
        const rport = top.params.get("rport");
        // RFC 3581 §4: with rport asked, received is added even when it equals the sent-by.
        if (top.host !== from.host || rport !== undefined) top.params.set("received", from.host);
        if (rport === "") top.params.set("rport", String(from.port));
        vias[0] = formatVia(top);
        message.headers = withVias(message.headers, vias);
      }
      this.onMessage(message, from);
    } catch (err) {
      // The receive loops must outlive any message: a handler's failure is logged only.
      this.#log.error("SIP message handling failed", { err });
    }
  }

  /**
   * Sends a message: a datagram over UDP; over TCP on the connection with `to` (incoming or
   * outgoing), opened when there is none. A response over TCP whose connection is gone goes
   * to the received address and sent-by port of its top Via (RFC 3261 §18.2.2). Rejects
   * with a SipTransportError.
   */
  async send(message: SipMessage, to: SipPeer): Promise<void> {
    if (this.#closing) throw new SipTransportError("SIP transport closed");
    let bytes: Uint8Array;
    try {
      bytes = serializeSipMessage(message);
    } catch (err) {
      throw new SipTransportError(`cannot write SIP message: ${(err as Error).message}`, {
        cause: err,
      });
    }
    if (to.transport === "UDP") {
      await this.#sendDatagram(bytes, to);
    } else {
      let target = to;
      if (message.kind === "response" && !this.#connections.has(peerKey(to.host, to.port))) {
        let top: Via;
        try {
          top = parseVia(message.headers.get("Via") ?? "");
        } catch (err) {
          throw new SipTransportError(`response without a usable Via: ${err}`, { cause: err });
        }
        target = {
          transport: "TCP",
          host: top.params.get("received") || top.host,
          port: top.port ?? defaultSipPort,
        };
      }
      const connection = await this.#connection(target);
      await this.#write(connection, bytes);
    }
    this.stats.sent++;
  }

  /** Sends and logs a failure (answers nobody waits for). */
  #sendQuietly(message: SipMessage, to: SipPeer): void {
    this.send(message, to).catch((err) => this.#log.debug("SIP send failed", { err }));
  }

  #sendDatagram(bytes: Uint8Array, to: SipPeer): Promise<void> {
    return new Promise((resolve, reject) => {
      this.#udp.send(bytes, to.port, to.host, (err: Error | null) => {
        if (err) {
          reject(new SipTransportError(`cannot send to ${to.host}:${to.port}: ${err.message}`));
        } else {
          resolve();
        }
      });
    });
  }

  /** The open connection with `to`, or a new one (one connect at a time per peer). */
  #connection(to: SipPeer): Promise<Connection> {
    const key = peerKey(to.host, to.port);
    const open = this.#connections.get(key);
    if (open) return Promise.resolve(open);
    let pending = this.#connecting.get(key);
    if (!pending) {
      pending = this.#connect(to).finally(() => this.#connecting.delete(key));
      this.#connecting.set(key, pending);
    }
    return pending;
  }

  async #connect(to: SipPeer): Promise<Connection> {
    const where = `${to.host}:${to.port}`;
    if (!this.#cap.tryAcquire()) {
      this.#log.warn("SIP TCP connection refused", { to: where, reason: this.#cap.refusal() });
      throw new SipTransportError(`cannot connect to ${where}: ${this.#cap.refusal()}`);
    }
    const attempt = Deno.connect({ hostname: to.host, port: to.port, transport: "tcp" });
    let timer: ReturnType<typeof setTimeout> | undefined;
    const timeout = new Promise<never>((_, reject) => {
      timer = setTimeout(
        () => reject(new SipTransportError(`connect to ${where} timed out`)),
        sipTcpConnectTimeoutMs,
      );
    });
    let conn: Deno.TcpConn;
    try {
      conn = await Promise.race([attempt, timeout]);
    } catch (err) {
      this.#cap.release();
      attempt.then((late) => late.close(), () => {});
      if (err instanceof SipTransportError) throw err;
      throw new SipTransportError(`cannot connect to ${where}: ${(err as Error).message}`, {
        cause: err,
      });
    } finally {
      clearTimeout(timer);
    }
    if (this.#closing) {
      this.#cap.release();
      conn.close();
      throw new SipTransportError("SIP transport closed");
    }
    return this.#adopt(conn, to);
  }

  #onAccepted(conn: Deno.TcpConn): void {
    if (!this.#cap.tryAcquire()) {
      this.#log.warn("SIP TCP connection refused", {
        from: `${conn.remoteAddr.hostname}:${conn.remoteAddr.port}`,
        reason: this.#cap.refusal(),
      });
      conn.close();
      return;
    }
    const { hostname, port } = conn.remoteAddr;
    this.#adopt(conn, { transport: "TCP", host: hostname, port });
  }

  /** Registers a connection (its cap slot already taken) and starts reading it. */
  #adopt(conn: Deno.TcpConn, peer: SipPeer): Connection {
    conn.setNoDelay(true);
    const key = peerKey(peer.host, peer.port);
    const connection: Connection = {
      key,
      peer,
      conn,
      parser: new SipStreamParser(),
      writing: Promise.resolve(),
      lastActivityMs: performance.now(),
      closed: false,
    };
    // A second connection with the same peer (both ends connected at once) replaces the
    // first for sending; the first is still read until it closes.
    this.#connections.set(key, connection);
    this.#open.add(connection);
    this.stats.tcpConnections++;
    this.#armIdle(connection, this.#tcpIdleMs);
    connection.done = this.#read(connection);
    return connection;
  }

  #armIdle(c: Connection, ms: number): void {
    c.idleTimer = setTimeout(() => {
      const idleMs = performance.now() - c.lastActivityMs;
      if (idleMs >= this.#tcpIdleMs) {
        this.#log.debug("SIP TCP connection idle; closing", { peer: c.key });
        this.#drop(c);
      } else {
        this.#armIdle(c, this.#tcpIdleMs - idleMs);
      }
    }, ms);
  }

  async #read(c: Connection): Promise<void> {
    const buf = new Uint8Array(tcpReadBytes);
    try {
      for (;;) {
        const n = await c.conn.read(buf);
        if (n === null) break;
        c.lastActivityMs = performance.now();
        let messages: SipMessage[];
        try {
          messages = c.parser.push(buf.subarray(0, n));
        } catch (err) {
          if (!(err instanceof ParseError)) throw err;
          // A stream cannot be resynchronised after a framing error: the connection ends.
          this.#malformed(c.peer, err.message);
          break;
        }
        for (const message of messages) this.#deliver(message, c.peer);
      }
    } catch (err) {
      if (!c.closed) this.#log.debug("SIP TCP read failed", { peer: c.key, err });
    } finally {
      this.#drop(c);
    }
  }

  #write(c: Connection, bytes: Uint8Array): Promise<void> {
    const written = c.writing.then(async () => {
      if (c.closed) throw new SipTransportError(`connection to ${c.key} closed`);
      const timer = setTimeout(() => this.#drop(c), sipTcpWriteTimeoutMs);
      try {
        for (let at = 0; at < bytes.length;) at += await c.conn.write(bytes.subarray(at));
        c.lastActivityMs = performance.now();
      } catch (err) {
        this.#drop(c);
        throw new SipTransportError(`cannot write to ${c.key}: ${(err as Error).message}`, {
          cause: err,
        });
      } finally {
        clearTimeout(timer);
      }
    });
    c.writing = written.catch(() => {});
    return written;
  }

  /** Closes a connection once; its read loop then ends. */
  #drop(c: Connection): void {
    if (c.closed) return;
    c.closed = true;
    clearTimeout(c.idleTimer);
    if (this.#connections.get(c.key) === c) this.#connections.delete(c.key);
    this.#open.delete(c);
    this.stats.tcpConnections--;
    this.#cap.release();
    try {
      c.conn.close();
    } catch {
      // already closed by the peer's end of stream
    }
  }

  /** Closes UDP, the TCP listener and every connection; resolves when all are released. */
  close(): Promise<void> {
    this.#closing ??= (async () => {
      this.#listener.close();
      await this.#acceptLoop;
      await Promise.allSettled([...this.#connecting.values()]);
      const open = [...this.#open];
      for (const c of open) this.#drop(c);
      await Promise.allSettled(open.map((c) => c.done));
      await new Promise<void>((resolve) => this.#udp.close(() => resolve()));
    })();
    return this.#closing;
  }
}
