/**
 * A Web SDK MSE player of a published stream: the SDK opens a second WebSocket (the media
 * transport) once it has the answer; from then the stream's frames go out on it as MSE
 * records (mse_records.ts), starting with the decoder configurations and a keyframe. Opus
 * audio is read from the stream's shared AAC conversion. The player reads through its own
 * bounded StreamReader, and a client whose socket holds more than `maxUnsentBytes` unsent
 * is dropped, so a slow player never slows the stream or its other readers.
 */
import type { MediaFrame } from "../frame.ts";
import { finalStatus, type StreamClient } from "../protocols/webrtc/client.ts";
import type { Stream, StreamReader } from "../stream.ts";
import type { RegisteredStream, StreamRecord } from "../stream_record.ts";
import { MsePackager } from "./mse_records.ts";

/** Time the SDK has to open the media transport after the answer, in ms. */
export const transportTimeoutMs = 15_000;
/**
 * Bytes a player's media socket may hold unsent before the client counts as too slow and is
 * dropped (about 13 s of a 2.5 Mbit/s stream).
 */
export const maxUnsentBytes = 4 * 1024 * 1024;
/** WebSocket close code of a transport we close normally. */
const closeNormal = 1000;
/** WebSocket close code of a transport dropped by policy (too slow). */
const closePolicy = 1008;

/** Info of a play ended because the client did not read its media. */
export const slowClientInfo = "Failed by slow client: media not read";
/** Info of a play whose media transport the client closed while playing. */
export const transportClosedInfo = "Failed by media transport close";

/** The media socket of an MSE player, as the player uses it. */
export interface MseTransport {
  readonly state: "open" | "closing" | "closed";
  /** Bytes queued and not yet written to the connection. */
  readonly bufferedAmount: number;
  sendBinary(data: Uint8Array): void;
  close(code: number, reason: string): void;
  /** Resolves once the connection is gone. */
  readonly closed: Promise<unknown>;
}

/** What an MSE player is built from. */
export interface MsePlayerOptions {
  /** The published stream (name, record, end). */
  source: Stream;
  /** What is read: `source`, or its AAC conversion. */
  frames: Stream;
  mediaSessionId: string;
  sessionId: string;
  appKey: string;
  nodeId: string;
  /** The stream object the client sent, without `sdp`. */
  clientStream: Record<string, unknown>;
  sdp: string;
  client: StreamClient;
}

/** An MSE play of a stream made of MediaFrames. */
export class MsePlayer implements RegisteredStream {
  readonly mediaSessionId: string;
  readonly name: string;
  readonly published = false;
  readonly sessionId: string;
  readonly createDate = Date.now();
  readonly source: Stream;
  readonly #options: MsePlayerOptions;
  readonly #packager: MsePackager;
  #status: "PENDING" | "PLAYING" | "ENDED" = "PENDING";
  #timer?: ReturnType<typeof setTimeout>;
  #reader?: StreamReader;
  #transport?: MseTransport;
  /** The configurations of the last header sent; undefined until the first. */
  #sentConfigs?: readonly [unknown, unknown];
  /** Bytes sent to the client, all records. */
  bytesSent = 0;

  constructor(options: MsePlayerOptions) {
    this.#options = options;
    this.source = options.source;
    this.mediaSessionId = options.mediaSessionId;
    this.name = options.source.name;
    this.sessionId = options.sessionId;
    this.#packager = MsePackager.of(options.frames);
  }

  /** True for a frames stream with something the MSE player carries (H.264 or AAC). */
  static plays(frames: Stream): boolean {
    const packager = MsePackager.of(frames);
    return packager.video !== undefined || packager.audio !== undefined;
  }

  /**
   * The answer to the SDK's fixed offer: a kind the stream does not carry gets port 0, which
   * the SDK reads as absent (its remuxer waits for neither). Starts the transport timeout.
   */
  answer(): string {
    const { video, audio } = this.#packager;
    const rate = audio?.sampleRate ?? audio?.clockRate ?? 48_000;
    const id = Date.now();
    this.source.done.then(() => this.terminate("Stopped by publisher stop"));
    this.#timer = setTimeout(
      () => void this.terminate("Failed by media transport timeout"),
      transportTimeoutMs,
    );
    return [
      "v=0",
      `o=- ${id} ${id} IN IP4 0.0.0.0`,
      "s=-",
      "c=IN IP4 0.0.0.0",
      "t=0 0",
      `m=video ${video ? 9 : 0} RTP/AVP 112`,
      "a=rtpmap:112 H264/90000",
      "a=sendonly",
      `m=audio ${audio ? 9 : 0} RTP/AVP 108`,
      `a=rtpmap:108 mpeg4-generic/${rate}/${audio?.channels ?? 1}`,
      "a=sendonly",
      "",
    ].join("\r\n");
  }

  /** True while the player waits for its media transport. */
  get awaitingTransport(): boolean {
    return this.#status === "PENDING" && this.#transport === undefined;
  }

  /** True while the player sends media. */
  get playing(): boolean {
    return this.#status === "PLAYING";
  }

  /** Starts sending on the media transport the client opened: PLAYING, then the records. */
  attach(transport: MseTransport): void {
    if (!this.awaitingTransport) {
      transport.close(closeNormal, "no MSE play waits for a media transport");
      return;
    }
    clearTimeout(this.#timer);
    this.#transport = transport;
    transport.closed.then(() => this.terminate(transportClosedInfo));
    this.#status = "PLAYING";
    this.#options.client.status("PLAYING", "", muteFields(this.source));
    this.#reader = this.#options.frames.reader(undefined, "mse");
    this.#pump();
  }

  /** Ends the play: stops reading, closes the transport, reports the final status. */
  terminate(info: string): Promise<void> {
    if (this.#status === "ENDED") {
      return this.#transport?.closed.then(() => {}) ?? Promise.resolve();
    }
    this.#status = "ENDED";
    clearTimeout(this.#timer);
    this.#reader?.close();
    const transport = this.#transport;
    transport?.close(info === slowClientInfo ? closePolicy : closeNormal, info);
    this.#options.client.status(finalStatus(info, "STOPPED"), info, muteFields(this.source));
    // The socket is gone within its close timeout, so a stopping server leaves none behind.
    return transport ? transport.closed.then(() => {}) : Promise.resolve();
  }

  /** Delivers a stream event (e.g. one sent by REST) to this player's client. */
  event(event: Record<string, unknown>): void {
    if (this.#status !== "ENDED") this.#options.client.event(event);
  }

  record(options: { metrics?: boolean } = {}): StreamRecord {
    const source = this.source.record(options);
    const client = this.#options.clientStream;
    const { video, audio } = this.#packager;
    return {
      ...source,
      custom: (client.custom as Record<string, unknown> | undefined) ?? {},
      nodeId: this.#options.nodeId,
      appKey: this.#options.appKey,
      sessionId: this.sessionId,
      mediaSessionId: this.mediaSessionId,
      published: false,
      hasVideo: video !== undefined,
      hasAudio: audio !== undefined,
      audioCodec: audio?.codec ?? "",
      videoCodec: video?.codec ?? "",
      status: this.#status === "ENDED" ? "STOPPED" : this.#status,
      sdp: this.#options.sdp,
      info: null,
      record: false,
      recordName: null,
      mediaProvider: "MSE",
      transport: "TCP",
      cvoExtension: false,
      createDate: this.createDate,
      mediaType: "play",
      parentMediaSessionId: this.source.mediaSessionId,
    };
  }

  /**
   * Sends every queued frame as one message (the SDK takes several records per message), then
   * waits for the next; a callback loop on `poll`, no promise per frame.
   */
  #pump = (): void => {
    const reader = this.#reader;
    const transport = this.#transport;
    if (!reader || !transport || this.#status !== "PLAYING") return;
    const parts: Uint8Array[] = [];
    let bytes = 0;
    for (;;) {
      const frame = reader.poll(this.#pump);
      if (frame === undefined) break;
      for (const part of this.#recordsOf(frame)) {
        parts.push(part);
        bytes += part.length;
      }
    }
    if (parts.length > 0 && transport.state === "open") {
      transport.sendBinary(parts.length === 1 ? parts[0] : join(parts, bytes));
      this.bytesSent += bytes;
      if (transport.bufferedAmount > maxUnsentBytes) {
        void this.terminate(slowClientInfo);
        return;
      }
    }
    if (reader.drained && this.source.ended) void this.terminate("Stopped by publisher stop");
  };

  /** The records of a frame, after the header when it is the first or a configuration changed. */
  #recordsOf(frame: MediaFrame): Uint8Array[] {
    const packager = this.#packager;
    const record = packager.record(frame);
    if (!record) return [];
    const configs = packager.configs;
    const sent = this.#sentConfigs;
    if (sent && sent[0] === configs[0] && sent[1] === configs[1]) return [record];
    this.#sentConfigs = configs;
    return [...packager.header(packager.timestampMs(frame)), record];
  }
}

/** `parts` in one array of `bytes` bytes. */
function join(parts: readonly Uint8Array[], bytes: number): Uint8Array {
  const out = new Uint8Array(bytes);
  let at = 0;
  for (const part of parts) {
    out.set(part, at);
    at += part.length;
  }
  return out;
}

/** The source's mute state, for status events (a player joining late learns it). */
function muteFields(source: Stream): Record<string, unknown> {
  return { audioState: { ...source.audioState }, videoState: { ...source.videoState } };
}
