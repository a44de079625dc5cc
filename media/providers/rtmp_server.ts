/**
 * The RTMP listener of a server: clients go through the backend's REST hooks as Web SDK
 * clients do (`connect`, then `publishStream` or `playStream`), publishers become streams,
 * players play any published stream.
 */
import type { Config } from "../../config.ts";
import { ForbiddenError } from "../../core/errors.ts";
import { Cap, KeyedCap } from "../../core/limits.ts";
import type { Logger } from "../../core/log.ts";
import type { CodecEngine } from "../engine/engine.ts";
import type { ListenerLimits } from "../../core/capped_listener.ts";
import {
  type PlayTarget,
  type RtmpConnectRequest,
  RtmpServer,
  type RtmpSession,
} from "../protocols/rtmp/server.ts";
import type { RtmpConn } from "../protocols/rtmp/conn.ts";
import type { RtmpMessage } from "../protocols/rtmp/message.ts";
import { playRtmp } from "../publishers/rtmp_play.ts";
import type { ViewerDirectory } from "../stream_record.ts";
import { RtmpIngest, rtmpMediaProvider } from "./rtmp_ingest.ts";

/** Application (`appKey`) of RTMP clients whose app path names none of its own, as in WCS. */
export const rtmpDefaultAppKey = "flashStreamingApp";
/** RTMP app paths that mean the default application. */
const defaultAppPaths = new Set(["", "live"]);

/** The answer of a hook: go on with `body`, or refused with the reason. */
type HookAnswer =
  | { ok: true; body: Record<string, unknown>; restClientConfig?: unknown }
  | { ok: false; reason: string };

/** The backend hooks RTMP clients go through (what the server's HookClient offers). */
export interface RtmpHooks {
  /** The `connect` hook: any failure refuses the connection. */
  connect(body: Record<string, unknown>): Promise<HookAnswer>;
  /** A direct invocation or event under the connection's `restClientConfig` (from connect). */
  invoke(hook: string, body: Record<string, unknown>, config?: unknown): Promise<HookAnswer>;
  /** Resolves once every hook call in flight has ended. */
  drain(): Promise<void>;
}

/** What the RTMP listener needs of the server (the server's services satisfy it). */
export interface RtmpServerDeps {
  log: Logger;
  streams: ViewerDirectory;
  /** Converts Opus audio to AAC for players, MP3 to AAC for publishers. */
  engine: CodecEngine;
  hooks: RtmpHooks;
  /** This node's id, in every hook body. */
  nodeId: string;
  config: Pick<Config, "bind" | "binds" | "ports" | "limits" | "cdn" | "rtmp">;
}

/** A listening RTMP server. */
export interface RunningRtmpServer {
  /** The port listened on (the ephemeral one when configured as 0). */
  readonly port: number;
  /** The listener's connection caps (held, max, refused), for `/health`. */
  limitsSnapshot(): ListenerLimits;
  /** Stops listening and closes every RTMP connection. */
  close(): Promise<void>;
}

/** Options of startRtmpServer for tests. */
export interface RtmpServerTestOptions {
  /** Overrides the time from accept to publish or play, in ms. */
  setupTimeoutMs?: number;
}

/** Starts RTMP on `config.binds.rtmp` (else `config.bind`):`config.ports.rtmp`. */
export function startRtmpServer(
  deps: RtmpServerDeps,
  options: RtmpServerTestOptions = {},
): RunningRtmpServer {
  const log = deps.log.child({ component: "rtmp" });
  const ingest = new RtmpIngest(deps.streams, deps.engine, log);
  const { limits } = deps.config;
  const server = new RtmpServer(
    { connect: (request) => connectSession(deps, ingest, request, log) },
    log,
    {
      connections: new Cap("rtmp connections", limits.connectionsPerListener),
      perAddress: new KeyedCap("rtmp connections per address", limits.connectionsPerAddress),
      setupTimeoutMs: options.setupTimeoutMs,
      transport: deps.config.rtmp.transport,
    },
  );
  const address = deps.config.binds.rtmp ?? deps.config.bind;
  const port = server.listen(address, deps.config.ports.rtmp);
  log.info("listening", { service: "rtmp", address, port, transport: server.transport });
  return {
    port,
    limitsSnapshot: () => server.limitsSnapshot(),
    async close() {
      await server.close();
      await ingest.drain();
      // The last connections' DISCONNECTED events.
      await deps.hooks.drain();
    },
  };
}

/**
 * Admits a client through the `connect` hook. Its body is the connection object of a Web SDK
 * client as far as RTMP knows one: the context fields, and the query of the RTMP address as
 * `custom` (`rtmp://host/live?token=abc` gives `custom.token`). The events follow as for the
 * Web SDK: ConnectionStatusEvent ESTABLISHED and DISCONNECTED, StreamStatusEvent PUBLISHING
 * and UNPUBLISHED for a publisher, PLAYING and STOPPED for a player.
 */
async function connectSession(
  deps: RtmpServerDeps,
  ingest: RtmpIngest,
  request: RtmpConnectRequest,
  log: Logger,
): Promise<RtmpSession> {
  const context: SessionContext = {
    nodeId: deps.nodeId,
    appKey: defaultAppPaths.has(request.app) ? rtmpDefaultAppKey : request.app,
    sessionId: `/${request.remote}-${crypto.randomUUID()}`,
  };
  const answer = await deps.hooks.connect({ ...context, custom: request.query });
  if (!answer.ok) throw new ForbiddenError(`connection refused by the backend: ${answer.reason}`);
  const session = new HookSession(deps, ingest, request, log, context, answer);
  session.notify("ConnectionStatusEvent", answer.body, "ESTABLISHED");
  return session;
}

/** The fields of every hook body of one RTMP client. */
interface SessionContext {
  nodeId: string;
  appKey: string;
  sessionId: string;
}

/**
 * One admitted client. A class rather than closures over the connect call: its methods are
 * shared by every client, where closures were five functions and a context for each idle
 * player.
 */
class HookSession implements RtmpSession {
  readonly #deps: RtmpServerDeps;
  readonly #ingest: RtmpIngest;
  readonly #request: RtmpConnectRequest;
  readonly #log: Logger;
  readonly #context: SessionContext;
  /** The `connect` hook's answer: the connection object of the events, its restClientConfig. */
  readonly #connection: Record<string, unknown>;
  readonly #restClientConfig: unknown;

  constructor(
    deps: RtmpServerDeps,
    ingest: RtmpIngest,
    request: RtmpConnectRequest,
    log: Logger,
    context: SessionContext,
    answer: { body: Record<string, unknown>; restClientConfig?: unknown },
  ) {
    this.#deps = deps;
    this.#ingest = ingest;
    this.#request = request;
    this.#log = log;
    this.#context = context;
    this.#connection = answer.body;
    this.#restClientConfig = answer.restClientConfig;
  }

  /** An event hook: a notification, its failure only logged by the hook client. */
  notify(hook: string, body: Record<string, unknown>, status: string): void {
    void this.#deps.hooks.invoke(hook, { ...body, status }, this.#restClientConfig);
  }

  /** The stream hook; resolves with the stream object to go on with (renamed, maybe). */
  async #admit(
    hook: "publishStream" | "playStream",
    name: string,
    query: Record<string, string>,
  ): Promise<{ name: string; stream: Record<string, unknown> }> {
    const outcome = await this.#deps.hooks.invoke(hook, {
      ...this.#context,
      mediaSessionId: crypto.randomUUID(),
      name,
      published: hook === "publishStream",
      hasVideo: true,
      hasAudio: true,
      status: "PENDING",
      record: false,
      mediaProvider: rtmpMediaProvider,
      custom: { ...this.#request.query, ...query },
    }, this.#restClientConfig);
    if (!outcome.ok) {
      this.#log.info("rtmp stream refused by the backend", {
        hook,
        stream: name,
        reason: outcome.reason,
      });
      throw new ForbiddenError(`${name} refused by the backend: ${outcome.reason}`);
    }
    const renamed = outcome.body.name;
    const admitted = typeof renamed === "string" && renamed !== "" ? renamed : name;
    return { name: admitted, stream: { ...outcome.body, name: admitted } };
  }

  async publish(name: string, query: Record<string, string>, conn: RtmpConn) {
    const admitted = await this.#admit("publishStream", name, query);
    const sink = this.#ingest.publish(
      admitted.name,
      conn,
      String(admitted.stream.mediaSessionId),
    );
    this.notify("StreamStatusEvent", admitted.stream, "PUBLISHING");
    let ended = false;
    return {
      message: (message: RtmpMessage) => sink.message(message),
      close: (reason: string) => {
        sink.close(reason);
        if (ended) return;
        ended = true;
        this.notify("StreamStatusEvent", admitted.stream, "UNPUBLISHED");
      },
    };
  }

  async play(name: string, query: Record<string, string>, target: PlayTarget) {
    const deps = this.#deps;
    const admitted = await this.#admit("playStream", name, query);
    const key = { ...this.#request.query, ...query }[deps.config.cdn.aclPropertyName];
    // Through the CDN's gate: the viewer's key checked, a stream of another node pulled here.
    const exists = await deps.streams.open(admitted.name, key) !== undefined;
    // PLAYING only for a stream there is: a missing one is answered StreamNotFound.
    if (exists) this.notify("StreamStatusEvent", admitted.stream, "PLAYING");
    const unwatch = deps.streams.watchViewer(admitted.name, key, (info) => {
      this.#log.info("rtmp player stopped", { stream: admitted.name, reason: info });
      target.conn.close();
    });
    const stopped = () => {
      unwatch();
      if (exists) this.notify("StreamStatusEvent", admitted.stream, "STOPPED");
    };
    // Not awaited here: this frame is let go while the player plays (an async frame and its
    // await held about half a KiB per idle player).
    return playRtmp(
      { streams: deps.streams, engine: deps.engine, log: this.#log },
      admitted.name,
      target,
    ).then(stopped, (err) => {
      stopped();
      throw err;
    });
  }

  close(): void {
    this.notify("ConnectionStatusEvent", this.#connection, "DISCONNECTED");
  }
}
