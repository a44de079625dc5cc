/**
 * An RTMP push: one local Stream published to a remote RTMP server. The frames go out as the
 * chunk bytes shared with the stream's players; when the remote drops, the push reconnects
 * with exponential backoff and resumes at a keyframe. Mute swaps each audio frame for a
 * silent frame of the same configuration and timestamp.
 */
import { NotImplementedError } from "../../core/errors.ts";
import type { Logger } from "../../core/log.ts";
import { openRtmpClient, type RtmpClientSession } from "../protocols/rtmp/client.ts";
import type { RtmpUrl } from "../protocols/rtmp/url.ts";
import type { Stream, StreamReader } from "../stream.ts";
import type { ChunkedAudioStream } from "./rtmp_audio_chunks.ts";
import { RtmpPackager } from "./rtmp_packager.ts";
import { silentAacFrame } from "./rtmp_silence.ts";

/** First wait before reconnecting a dropped push, in milliseconds. */
export const pushReconnectInitialMs = 250;
/** Longest wait between reconnection attempts, in milliseconds. */
export const pushReconnectMaxMs = 5_000;

/** What a push is made of. */
export interface RtmpPushOptions {
  /** The published stream. */
  stream: Stream;
  url: RtmpUrl;
  log: Logger;
  /**
   * The stream to send for `stream`, asked at each connection: the stream itself, or its
   * conversion when its audio is not AAC.
   */
  sendable: (stream: Stream) => Stream;
}

/** Publishes a stream to a remote RTMP server until stopped or the stream ends. */
export class RtmpPush {
  readonly stream: Stream;
  readonly url: RtmpUrl;
  #log: Logger;
  #sendable: (stream: Stream) => Stream;
  #session: RtmpClientSession | undefined;
  #stopped = false;
  #muted = false;
  /** The sound mix being sent, while a sound is on. */
  #mix: ChunkedAudioStream | undefined;
  /** The reader of the current connection, closed to switch streams. */
  #reader: StreamReader | undefined;
  #switching = false;
  #run: Promise<void> | undefined;
  #wake: (() => void) | undefined;
  /** Times the remote dropped and the push reconnected. */
  reconnects = 0;

  constructor(options: RtmpPushOptions) {
    this.stream = options.stream;
    this.url = options.url;
    this.#log = options.log;
    this.#sendable = options.sendable;
  }

  /**
   * Connects and starts publishing; rejects (RemoteRtmpError) when the first connection
   * fails. `ended` settles when the push has stopped for good.
   */
  async start(): Promise<{ ended: Promise<void> }> {
    this.#session = await openRtmpClient(this.url, "publish");
    this.#run = this.#loop();
    return { ended: this.#run };
  }

  /**
   * Sends silence in place of the audio; NotImplementedError (naming `operation`) for audio
   * it cannot silence. Opus audio is sent as AAC-LC, which it can.
   */
  mute(operation: string): void {
    const audio = this.stream.tracks.find((t) => t.kind === "audio");
    if (audio?.config?.codec === "AAC") silentAacFrame(audio.config.asc, operation);
    else if (audio && audio.codec !== "OPUS") {
      throw new NotImplementedError(operation, `silence is not built for ${audio.codec} audio`);
    }
    this.#muted = true;
  }

  /** Sends the stream's audio again. */
  unmute(): void {
    this.#muted = false;
  }

  /** Mixes the sound of `mix` (made from this push's stream) into the audio sent. */
  async soundOn(mix: ChunkedAudioStream): Promise<void> {
    const previous = this.#mix;
    this.#mix = mix;
    this.#switchSource();
    await previous?.stop();
  }

  /** Stops mixing a sound in; the stream's own audio is sent again. */
  async soundOff(): Promise<void> {
    const previous = this.#mix;
    this.#mix = undefined;
    this.#switchSource();
    await previous?.stop();
  }

  /** Stops publishing and closes the connection. */
  async stop(): Promise<void> {
    this.#stopped = true;
    await this.#mix?.stop();
    this.#session?.conn.close();
    this.#wake?.();
    await this.#run;
  }

  async #loop(): Promise<void> {
    let backoffMs = pushReconnectInitialMs;
    while (!this.#stopped && !this.stream.ended) {
      const session = this.#session;
      if (session) {
        await this.#send(session);
        backoffMs = pushReconnectInitialMs;
        this.#session = undefined;
        if (this.#stopped || this.stream.ended) break;
        this.#log.info("rtmp push dropped; reconnecting", { url: this.url.tcUrl });
      }
      await this.#sleep(backoffMs);
      if (this.#stopped || this.stream.ended) break;
      try {
        this.#session = await openRtmpClient(this.url, "publish");
        this.reconnects++;
        this.#log.info("rtmp push reconnected", { url: this.url.tcUrl });
      } catch (err) {
        backoffMs = Math.min(backoffMs * 2, pushReconnectMaxMs);
        this.#log.debug("rtmp push reconnect failed", { reason: (err as Error).message });
      }
    }
  }

  /**
   * Publishes through one connection until it drops, the push stops or the stream ends. A
   * sound switched on or off changes the stream read from without a new connection.
   */
  async #send(session: RtmpClientSession): Promise<void> {
    const { conn } = session;
    let reader: StreamReader | undefined;
    // The server's messages (acknowledgements, pings) are read so its window never fills;
    // the connection's end wakes the frame loop.
    const draining = (async () => {
      try {
        for await (const _ of session.messages) { /* control is handled by the connection */ }
      } catch {
        // A broken connection ends the push's attempt like a closed one.
      } finally {
        conn.close();
        reader?.close();
      }
    })();
    // Decode time last sent per track: a new reader replays the stream's cached GOP, which
    // must not go out twice after a switch.
    const lastDts = new Map<number, number>();
    try {
      while (!conn.closed) {
        const stream = this.#mix?.output ?? this.#sendable(this.stream);
        const packager = RtmpPackager.of(stream);
        const silence = silenceFor(packager);
        reader = stream.reader(undefined, "push");
        this.#reader = reader;
        await conn.writeRaw(packager.publishHeader);
        let headerVersion = packager.headerVersion;
        for (;;) {
          const frame = await reader.next();
          if (frame === undefined) break;
          const last = lastDts.get(frame.trackId);
          if (last !== undefined && frame.dts <= last) continue;
          lastDts.set(frame.trackId, frame.dts);
          const bytes = this.#muted && silence && frame.trackId === packager.audio?.id
            ? packager.audioChunks(frame, silence)
            : packager.chunks(frame);
          if (bytes && packager.headerVersion !== headerVersion) {
            // The stream's encoder set its parameter sets after the headers went out.
            headerVersion = packager.headerVersion;
            await conn.writeRaw(packager.publishHeader);
          }
          if (bytes) await conn.writeRaw(bytes);
        }
        reader.close();
        if (!this.#switching) break;
        this.#switching = false;
      }
    } catch {
      // Write failed: the remote dropped.
    } finally {
      reader?.close();
      this.#reader = undefined;
      conn.close();
      await draining;
    }
  }

  /** Makes the connection's frame loop pick its stream again (sound switched on or off). */
  #switchSource(): void {
    if (!this.#reader) return;
    this.#switching = true;
    this.#reader.close();
  }

  #sleep(ms: number): Promise<void> {
    return new Promise((resolve) => {
      const timer = setTimeout(() => {
        this.#wake = undefined;
        resolve();
      }, ms);
      this.#wake = () => {
        clearTimeout(timer);
        this.#wake = undefined;
        resolve();
      };
    });
  }
}

/** The silent frame for a packager's AAC audio; none when its configuration has none. */
function silenceFor(packager: RtmpPackager): Uint8Array | undefined {
  const config = packager.audio?.config;
  if (config?.codec !== "AAC") return undefined;
  try {
    return silentAacFrame(config.asc, "/push/mute");
  } catch {
    return undefined; // mute() refused this configuration already
  }
}
