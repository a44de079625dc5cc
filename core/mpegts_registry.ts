/**
 * MPEG-TS receivers by stream name: `/mpegts/startup` allocates a port of `mpegts.portMin`
 * to `mpegts.portMax`, opens a transport on it (a UDP socket or an SRT listener) and
 * receives what senders send there into a local stream; with a `uri` (`srt://host:port?
 * streamid=..&passphrase=..&latency=<ms>`) it calls that SRT listener instead and pulls its
 * MPEG-TS, calling again whenever the connection ends. A receiver ends on terminate, on
 * `/stream/terminate` of its stream, after `mpegts.timeoutMs` without data, or at server
 * stop; its port goes back to the pool with it.
 */
import type { Config } from "../config.ts";
import type { CodecEngine } from "../media/engine/engine.ts";
import { MpegtsIngest } from "../media/providers/mpegts_ingest.ts";
import type {
  AddressFilter,
  MpegtsTransport,
  MpegtsTransportKind,
} from "../media/providers/mpegts_transport.ts";
import { UdpMpegtsTransport } from "../media/providers/mpegts_udp.ts";
import { SrtMpegtsTransport } from "../media/providers/mpegts_srt.ts";
import { SrtCallerTransport, type SrtCallTarget } from "../media/providers/mpegts_srt_caller.ts";
import { PortPool } from "../media/providers/port_pool.ts";
import {
  BadRequestError,
  ConflictError,
  NotFoundError,
  ServiceUnavailableError,
} from "./errors.ts";
import { Cap } from "./limits.ts";
import type { Logger } from "./log.ts";
import { OutboundPolicy } from "./outbound.ts";
import type { MpegtsRecord } from "./records.ts";
import { redactUri } from "./redact.ts";
import type { StreamRegistry } from "./stream_registry.ts";

/**
 * Opens a transport on `hostname:port`, admitting senders `allows` accepts; undefined when
 * the port is taken (by another process).
 */
export type MpegtsTransportOpener = (
  hostname: string,
  port: number,
  allows: AddressFilter,
) => Promise<MpegtsTransport | undefined>;

/** How each transport is opened. */
export type MpegtsOpeners = Record<MpegtsTransportKind, MpegtsTransportOpener>;

/** The transports of a configuration: UDP sockets, SRT listeners with `mpegts.srtPassphrase`. */
export function mpegtsOpeners(config: Config): MpegtsOpeners {
  return {
    udp: (hostname, port, allows) => UdpMpegtsTransport.open(hostname, port, allows),
    srt: (hostname, port, allows) =>
      SrtMpegtsTransport.open(hostname, port, allows, config.mpegts.srtPassphrase),
  };
}

/** The MPEG-TS receivers of a server. */
export class MpegtsRegistry {
  #entries = new Map<string, MpegtsIngest>();
  #starting = new Set<string>();
  #config: Config;
  #streams: StreamRegistry;
  #engine: CodecEngine;
  #log: Logger;
  #openers: MpegtsOpeners;
  #pool: PortPool;
  #allowed: OutboundPolicy;
  #outbound: OutboundPolicy;
  /** The uri each pull calls, secrets hidden, by stream name. */
  #pullUris = new Map<string, string>();
  #closed = false;
  /** Receivers held, one per port of the range: refusals counted when the range is used up. */
  readonly ports: Cap;

  constructor(
    config: Config,
    streams: StreamRegistry,
    engine: CodecEngine,
    log: Logger,
    openers: MpegtsOpeners = mpegtsOpeners(config),
  ) {
    this.#config = config;
    this.#streams = streams;
    this.#engine = engine;
    this.#log = log.child({ component: "mpegts" });
    this.#openers = openers;
    const { portMin, portMax, allowedList } = config.mpegts;
    this.#pool = new PortPool(portMin, portMax);
    this.ports = new Cap("MPEG-TS ports", this.#pool.size);
    this.#allowed = new OutboundPolicy(allowedList);
    this.#outbound = new OutboundPolicy(config.outbound.allowedHosts);
  }

  /**
   * Opens a receiver publishing `localStreamName` and answers its record. A name in use by
   * any stream or receiver is a 409, no free port a 503.
   */
  async startup(
    localStreamName: string,
    kind: MpegtsTransportKind,
    uri?: string,
  ): Promise<MpegtsRecord> {
    const open = this.#openers[kind];
    if (this.#closed) throw new ConflictError("the server is stopping");
    const name = localStreamName;
    if (
      this.#entries.has(name) || this.#starting.has(name) || this.#streams.published(name)
    ) {
      throw new ConflictError(`stream ${name} is already published`);
    }
    if (uri !== undefined) return this.#pull(name, kind, uri);
    const { portMin, portMax } = this.#config.mpegts;
    const exhausted = () =>
      new ServiceUnavailableError(
        `no free MPEG-TS port: all of ${portMin}-${portMax} (mpegts.portMin, mpegts.portMax) are in use`,
      );
    if (!this.ports.tryAcquire()) throw exhausted();
    this.#starting.add(name);
    let taken: { port: number; value: MpegtsTransport } | undefined;
    try {
      const allows: AddressFilter = (address) => this.#allowed.allows(address);
      taken = await this.#pool.take((port) => open(this.#bindHost, port, allows));
    } finally {
      this.#starting.delete(name);
    }
    if (!taken) {
      this.ports.release();
      throw exhausted();
    }
    const transport = taken.value;
    if (this.#closed) {
      await transport.close();
      this.#pool.release(transport.port);
      this.ports.release();
      throw new ConflictError("the server is stopping");
    }
    const ingest = this.#ingest(name, transport);
    this.#log.info("mpegts receiver started", {
      stream: name,
      transport: kind,
      port: transport.port,
    });
    ingest.done.then(() => {
      this.#pool.release(transport.port);
      this.ports.release();
    });
    return this.#record(ingest);
  }

  /** Starts receiving `transport` into the stream `name`. */
  #ingest(name: string, transport: MpegtsTransport): MpegtsIngest {
    const ingest = new MpegtsIngest({
      name,
      mediaSessionId: crypto.randomUUID(),
      transport,
      streams: this.#streams,
      engine: this.#engine,
      log: this.#log,
      timeoutMs: this.#config.mpegts.timeoutMs,
      maxTimestampDiffSec: this.#config.mpegts.maxTimestampDiffSec,
    });
    this.#entries.set(name, ingest);
    ingest.done.then(() => {
      this.#entries.delete(name);
      this.#pullUris.delete(name);
    });
    return ingest;
  }

  /**
   * Pulls `uri` (an SRT listener) into the stream `name`: a bad uri is a 400, a host outside
   * `outbound.allowedHosts` a 403.
   */
  async #pull(name: string, kind: MpegtsTransportKind, uri: string): Promise<MpegtsRecord> {
    if (kind !== "srt") {
      throw new BadRequestError("uri", "only SRT streams are pulled (transport srt)");
    }
    const target = await srtTarget(uri, (host) => this.#outbound.check(host, "uri"));
    if (this.#entries.has(name) || this.#streams.published(name)) {
      throw new ConflictError(`stream ${name} is already published`);
    }
    const ingest = this.#ingest(name, new SrtCallerTransport(target));
    this.#pullUris.set(name, redactUri(uri));
    this.#log.info("mpegts pull started", { stream: name, uri: redactUri(uri) });
    return this.#record(ingest);
  }

  /** The records of every receiver. */
  list(): MpegtsRecord[] {
    return [...this.#entries.values()].map((ingest) => this.#record(ingest));
  }

  /** The receiver publishing `localStreamName`, if any (for tests and figures). */
  get(localStreamName: string): MpegtsIngest | undefined {
    return this.#entries.get(localStreamName);
  }

  /** Closes the receiver of `localStreamName` and ends its stream; 404 when there is none. */
  async terminate(localStreamName: string): Promise<void> {
    const ingest = this.#entries.get(localStreamName);
    if (!ingest) throw new NotFoundError(`MPEG-TS receiver ${localStreamName} not found`);
    await ingest.stop("Stopped by rest terminate");
    await ingest.done;
  }

  /** Closes every receiver (server stop). */
  async closeAll(): Promise<void> {
    this.#closed = true;
    await Promise.all([...this.#entries.values()].map((ingest) => ingest.stop("server stop")));
  }

  /** Address the sockets bind. */
  get #bindHost(): string {
    return this.#config.binds.media ?? this.#config.bind;
  }

  #record(ingest: MpegtsIngest): MpegtsRecord {
    const { timeoutMs, maxTimestampDiffSec, allowedList } = this.#config.mpegts;
    const host = this.#config.media.announcedAddress ?? this.#bindHost;
    const { kind, port } = ingest.transport;
    return {
      localMediaSessionId: ingest.mediaSessionId,
      localStreamName: ingest.name,
      uri: this.#pullUris.get(ingest.name) ??
        `${kind}://${host.includes(":") ? `[${host}]` : host}:${port}`,
      status: ingest.status,
      hasAudio: ingest.hasAudio,
      hasVideo: ingest.hasVideo,
      record: ingest.stream?.recording !== undefined,
      cdn: false,
      transport: kind.toUpperCase(),
      timeout: timeoutMs,
      maxTimestampDiff: maxTimestampDiffSec,
      allowedList: [...allowedList],
    };
  }
}

/**
 * The listener an `srt://host:port?streamid=..&passphrase=..&latency=<ms>` uri names, its
 * host checked by `checkHost` and resolved to an address; a bad uri is a 400 naming `uri`.
 */
async function srtTarget(uri: string, checkHost: (host: string) => void): Promise<SrtCallTarget> {
  let url: URL;
  try {
    url = new URL(uri);
  } catch {
    throw new BadRequestError("uri", "is not a URL");
  }
  if (url.protocol !== "srt:" || url.hostname === "" || url.port === "") {
    throw new BadRequestError("uri", "must be srt://<host>:<port>");
  }
  const host = url.hostname.replace(/^\[(.*)\]$/, "$1");
  checkHost(host);
  const params = url.searchParams;
  const passphrase = params.get("passphrase") ?? undefined;
  if (passphrase !== undefined && (passphrase.length < 10 || passphrase.length > 79)) {
    throw new BadRequestError("uri", "passphrase must have 10 to 79 characters");
  }
  const latency = params.get("latency");
  const latencyMs = latency === null ? undefined : Number(latency);
  if (latencyMs !== undefined && !(Number.isInteger(latencyMs) && latencyMs >= 0)) {
    throw new BadRequestError("uri", "latency must be a whole number of ms");
  }
  return {
    hostname: await addressOf(host),
    port: Number(url.port),
    // A raw `#!::` stream id (as ffmpeg takes it) reads as the URL's fragment.
    streamId: params.has("streamid")
      ? (params.get("streamid") ?? "") + decodeURIComponent(url.hash)
      : undefined,
    passphrase,
    latencyMs,
  };
}

/** `host` as an IP address: itself when it is one, else its first A record. */
async function addressOf(host: string): Promise<string> {
  if (/^[\d.]+$/.test(host) || host.includes(":")) return host;
  try {
    const [address] = await Deno.resolveDns(host, "A");
    if (address) return address;
  } catch {
    // reported below
  }
  throw new BadRequestError("uri", `host ${host} does not resolve`);
}
