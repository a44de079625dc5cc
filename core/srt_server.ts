/**
 * The shared SRT port of a server (`ports.srt`): callers choose the stream with their stream
 * id, as MediaMTX and SRS callers do. `#!::r=<name>,m=publish`, `publish:<name>` or a plain
 * `<name>` publishes MPEG-TS into a stream through the MPEG-TS ingest (the stream of
 * `/mpegts/startup`, without a port per stream); `#!::r=<name>,m=request` or `read:<name>`
 * plays any published stream as MPEG-TS. Refusals happen at the handshake, with libsrt's
 * access control reject codes: 1400 a malformed stream id, 1403 a publisher outside
 * `mpegts.allowedList`, 1404 no such stream to play, 1405 an unsupported mode, 1409 a name
 * already published; a wrong passphrase is refused by the SRT listener itself.
 */
import type { Config } from "../config.ts";
import { ParseError } from "./errors.ts";
import type { Logger } from "./log.ts";
import { OutboundPolicy } from "./outbound.ts";
import type { CodecEngine } from "../media/engine/engine.ts";
import type { SrtConnection } from "../media/protocols/srt/connection.ts";
import { RejectReason } from "../media/protocols/srt/handshake.ts";
import {
  type SrtAcceptDecision,
  type SrtAcceptInfo,
  SrtListener,
  type SrtListenerStats,
} from "../media/protocols/srt/listener.ts";
import { parseStreamId, type StreamId } from "../media/protocols/srt/stream_id.ts";
import { playSrt } from "../media/publishers/srt_play.ts";
import { Stream } from "../media/stream.ts";
import type { StreamDirectory } from "../media/stream_record.ts";
import { MpegtsIngest } from "../media/providers/mpegts_ingest.ts";
import type {
  MpegtsPeer,
  MpegtsTransport,
  MpegtsTransportHandlers,
} from "../media/providers/mpegts_transport.ts";

/** What the SRT port needs of the server (the server's services satisfy it). */
export interface SrtServerDeps {
  log: Logger;
  streams: StreamDirectory;
  /** Converts MP3 to AAC for publishers, Opus to AAC for players. */
  engine: CodecEngine;
  config: Pick<Config, "bind" | "binds" | "ports" | "mpegts">;
}

/** A listening SRT port. */
export interface RunningSrtServer {
  /** The port listened on (the ephemeral one when configured as 0). */
  readonly port: number;
  /**
   * Handshakes accepted and refused (by reject code), malformed datagrams, and the publishers
   * and players connected now, for `/health`.
   */
  figures(): SrtListenerStats & { publishers: number; players: number };
  /** The publisher of `name` on this port, if any (for tests and figures). */
  publisher(name: string): MpegtsIngest | undefined;
  /** Stops listening: every publisher's stream ends, every player is closed. */
  close(): Promise<void>;
}

/** What a caller's stream id asks for, or why it is refused. */
type Intent =
  | { publish: boolean; name: string }
  | { refuse: number; message: string };

/** Reads what a caller asks for: a stream id without a mode publishes, as in MediaMTX and SRS. */
function intentOf(streamId: string): Intent {
  let id: StreamId;
  try {
    id = parseStreamId(streamId);
  } catch (e) {
    if (!(e instanceof ParseError)) throw e;
    return { refuse: RejectReason.badRequest, message: `stream id: ${e.message}` };
  }
  if (id.resource === "") {
    return { refuse: RejectReason.badRequest, message: "the stream id names no stream" };
  }
  if (id.mode === "bidirectional") {
    return { refuse: RejectReason.badMode, message: "m=bidirectional is not supported" };
  }
  return { publish: id.mode !== "request", name: id.resource };
}

/** One publishing SRT connection as the transport of an MPEG-TS ingest. */
class SrtConnectionTransport implements MpegtsTransport {
  readonly kind = "srt";
  readonly port: number;
  readonly refused = 0;
  #connection: SrtConnection;

  constructor(connection: SrtConnection, port: number) {
    this.#connection = connection;
    this.port = port;
  }

  start(handlers: MpegtsTransportHandlers): void {
    const { hostname, port } = this.#connection.peer;
    const peer: MpegtsPeer = { address: hostname, port };
    handlers.peer(peer);
    this.#connection.onPayload = (payload) => handlers.data(payload, peer);
  }

  close(): Promise<void> {
    return this.#connection.close();
  }
}

/** Starts SRT on `config.binds.srt` (else `config.bind`):`config.ports.srt`. */
export async function startSrtServer(deps: SrtServerDeps): Promise<RunningSrtServer> {
  const log = deps.log.child({ component: "srt" });
  const { config, streams, engine } = deps;
  const allowed = new OutboundPolicy(config.mpegts.allowedList);
  const publishers = new Map<string, MpegtsIngest>();
  const players = new Set<Promise<void>>();
  let closing = false;

  const accept = (info: SrtAcceptInfo): SrtAcceptDecision => {
    const intent = intentOf(info.streamId);
    if ("refuse" in intent) {
      return { accept: false, reason: intent.refuse, message: intent.message };
    }
    const { name } = intent;
    if (closing) return { accept: false, reason: RejectReason.overload, message: "stopping" };
    if (!intent.publish) {
      const stream = streams.published(name);
      return stream instanceof Stream && !stream.ended ? { accept: true } : {
        accept: false,
        reason: RejectReason.notFound,
        message: `stream ${name} not found`,
      };
    }
    if (!allowed.allows(info.peer.hostname)) {
      return {
        accept: false,
        reason: RejectReason.forbidden,
        message: `${info.peer.hostname} is not in mpegts.allowedList`,
      };
    }
    if (publishers.has(name) || streams.published(name)) {
      return {
        accept: false,
        reason: RejectReason.conflict,
        message: `stream ${name} is already published`,
      };
    }
    return { accept: true };
  };

  const publish = (connection: SrtConnection, name: string): void => {
    if (publishers.has(name)) {
      // Another caller with this name completed its handshake first.
      connection.close().catch(() => {});
      return;
    }
    const ingest = new MpegtsIngest({
      name,
      mediaSessionId: crypto.randomUUID(),
      transport: new SrtConnectionTransport(connection, listener.port),
      streams,
      engine,
      log,
      timeoutMs: config.mpegts.timeoutMs,
      maxTimestampDiffSec: config.mpegts.maxTimestampDiffSec,
    });
    publishers.set(name, ingest);
    connection.closed.then((reason) => ingest.stop(`SRT caller ended: ${reason}`));
    ingest.done.then(() => {
      if (publishers.get(name) === ingest) publishers.delete(name);
    });
  };

  const play = (connection: SrtConnection, name: string): void => {
    const playing = playSrt({ streams, engine, log }, name, connection).catch((err) => {
      log.info("srt player ended", { stream: name, err });
      return connection.close();
    }).finally(() => players.delete(playing));
    players.add(playing);
  };

  const hostname = config.binds.srt ?? config.bind;
  const listener = await SrtListener.listen({
    hostname,
    port: config.ports.srt,
    passphrase: config.mpegts.srtPassphrase,
    accept,
    onConnection: (connection) => {
      const intent = intentOf(connection.streamId);
      if ("refuse" in intent) return void connection.close().catch(() => {});
      const { hostname: address, port } = connection.peer;
      log.info("srt caller", { address, port, stream: intent.name, publish: intent.publish });
      if (intent.publish) publish(connection, intent.name);
      else play(connection, intent.name);
    },
    onReject: (info, reason, message) =>
      log.warn("srt caller refused", {
        address: info.peer.hostname,
        streamId: info.streamId,
        reason,
        message,
      }),
  });
  log.info("listening", { service: "srt", address: hostname, port: listener.port });
  return {
    port: listener.port,
    figures: () => ({ ...listener.stats, publishers: publishers.size, players: players.size }),
    publisher: (name) => publishers.get(name),
    async close() {
      closing = true;
      await Promise.all([...publishers.values()].map((ingest) => ingest.stop("server stop")));
      await listener.close();
      await Promise.all(players);
    },
  };
}
