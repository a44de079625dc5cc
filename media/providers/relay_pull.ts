/**
 * The edge's side of a relay: dials an origin, and publishes what it sends as a local Stream
 * (mediaProvider "CDN" by default) until the origin ends it, the connection drops, or the
 * pull is closed. Keyframe requests of the local stream's readers go back to the origin.
 */
import { BadGatewayError, ParseError } from "../../core/errors.ts";
import type { Logger } from "../../core/log.ts";
import { redactText } from "../../core/redact.ts";
import type { StreamDirectory } from "../stream_record.ts";
import type { Track } from "../frame.ts";
import {
  decodeRelayMessage,
  encodeKeyframeRequest,
  type RelayMessage,
} from "../protocols/relay/relay_message.ts";
import type { RelayCounters, RelayTransport } from "../protocols/relay/relay_transport.ts";
import { dialWebSocketTransport } from "../protocols/relay/websocket_transport.ts";
import { Stream } from "../stream.ts";

/** Default `mediaProvider` of a relayed stream. */
export const relayMediaProvider = "CDN";
/** Default time from dialing to the origin's hello, in ms. */
export const defaultHelloTimeoutMs = 5000;
/** Shortest interval between two keyframe requests sent to the origin, in ms. */
export const keyframeRequestIntervalMs = 250;

/** What a relay pull is made of. */
export interface RelayPullOptions {
  /** The origin's full ws:// or wss:// URL, path and query included. */
  url: string;
  /** Handshake headers (Deno's WebSocket client sends them). */
  headers?: Record<string, string>;
  /** Name of the local stream. */
  localName: string;
  /** Where the local stream is registered while the pull runs. */
  streams: StreamDirectory;
  log: Logger;
  /** `mediaProvider` of the local stream (default `relayMediaProvider`). */
  mediaProvider?: string;
  /** Time allowed from dialing to the hello, in ms (default `defaultHelloTimeoutMs`). */
  helloTimeoutMs?: number;
  /** Aborting closes the pull (or gives up opening it), with the signal's reason. */
  signal?: AbortSignal;
}

/** A local Stream whose keyframe requests go to the origin. */
class RelayedStream extends Stream {
  askKeyframe: () => void = () => {};

  override requestKeyframe(): void {
    this.askKeyframe();
  }
}

/** An origin's stream relayed into a local Stream. */
export class RelayPull {
  /** The local stream, registered while the pull runs. */
  readonly stream: Stream;
  /** Settles once when the pull has ended, with the reason (the origin's, when it gave one). */
  readonly closed: Promise<{ reason: string }>;
  /** Frames and bytes received; frames the origin dropped for this link. */
  readonly counters: RelayCounters = { frames: 0, bytes: 0, drops: 0 };
  #transport: RelayTransport;
  #options: RelayPullOptions;
  #log: Logger;
  #closed = Promise.withResolvers<{ reason: string }>();
  #done = false;
  #lastKeyframeRequestMs = -Infinity;
  #onAbort = () => this.close(abortReason(this.#options.signal));

  private constructor(
    transport: RelayTransport,
    options: RelayPullOptions,
    tracks: Track[],
    log: Logger,
  ) {
    this.#transport = transport;
    this.#options = options;
    this.#log = log;
    this.closed = this.#closed.promise;
    const stream = new RelayedStream({
      name: options.localName,
      mediaSessionId: crypto.randomUUID(),
      tracks,
      mediaProvider: options.mediaProvider ?? relayMediaProvider,
      stopProvider: (info) => Promise.resolve(this.close(info)),
    });
    stream.askKeyframe = () => this.#askKeyframe();
    this.stream = stream;
  }

  /**
   * Dials the origin and waits for its hello, then registers the local stream. Rejects with
   * ForbiddenError/NotFoundError when the origin refuses the upgrade with 403/404,
   * BadGatewayError when it is unreachable, ends before the hello (with its reason), sends
   * something else or nothing within `helloTimeoutMs`; with the registry's error when the
   * name is taken or the streams cap reached.
   */
  static async open(options: RelayPullOptions): Promise<RelayPull> {
    const timeoutMs = options.helloTimeoutMs ?? defaultHelloTimeoutMs;
    const where = redactText(options.url);
    const deadline = new AbortController();
    const timer = setTimeout(
      () => deadline.abort(new BadGatewayError(`no relay hello from ${where} in ${timeoutMs} ms`)),
      timeoutMs,
    );
    const signal = options.signal
      ? AbortSignal.any([options.signal, deadline.signal])
      : deadline.signal;
    try {
      const transport = await dialWebSocketTransport(options.url, {
        headers: options.headers,
        signal,
      });
      return await RelayPull.#start(transport, options, signal, where);
    } finally {
      clearTimeout(timer);
    }
  }

  /** Waits for the hello on an open transport, then builds and registers the pull. */
  static #start(
    transport: RelayTransport,
    options: RelayPullOptions,
    signal: AbortSignal,
    where: string,
  ): Promise<RelayPull> {
    const log = options.log.child({ relayPull: options.localName });
    return new Promise((resolve, reject) => {
      let pull: RelayPull | undefined;
      const fail = (err: unknown) => {
        signal.removeEventListener("abort", onAbort);
        transport.close(err instanceof Error ? err.message : String(err));
        reject(err);
      };
      const onAbort = () => fail(signal.reason);
      signal.addEventListener("abort", onAbort, { once: true });
      transport.onMessage((bytes) => {
        if (pull) return pull.#receive(bytes);
        let message: RelayMessage;
        try {
          message = decodeRelayMessage(bytes);
        } catch (err) {
          if (!(err instanceof ParseError)) throw err;
          return fail(new BadGatewayError(`relay ${where} sent a bad hello: ${err.message}`));
        }
        if (message.type === "unknown") return;
        if (message.type === "end") {
          return fail(new BadGatewayError(`relay ${where} ended: ${message.reason}`));
        }
        if (message.type !== "hello") {
          return fail(new BadGatewayError(`relay ${where} sent ${message.type} before hello`));
        }
        const candidate = new RelayPull(transport, options, message.tracks, log);
        try {
          options.streams.add(candidate.stream);
        } catch (err) {
          return fail(err);
        }
        signal.removeEventListener("abort", onAbort);
        pull = candidate;
        options.signal?.addEventListener("abort", pull.#onAbort, { once: true });
        void transport.closed.then((reason) => pull!.#finish(`origin: ${reason}`));
        log.info("relay pull started", { origin: where, tracks: message.tracks.length });
        resolve(pull);
        if (options.signal?.aborted) pull.#onAbort();
      });
      void transport.closed.then((reason) => {
        if (!pull) fail(new BadGatewayError(`relay ${where} closed before hello: ${reason}`));
      });
    });
  }

  /** Ends the pull: closes the connection, ends and unregisters the local stream. */
  close(reason = "relay pull closed"): void {
    this.#transport.close(reason);
    this.#finish(reason);
  }

  #receive(bytes: Uint8Array): void {
    let message: RelayMessage;
    try {
      message = decodeRelayMessage(bytes, this.stream.tracks);
    } catch (err) {
      if (!(err instanceof ParseError)) throw err;
      this.#log.warn("relay pull: bad message from the origin", { error: err.message });
      return this.close(`protocol error: ${err.message}`);
    }
    switch (message.type) {
      case "frame":
        this.counters.frames++;
        this.counters.bytes += message.frame.data.length;
        this.stream.push(message.frame);
        return;
      case "dropped":
        this.counters.drops += message.frames;
        return;
      case "end":
        return this.close(message.reason);
      case "hello":
        return this.close("protocol error: a second hello");
      default:
        // Unknown types come from newer origins; keyframe requests are not for an edge.
        return;
    }
  }

  #askKeyframe(): void {
    const nowMs = performance.now();
    if (this.#done || nowMs - this.#lastKeyframeRequestMs < keyframeRequestIntervalMs) return;
    this.#lastKeyframeRequestMs = nowMs;
    this.#transport.send(encodeKeyframeRequest());
  }

  #finish(reason: string): void {
    if (this.#done) return;
    this.#done = true;
    this.#options.signal?.removeEventListener("abort", this.#onAbort);
    this.#options.streams.remove(this.stream);
    this.stream.end();
    this.#log.info("relay pull ended", { reason, ...this.counters });
    this.#closed.resolve({ reason });
  }
}

function abortReason(signal: AbortSignal | undefined): string {
  return typeof signal?.reason === "string" ? signal.reason : "relay pull aborted";
}
