/**
 * One remote pull or push kept running: a Web SDK session with the remote server, the WebRTC
 * play (pull: into a local stream) or publish (push: of a local stream) over it, and, when the
 * remote drops (socket closed or silent, its stream ended, the peer failed), a new attempt
 * after a backoff that doubles up to its maximum. The link ends on `stop`, or when the local
 * stream ends on its own (terminated here, its publisher gone).
 */
import { BadGatewayError, ParseError } from "../../core/errors.ts";
import type { Logger } from "../../core/log.ts";
import { redactUri } from "../../core/redact.ts";
import type { StreamRegistry } from "../../core/stream_registry.ts";
import type { CodecEngine } from "../../media/engine/engine.ts";
import type { PeerAddress } from "../../media/protocols/webrtc/peer.ts";
import type { EngineSendPaths } from "../../media/protocols/webrtc/engine_send_path.ts";
import { RemotePlay } from "../../media/providers/remote_play.ts";
import { mediaStartTimeoutMs } from "../../media/providers/webrtc_publisher.ts";
import { RemotePublish } from "../../media/publishers/remote_publish.ts";
import type { Stream } from "../../media/stream.ts";
import { type RemoteStreamStatus, WcsClientSession } from "./wcs_client.ts";

/** Delays between attempts after a drop: the first, doubled each failure up to the maximum. */
export interface Backoff {
  minMs: number;
  maxMs: number;
}

/** Default backoff of a link, in milliseconds. */
export const defaultBackoff: Readonly<Backoff> = { minMs: 1000, maxMs: 30_000 };

/** Status of a link in its record. */
export type RemoteLinkStatus = "NEW" | "PROCESSED_REMOTE" | "RECONNECTING";

/** What a link is built from. */
export interface RemoteLinkOptions {
  kind: "pull" | "push";
  uri: string;
  localStreamName: string;
  remoteStreamName: string;
  streams: StreamRegistry;
  engine: CodecEngine;
  address: PeerAddress;
  /** The server's send engine, for a push's media when `address` is on the ICE mux. */
  sendPaths?: EngineSendPaths;
  nodeId: string;
  log: Logger;
  backoff: Readonly<Backoff>;
  /** A push's local stream. */
  source?: Stream;
  /** Time the remote's media has to start, in milliseconds; `mediaStartTimeoutMs` by default. */
  mediaStartTimeoutMs?: number;
}

/** Why an attempt ended. */
interface Drop {
  reason: string;
  /** The local stream ended on its own: the link ends instead of reconnecting. */
  final: boolean;
}

/** Resources of one attempt, closed together. */
class Attempt {
  session?: WcsClientSession;
  play?: RemotePlay;
  publish?: RemotePublish;
  /** The pull's local stream, once the answer came. */
  stream?: Stream;
  readonly remoteMediaSessionId = crypto.randomUUID();
  readonly dropped = Promise.withResolvers<Drop>();
  #closing = false;

  constructor(readonly kind: "pull" | "push", readonly streams: StreamRegistry) {}

  /** True once close was called: what the attempt opens after that must be closed at once. */
  get closing(): boolean {
    return this.#closing;
  }

  /** Throws when close was called while the attempt was still opening. */
  throwIfClosing(): void {
    if (this.#closing) throw new BadGatewayError("stopped while connecting");
  }

  drop(reason: string, final = false): void {
    this.dropped.resolve({ reason, final });
  }

  /**
   * Stops the remote stream, closes the session and peer, ends the pull's local stream. A
   * second call closes what was opened after the first.
   */
  async close(info: string): Promise<void> {
    this.#closing = true;
    this.drop(info);
    const { session, play, publish, stream } = this;
    this.session =
      this.play =
      this.publish =
      this.stream =
        undefined;
    session?.stop(this.kind === "pull" ? "play" : "publish", this.remoteMediaSessionId);
    await session?.close();
    await play?.close(info);
    await publish?.close();
    if (stream) this.streams.remove(stream);
  }
}

/** One remote pull or push. */
export class RemoteLink {
  readonly kind: "pull" | "push";
  readonly uri: string;
  readonly localStreamName: string;
  readonly remoteStreamName: string;
  #status: RemoteLinkStatus = "NEW";
  #localMediaSessionId: string;
  #remoteMediaSessionId: string | null = null;
  readonly #options: RemoteLinkOptions;
  readonly #log: Logger;
  readonly #ended = Promise.withResolvers<void>();
  #current?: Attempt;
  #stopped = false;
  #wait?: { timer: ReturnType<typeof setTimeout>; resolve: () => void };

  constructor(options: RemoteLinkOptions) {
    this.#options = options;
    this.kind = options.kind;
    this.uri = options.uri;
    this.localStreamName = options.localStreamName;
    this.remoteStreamName = options.remoteStreamName;
    this.#localMediaSessionId = options.source?.mediaSessionId ?? crypto.randomUUID();
    this.#log = options.log.child({
      uri: redactUri(options.uri),
      remoteStream: options.remoteStreamName,
      localStream: options.localStreamName,
    });
  }

  /** Where the link is: connecting first, running, or waiting to reconnect. */
  get status(): RemoteLinkStatus {
    return this.#status;
  }

  /** Id of the local stream (a pull's changes with each attempt). */
  get localMediaSessionId(): string {
    return this.#localMediaSessionId;
  }

  /** Our id of the stream on the remote, once an attempt got that far. */
  get remoteMediaSessionId(): string | null {
    return this.#remoteMediaSessionId;
  }

  /** Settles once the link has ended (stopped, or its local stream ended). */
  get ended(): Promise<void> {
    return this.#ended.promise;
  }

  /**
   * Makes the first attempt; resolves once media flows. A BadGatewayError when the remote is
   * unreachable, refuses, fails the stream or sends no media in time (nothing is left
   * running then); ConflictError or ServiceUnavailableError from the stream registry.
   */
  async start(): Promise<void> {
    let attempt: Attempt;
    try {
      attempt = await this.#attempt();
    } catch (err) {
      this.#stopped = true;
      this.#ended.resolve();
      throw err;
    }
    this.#status = "PROCESSED_REMOTE";
    void this.#run(attempt);
    // A push ends with its local stream, also while it waits to reconnect.
    this.#options.source?.done.then(() => this.stop("the local stream ended"));
  }

  /** Ends the link: the remote stream stops, a pull's local stream ends with `info`. */
  async stop(info: string): Promise<void> {
    this.#stopped = true;
    if (this.#wait) {
      clearTimeout(this.#wait.timer);
      this.#wait.resolve();
    }
    await this.#current?.close(info);
    await this.#ended.promise;
  }

  async #run(first: Attempt): Promise<void> {
    let attempt: Attempt | undefined = first;
    const { minMs, maxMs } = this.#options.backoff;
    while (attempt) {
      const drop = await attempt.dropped.promise;
      await attempt.close(drop.reason);
      attempt = undefined;
      if (this.#stopped || drop.final) break;
      this.#status = "RECONNECTING";
      this.#log.info("remote dropped, reconnecting", { kind: this.kind, reason: drop.reason });
      for (let delayMs = minMs; !this.#stopped; delayMs = Math.min(delayMs * 2, maxMs)) {
        await this.#sleep(delayMs);
        if (this.#stopped) break;
        try {
          attempt = await this.#attempt();
          this.#status = "PROCESSED_REMOTE";
          this.#log.info("remote reconnected", { kind: this.kind });
          break;
        } catch (err) {
          this.#log.info("reconnect failed", {
            kind: this.kind,
            reason: (err as Error).message,
            nextInMs: Math.min(delayMs * 2, maxMs),
          });
        }
      }
    }
    this.#current = undefined;
    this.#ended.resolve();
  }

  #sleep(ms: number): Promise<void> {
    return new Promise<void>((resolve) => {
      this.#wait = { timer: setTimeout(resolve, ms), resolve };
    }).then(() => {
      this.#wait = undefined;
    });
  }

  /** One attempt; on failure everything it opened is closed again. */
  async #attempt(): Promise<Attempt> {
    const o = this.#options;
    const attempt = new Attempt(this.kind, o.streams);
    this.#current = attempt;
    try {
      attempt.session = await WcsClientSession.connect(o.uri, { log: this.#log });
      attempt.session.dropped.then((reason) => attempt.drop(`remote session: ${reason}`));
      attempt.throwIfClosing();
      if (this.kind === "pull") await this.#pull(attempt);
      else await this.#push(attempt);
      this.#remoteMediaSessionId = attempt.remoteMediaSessionId;
      return attempt;
    } catch (err) {
      await attempt.close("Failed by error");
      if (err instanceof ParseError) {
        throw new BadGatewayError(`${redactUri(o.uri)}: ${err.message}`, { cause: err });
      }
      throw err;
    }
  }

  /** Plays the remote stream into a new local stream; resolves at its first packet. */
  async #pull(attempt: Attempt): Promise<void> {
    const o = this.#options;
    const localId = crypto.randomUUID();
    const media = Promise.withResolvers<void>();
    attempt.play = new RemotePlay({
      name: o.localStreamName,
      mediaSessionId: localId,
      nodeId: o.nodeId,
      address: o.address,
      log: this.#log,
      onFailed: (info) => attempt.drop(`peer: ${info}`),
    });
    const answer = await attempt.session!.offer("play", {
      mediaSessionId: attempt.remoteMediaSessionId,
      name: o.remoteStreamName,
      sdp: await attempt.play.offer(),
      hasAudio: true,
      hasVideo: true,
    }, (status) => this.#onRemoteStatus(attempt, status));
    attempt.throwIfClosing();
    const stream = await attempt.play.accept(answer, () => media.resolve());
    attempt.stream = stream;
    attempt.throwIfClosing();
    o.streams.add(stream);
    this.#localMediaSessionId = localId;
    stream.done.then(() => {
      if (!attempt.closing) attempt.drop("the local stream ended", true);
    });
    await this.#within(attempt, media.promise, "no media from the remote");
  }

  /** Publishes the local stream on the remote; resolves once the remote says PUBLISHING. */
  async #push(attempt: Attempt): Promise<void> {
    const o = this.#options;
    const source = o.source!;
    const publishing = Promise.withResolvers<void>();
    attempt.publish = new RemotePublish({
      source,
      engine: o.engine,
      address: o.address,
      sendPaths: o.sendPaths,
      log: this.#log,
      onFailed: (info) => attempt.drop(`peer: ${info}`),
    });
    const answer = await attempt.session!.offer("publish", {
      mediaSessionId: attempt.remoteMediaSessionId,
      name: o.remoteStreamName,
      sdp: await attempt.publish.offer(),
      hasAudio: attempt.publish.hasAudio,
      hasVideo: attempt.publish.hasVideo,
    }, (status) => {
      if (status.status === "PUBLISHING") publishing.resolve();
      this.#onRemoteStatus(attempt, status);
    });
    attempt.throwIfClosing();
    await attempt.publish.accept(answer);
    source.done.then(() => attempt.drop("the local stream ended", true));
    await this.#within(attempt, publishing.promise, "the remote did not start publishing");
  }

  /** A terminal status of the remote stream drops the attempt. */
  #onRemoteStatus(attempt: Attempt, { status, info }: RemoteStreamStatus): void {
    if (status === "FAILED" || status === "STOPPED" || status === "UNPUBLISHED") {
      attempt.drop(`remote stream ${status}: ${info}`);
    }
  }

  /**
   * Waits for `started` within the media start time; a BadGatewayError naming `what` (or why
   * the attempt dropped first) otherwise.
   */
  async #within(attempt: Attempt, started: Promise<void>, what: string): Promise<void> {
    const timeoutMs = this.#options.mediaStartTimeoutMs ?? mediaStartTimeoutMs;
    let timer: ReturnType<typeof setTimeout> | undefined;
    const outcome = await Promise.race([
      started.then(() => undefined),
      attempt.dropped.promise.then((drop) => drop.reason),
      new Promise<string>((resolve) => {
        timer = setTimeout(() => resolve(`${what} within ${timeoutMs} ms`), timeoutMs);
      }),
    ]);
    clearTimeout(timer);
    if (outcome !== undefined) throw new BadGatewayError(`${redactUri(this.uri)}: ${outcome}`);
  }
}
