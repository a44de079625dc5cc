/**
 * Our side of a Web SDK session with another WCS-compatible server (a remote pull or push):
 * the frames the SDK sends (`connection`, `publishStream`/`playStream` with an SDP offer,
 * `pong`, `stopStream`/`unPublishStream`), the server's `getUserData`, `setRemoteSDP` and
 * `notifyStreamStatusEvent` read back. Disconnecting is closing the socket, as in the SDK.
 */
import { BadGatewayError, ParseError } from "../../core/errors.ts";
import type { Logger } from "../../core/log.ts";
import { redactUri } from "../../core/redact.ts";
import { encodeFrame, parseFrame } from "../frame.ts";

/** Time the remote has to open the socket and answer `connection`, in milliseconds. */
export const connectTimeoutMs = 10_000;
/** Time the remote has to answer a publish or play offer with its SDP, in milliseconds. */
export const answerTimeoutMs = 15_000;
/**
 * Longest silence of the remote before the session counts as dropped, in milliseconds: WCS
 * pings every 5 s, so six missed pings.
 */
export const silenceTimeoutMs = 30_000;
/** Longest wait for the socket to close once we closed it, in milliseconds. */
export const closeWaitMs = 2000;

/** Statuses that end a remote stream. */
const terminalStatuses = new Set(["FAILED", "STOPPED", "UNPUBLISHED"]);

/** A status of one of our streams, as the remote reported it. */
export interface RemoteStreamStatus {
  status: string;
  info: string;
}

/** What a publish or play asks of the remote. */
export interface RemoteStreamRequest {
  /** Our id of the stream on the remote (a uuid, as the SDK makes). */
  mediaSessionId: string;
  /** Name of the stream on the remote. */
  name: string;
  /** Our SDP offer. */
  sdp: string;
  hasAudio: boolean;
  hasVideo: boolean;
}

/** Per-stream state: the answer awaited, then the statuses. */
interface StreamWatch {
  answer: PromiseWithResolvers<string>;
  onStatus: (status: RemoteStreamStatus) => void;
  ended: boolean;
}

/** Options of `WcsClientSession.connect`. */
export interface WcsConnectOptions {
  log: Logger;
  /** See `silenceTimeoutMs`. */
  silenceTimeoutMs?: number;
}

/** One established session with a remote server. */
export class WcsClientSession {
  /** Resolves with the reason once the session is unusable (socket closed, remote silent). */
  readonly dropped: Promise<string>;
  readonly #socket: WebSocket;
  readonly #uri: string;
  readonly #log: Logger;
  readonly #streams = new Map<string, StreamWatch>();
  readonly #silenceMs: number;
  readonly #droppedSignal = Promise.withResolvers<string>();
  /** Resolves on the socket's close event. */
  readonly #socketClosed = Promise.withResolvers<void>();
  #silenceTimer?: ReturnType<typeof setTimeout>;
  #closeReason?: string;

  private constructor(socket: WebSocket, uri: string, options: WcsConnectOptions) {
    this.#socket = socket;
    this.#uri = uri;
    this.#log = options.log;
    this.#silenceMs = options.silenceTimeoutMs ?? silenceTimeoutMs;
    this.dropped = this.#droppedSignal.promise;
  }

  /**
   * Opens a session with the remote at `uri` (ws:// or wss://) as the Web SDK does: a
   * BadGatewayError when the socket cannot be opened, or the remote refuses or does not
   * answer the connection in time.
   */
  static async connect(uri: string, options: WcsConnectOptions): Promise<WcsClientSession> {
    let socket: WebSocket;
    try {
      socket = new WebSocket(uri);
    } catch (err) {
      throw new BadGatewayError(`${redactUri(uri)}: ${(err as Error).message}`);
    }
    const session = new WcsClientSession(socket, uri, options);
    const established = Promise.withResolvers<void>();
    let refusal = "";
    const timer = setTimeout(() => {
      session.#close(`no answer to the connection within ${connectTimeoutMs} ms`);
    }, connectTimeoutMs);
    socket.onopen = () => {
      session.#send("connection", {
        appKey: "defaultApp",
        mediaProviders: ["WebRTC"],
        clientVersion: "2.0",
        clientOSVersion: Deno.build.os,
        clientBrowserVersion: "mediaserver remote pull (Deno)",
        msePacketizationVersion: 2,
        keepAlive: false,
      });
    };
    socket.onmessage = (ev) => {
      const frame = session.#frameOf(ev.data);
      if (!frame) return;
      if (frame.message === "getUserData") established.resolve();
      else if (frame.message === "fail") refusal = infoOf(frame.data[0]);
      else session.#onFrame(frame.message, frame.data);
    };
    socket.onerror = (ev) => {
      const message = (ev as ErrorEvent).message;
      if (message) refusal ||= message;
    };
    socket.onclose = (ev) => {
      session.#close(refusal || ev.reason || `socket closed (code ${ev.code})`);
      session.#socketClosed.resolve();
    };
    session.dropped.then((reason) => established.reject(new Error(reason)));
    try {
      await established.promise;
    } catch (err) {
      clearTimeout(timer);
      await session.close();
      throw new BadGatewayError(`${redactUri(uri)}: ${(err as Error).message}`);
    }
    clearTimeout(timer);
    socket.onmessage = (ev) => {
      const frame = session.#frameOf(ev.data);
      if (frame) session.#onFrame(frame.message, frame.data);
    };
    session.#armSilence();
    return session;
  }

  /**
   * Offers to publish (`publishStream`) or play (`playStream`) a stream; resolves with the
   * remote's SDP answer. A BadGatewayError when the remote fails the stream first (its `info`
   * in the message), does not answer in time, or the session closes. `onStatus` gets every
   * later status of the stream (the remote's PUBLISHING/PLAYING, then its end).
   */
  async offer(
    kind: "publish" | "play",
    request: RemoteStreamRequest,
    onStatus: (status: RemoteStreamStatus) => void,
  ): Promise<string> {
    if (this.#closeReason !== undefined) {
      throw new BadGatewayError(`${this.#where(request.name)}: ${this.#closeReason}`);
    }
    const watch: StreamWatch = { answer: Promise.withResolvers<string>(), onStatus, ended: false };
    this.#streams.set(request.mediaSessionId, watch);
    this.#send(kind === "publish" ? "publishStream" : "playStream", {
      ...streamObject(request, kind === "publish"),
      mediaProvider: "WebRTC",
      ...(kind === "play" ? { width: 0, height: 0, bitrate: 0, quality: 0 } : {}),
      sdp: request.sdp,
    });
    const timer = setTimeout(() => {
      watch.answer.reject(
        new BadGatewayError(`${this.#where(request.name)}: no answer within ${answerTimeoutMs} ms`),
      );
    }, answerTimeoutMs);
    try {
      return await watch.answer.promise;
    } catch (err) {
      this.#streams.delete(request.mediaSessionId);
      throw err;
    } finally {
      clearTimeout(timer);
    }
  }

  /**
   * Stops one of our streams on the remote (`unPublishStream` or `stopStream`), unless the
   * remote ended it already.
   */
  stop(kind: "publish" | "play", mediaSessionId: string): void {
    const watch = this.#streams.get(mediaSessionId);
    if (!watch || watch.ended) return;
    this.#streams.delete(mediaSessionId);
    watch.ended = true;
    this.#send(kind === "publish" ? "unPublishStream" : "stopStream", {
      mediaSessionId,
      published: kind === "publish",
      status: "PENDING",
    });
  }

  /**
   * Closes the session (the SDK's disconnect: the remote ends its streams) and waits for the
   * socket to close, at most `closeWaitMs`.
   */
  async close(): Promise<void> {
    this.#close("closed by us");
    let timer: ReturnType<typeof setTimeout> | undefined;
    await Promise.race([
      this.#socketClosed.promise,
      new Promise((resolve) => timer = setTimeout(resolve, closeWaitMs)),
    ]);
    clearTimeout(timer);
  }

  #frameOf(data: unknown): { message: string; data: readonly unknown[] } | undefined {
    this.#armSilence();
    if (typeof data !== "string") return undefined;
    try {
      return parseFrame(data);
    } catch (err) {
      if (!(err instanceof ParseError)) throw err;
      this.#log.debug("remote frame ignored", { uri: redactUri(this.#uri), reason: err.message });
      return undefined;
    }
  }

  #onFrame(message: string, data: readonly unknown[]): void {
    if (message === "ping") return this.#send("pong", null);
    if (message === "setRemoteSDP") {
      const [id, sdp] = data;
      const watch = typeof id === "string" ? this.#streams.get(id) : undefined;
      if (watch && typeof sdp === "string") watch.answer.resolve(sdp);
      return;
    }
    if (message === "notifyStreamStatusEvent") {
      const event = data[0] as Record<string, unknown> | undefined;
      const id = event?.mediaSessionId;
      const watch = typeof id === "string" ? this.#streams.get(id) : undefined;
      if (!watch || typeof event?.status !== "string") return;
      const status = { status: event.status, info: infoOf(event) };
      if (terminalStatuses.has(status.status)) {
        this.#streams.delete(id as string);
        watch.ended = true;
        watch.answer.reject(
          new BadGatewayError(
            `${this.#where(String(event.name ?? ""))}: ${status.status} ${status.info}`.trim(),
          ),
        );
      }
      watch.onStatus(status);
      return;
    }
    if (message === "fail") {
      this.#log.info("remote reported a failure", {
        uri: redactUri(this.#uri),
        info: infoOf(data[0]),
      });
    }
  }

  #where(name: string): string {
    return `${redactUri(this.#uri)} stream ${name}`;
  }

  #send(message: string, payload: unknown): void {
    if (this.#socket.readyState !== WebSocket.OPEN) return;
    this.#socket.send(encodeFrame(message, [payload]));
  }

  /** Restarts the silence watchdog: any frame of the remote proves it alive. */
  #armSilence(): void {
    if (this.#closeReason !== undefined) return;
    clearTimeout(this.#silenceTimer);
    this.#silenceTimer = setTimeout(
      () => this.#close(`no message from the remote for ${this.#silenceMs} ms`),
      this.#silenceMs,
    );
  }

  #close(reason: string): void {
    if (this.#closeReason !== undefined) return;
    this.#closeReason = reason;
    clearTimeout(this.#silenceTimer);
    const error = new BadGatewayError(`${redactUri(this.#uri)}: ${reason}`);
    for (const [, watch] of this.#streams) {
      watch.answer.reject(error);
      if (!watch.ended) watch.onStatus({ status: "FAILED", info: reason });
    }
    this.#streams.clear();
    if (
      this.#socket.readyState === WebSocket.OPEN || this.#socket.readyState === WebSocket.CONNECTING
    ) {
      try {
        this.#socket.close(1000);
      } catch {
        // A socket still connecting may refuse to close; it is dropped with the session.
      }
    }
    this.#droppedSignal.resolve(reason);
  }
}

/** The stream object of the SDK's messages (§5.1), without the SDP. */
function streamObject(
  request: RemoteStreamRequest,
  published: boolean,
): Record<string, unknown> {
  return {
    mediaSessionId: request.mediaSessionId,
    name: request.name,
    published,
    hasVideo: request.hasVideo,
    hasAudio: request.hasAudio,
    status: "PENDING",
    record: false,
  };
}

/** The `info` (or `message`) text of a status or fail object. */
function infoOf(value: unknown): string {
  if (typeof value !== "object" || value === null) return "";
  const { info, message } = value as { info?: unknown; message?: unknown };
  return typeof info === "string" ? info : typeof message === "string" ? message : "";
}
