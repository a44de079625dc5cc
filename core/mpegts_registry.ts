/**
 * MPEG-TS receivers by stream name: `/mpegts/startup` allocates a port of `mpegts.portMin`
 * to `mpegts.portMax`, opens a transport on it (a UDP socket or an SRT listener) and
 * receives what senders send there into a local stream. A receiver ends on terminate, on
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
import { PortPool } from "../media/providers/port_pool.ts";
import { ConflictError, NotFoundError, ServiceUnavailableError } from "./errors.ts";
import { Cap } from "./limits.ts";
import type { Logger } from "./log.ts";
import { OutboundPolicy } from "./outbound.ts";
import type { MpegtsRecord } from "./records.ts";
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
  }

  /**
   * Opens a receiver publishing `localStreamName` and answers its record. A name in use by
   * any stream or receiver is a 409, no free port a 503.
   */
  async startup(localStreamName: string, kind: MpegtsTransportKind): Promise<MpegtsRecord> {
    const open = this.#openers[kind];
    if (this.#closed) throw new ConflictError("the server is stopping");
    const name = localStreamName;
    if (
      this.#entries.has(name) || this.#starting.has(name) || this.#streams.published(name)
    ) {
      throw new ConflictError(`stream ${name} is already published`);
    }
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
    this.#log.info("mpegts receiver started", {
      stream: name,
      transport: kind,
      port: transport.port,
    });
    ingest.done.then(() => {
      this.#entries.delete(name);
      this.#pool.release(transport.port);
      this.ports.release();
    });
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
      uri: `${kind}://${host.includes(":") ? `[${host}]` : host}:${port}`,
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
