/**
 * Remote pulls and pushes (`/pull/pull`, `/pull/push`): streams played from, or published to,
 * another WCS-compatible server over its Web SDK WebSocket and WebRTC. Each is a RemoteLink
 * that reconnects with backoff when the remote drops; the entry goes away on terminate, when
 * its local stream ends, or on server stop.
 */
import type { Config } from "../config.ts";
import type { CodecEngine } from "../media/engine/engine.ts";
import type { IceMux } from "../media/protocols/webrtc/ice_mux.ts";
import type { EngineSendPaths } from "../media/protocols/webrtc/engine_send_path.ts";
import { Stream } from "../media/stream.ts";
import { peerAddress } from "../signaling/play_plan.ts";
import { type Backoff, defaultBackoff, RemoteLink } from "../signaling/remote/remote_link.ts";
import { ConflictError, NotFoundError, ServiceUnavailableError } from "./errors.ts";
import { descriptors } from "./fd_guard.ts";
import type { Cap } from "./limits.ts";
import type { Logger } from "./log.ts";
import { OutboundPolicy } from "./outbound.ts";
import { redactUri } from "./redact.ts";
import type { RemotePullRecord } from "./records.ts";
import type { StreamRegistry } from "./stream_registry.ts";

/** What the registry needs of the server. */
export interface RemotePullDeps {
  config: Config;
  streams: StreamRegistry;
  engine: CodecEngine;
  nodeId: string;
  log: Logger;
  /** The `pulls` cap (shared with RTSP and RTMP pulls) and the `pushes` cap (RTMP pushes). */
  pulls: Cap;
  pushes: Cap;
  /** The server's ICE mux: the links' peers take their UDP candidates on it when set. */
  iceMux?: IceMux;
  /** The server's send engine: a push's media goes through it when its peer is on the mux. */
  sendPaths?: EngineSendPaths;
}

/** The remote pulls and pushes of a server. */
export class RemotePullRegistry {
  readonly #links = new Set<RemoteLink>();
  readonly #deps: RemotePullDeps;
  readonly #log: Logger;
  readonly #outbound: OutboundPolicy;
  #backoff: Backoff = { ...defaultBackoff };

  constructor(deps: RemotePullDeps) {
    this.#deps = deps;
    this.#log = deps.log.child({ component: "remote-pull" });
    this.#outbound = new OutboundPolicy(deps.config.outbound.allowedHosts);
  }

  /** Sets the delays between reconnect attempts of links started from now on. */
  setBackoff(backoff: Backoff): void {
    this.#backoff = { ...backoff };
  }

  /**
   * Plays `remoteStreamName` of the server at `uri` into the local stream `localStreamName`;
   * resolves once its media flows. 409 when the name is published here or the same pull
   * runs, 403 for a host outside `outbound.allowedHosts`, 503 beyond the `pulls` cap, 502
   * when the remote is unreachable, refuses, or fails the stream.
   */
  async pull(uri: string, remoteStreamName: string, localStreamName: string): Promise<void> {
    this.#checkHost(uri);
    this.#refuseDuplicate("pull", uri, remoteStreamName);
    if (
      this.#deps.streams.published(localStreamName) ||
      [...this.#links].some((l) => l.kind === "pull" && l.localStreamName === localStreamName)
    ) {
      throw new ConflictError(`stream ${localStreamName} is already published`);
    }
    await this.#start(this.#deps.pulls, {
      kind: "pull",
      uri,
      localStreamName,
      remoteStreamName,
    });
  }

  /**
   * Publishes the local stream `localStreamName` to the server at `uri` as
   * `remoteStreamName`; resolves once the remote publishes it. 404 when the stream is not
   * published here, 409 when the same push runs, 403/503/502 as for `pull`.
   */
  async push(uri: string, localStreamName: string, remoteStreamName: string): Promise<void> {
    this.#checkHost(uri);
    const source = this.#deps.streams.published(localStreamName);
    if (!(source instanceof Stream) || source.ended) {
      throw new NotFoundError(`stream ${localStreamName} not found`);
    }
    this.#refuseDuplicate("push", uri, remoteStreamName);
    await this.#start(this.#deps.pushes, {
      kind: "push",
      uri,
      localStreamName,
      remoteStreamName,
      source,
    });
  }

  /** Stops every pull and push of `uri` (or of the redacted uri the records show). */
  async terminate(uri: string): Promise<void> {
    const links = [...this.#links].filter((l) => l.uri === uri || redactUri(l.uri) === uri);
    if (links.length === 0) throw new NotFoundError(`remote pull ${redactUri(uri)} not found`);
    for (const link of links) this.#links.delete(link);
    await Promise.all(links.map((l) => l.stop("Stopped by rest /pull/terminate")));
  }

  /** The Remote-server pull records, pushes included; uris show no secret. */
  list(): RemotePullRecord[] {
    return [...this.#links].map((link) => ({
      localMediaSessionId: link.localMediaSessionId,
      remoteMediaSessionId: link.remoteMediaSessionId,
      localStreamName: link.localStreamName,
      remoteStreamName: link.remoteStreamName,
      uri: redactUri(link.uri),
      // NEW while connecting, PROCESSED_REMOTE (WCS's name) while running, RECONNECTING.
      status: link.status,
    }));
  }

  /** Stops every pull and push (server stop). */
  async closeAll(): Promise<void> {
    const links = [...this.#links];
    this.#links.clear();
    await Promise.all(links.map((l) => l.stop("Stopped by server shutdown")));
  }

  #checkHost(uri: string): void {
    let host: string;
    try {
      host = new URL(uri).hostname;
    } catch {
      host = "";
    }
    this.#outbound.check(host, "uri");
  }

  #refuseDuplicate(kind: "pull" | "push", uri: string, remoteStreamName: string): void {
    const same = [...this.#links].some((l) =>
      l.kind === kind && l.uri === uri && l.remoteStreamName === remoteStreamName
    );
    if (same) {
      throw new ConflictError(`${kind} of ${remoteStreamName} at ${redactUri(uri)} already runs`);
    }
  }

  /** Starts a link holding a slot of `cap` until it ends; listed from its first attempt on. */
  async #start(
    cap: Cap,
    link: Pick<RemoteLink, "kind" | "uri" | "localStreamName" | "remoteStreamName"> & {
      source?: Stream;
    },
  ): Promise<void> {
    if (!descriptors.admit()) throw new ServiceUnavailableError(descriptors.refusal());
    if (!cap.tryAcquire()) throw new ServiceUnavailableError(cap.refusal());
    const d = this.#deps;
    const remote = new RemoteLink({
      ...link,
      streams: d.streams,
      engine: d.engine,
      address: peerAddress(d),
      sendPaths: d.sendPaths,
      nodeId: d.nodeId,
      log: this.#log,
      backoff: this.#backoff,
    });
    this.#links.add(remote);
    remote.ended.then(() => {
      cap.release();
      if (this.#links.delete(remote)) {
        this.#log.info("remote link ended", { kind: remote.kind, uri: redactUri(remote.uri) });
      }
    });
    try {
      await remote.start();
    } catch (err) {
      this.#links.delete(remote);
      throw err;
    }
    this.#log.info("remote link started", {
      kind: remote.kind,
      uri: redactUri(remote.uri),
      remoteStream: remote.remoteStreamName,
      localStream: remote.localStreamName,
    });
  }
}
