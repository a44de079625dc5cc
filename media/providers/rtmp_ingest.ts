/**
 * RTMP ingest: a publisher's connection becomes a Stream (mediaProvider "RTMP") once its
 * codecs are known, registered under the published name for every kind of reader. The name
 * is reserved from the publish command on, so a second publisher is refused at once. MP3
 * audio is converted to AAC here, once, so every reader (RTMP, recording, WebRTC through its
 * own AAC to Opus conversion) gets a codec it carries; an audio codec that cannot be
 * converted ends the publish with an error status naming it.
 */
import { ConflictError, MediaServerError, ParseError } from "../../core/errors.ts";
import type { Logger } from "../../core/log.ts";
import { codecArgs, targetTrack } from "../engine/audio_conversion.ts";
import type { CodecEngine } from "../engine/engine.ts";
import { LiveTranscode } from "../engine/live_transcode.ts";
import type { MediaFrame, Track } from "../frame.ts";
import type { StreamDirectory } from "../stream_record.ts";
import { StatusCode } from "../protocols/rtmp/command.ts";
import type { RtmpConn } from "../protocols/rtmp/conn.ts";
import type { RtmpMessage } from "../protocols/rtmp/message.ts";
import { type PublishSink, refusalGraceMs, sendStatus } from "../protocols/rtmp/server.ts";
import { Stream } from "../stream.ts";
import { probeTimeoutMs, RtmpMediaReceiver } from "./rtmp_receiver.ts";

/** Value of `mediaProvider` in the records of streams published or pulled over RTMP. */
export const rtmpMediaProvider = "RTMP";

/** Accepts RTMP publishers into the stream registry. */
export class RtmpIngest {
  #streams: StreamDirectory;
  #engine: CodecEngine;
  #log: Logger;
  /** Names published over RTMP whose codecs are still being probed. */
  #probing = new Set<string>();
  /** Conversions of ended publishes still stopping their engine job. */
  #stopping = new Set<Promise<void>>();

  constructor(streams: StreamDirectory, engine: CodecEngine, log: Logger) {
    this.#streams = streams;
    this.#engine = engine;
    this.#log = log;
  }

  /**
   * Starts receiving `name` as the stream `mediaSessionId`; ConflictError when a stream of
   * that name exists or is starting.
   */
  publish(name: string, conn: RtmpConn, mediaSessionId: string): PublishSink {
    if (this.#streams.published(name) || this.#probing.has(name)) {
      throw new ConflictError(`stream ${name} is already published`);
    }
    this.#probing.add(name);
    return new IngestSession({
      name,
      mediaSessionId,
      conn,
      streams: this.#streams,
      engine: this.#engine,
      log: this.#log,
      releaseName: () => this.#probing.delete(name),
      stopping: this.#stopping,
    });
  }

  /** Resolves once the conversions of ended publishes have stopped (for a clean stop). */
  async drain(): Promise<void> {
    while (this.#stopping.size > 0) await Promise.allSettled([...this.#stopping]);
  }
}

/** What one publish needs. */
interface IngestOptions {
  readonly name: string;
  readonly mediaSessionId: string;
  readonly conn: RtmpConn;
  readonly streams: StreamDirectory;
  readonly engine: CodecEngine;
  readonly log: Logger;
  readonly releaseName: () => void;
  /** Where the stop of a conversion is tracked until it ends. */
  readonly stopping: Set<Promise<void>>;
}

class IngestSession implements PublishSink {
  #options: IngestOptions;
  #receiver = new RtmpMediaReceiver();
  #stream: Stream | undefined;
  /** The MP3 to AAC conversion, when the publisher sends MP3. */
  #mp3: LiveTranscode | undefined;
  #closed = false;
  #timer: ReturnType<typeof setTimeout>;
  #refusalTimer: ReturnType<typeof setTimeout> | undefined;

  constructor(options: IngestOptions) {
    this.#options = options;
    // From the publish command on: a publisher that sends nothing must not hold the name.
    this.#timer = setTimeout(() => this.#giveUpProbe(), probeTimeoutMs);
  }

  message(message: RtmpMessage): void {
    if (this.#closed) return;
    try {
      this.#deliver(this.#receiver.receive(message));
    } catch (err) {
      if (!(err instanceof ParseError || err instanceof MediaServerError)) throw err;
      this.#refuse(err.message);
    }
  }

  #giveUpProbe(): void {
    if (this.#closed || this.#stream) return;
    try {
      this.#deliver(this.#receiver.finishProbe());
    } catch (err) {
      if (!(err instanceof ParseError || err instanceof MediaServerError)) throw err;
      this.#refuse(err.message);
    }
  }

  /**
   * Ends the publish with NetStream.Publish.Failed naming `reason`, and the connection
   * `refusalGraceMs` later: an encoder in full flow reads the status only between writes
   * (ffmpeg polls after each packet).
   */
  #refuse(reason: string): void {
    const { conn, log, name } = this.#options;
    log.warn("rtmp publish refused", { stream: name, reason });
    this.close(reason);
    sendStatus(conn, "error", StatusCode.publishFailed, reason).catch(() => {});
    this.#refusalTimer = setTimeout(() => conn.close(), refusalGraceMs);
  }

  #deliver(frames: MediaFrame[]): void {
    const stream = this.#stream ?? this.#start();
    if (!stream) return;
    for (const frame of frames) {
      if (frame.codec === "MP3") this.#mp3?.push(frame);
      else stream.push(frame);
    }
  }

  /** Makes and registers the Stream once the tracks are known. */
  #start(): Stream | undefined {
    const received = this.#receiver.tracks;
    if (!received) return undefined;
    const { name, mediaSessionId, conn, streams, engine, log } = this.#options;
    clearTimeout(this.#timer);
    const mp3 = received.find((t) => t.codec === "MP3");
    const aac = mp3 && targetTrack(mp3, "AAC", engine);
    const tracks = received.map((t) => (t === mp3 ? aac! : t));
    const stream = new Stream({
      name,
      mediaSessionId,
      tracks,
      mediaProvider: rtmpMediaProvider,
      stopProvider: () => {
        conn.close();
        return Promise.resolve();
      },
    });
    this.#options.releaseName();
    streams.add(stream);
    this.#stream = stream;
    if (mp3 && aac) this.#mp3 = this.#convertMp3(mp3, aac, stream);
    log.info("rtmp stream published", {
      stream: name,
      codecs: received.map((t) => t.codec).join(","),
      ...(mp3 ? { converted: "MP3 to AAC" } : {}),
    });
    return stream;
  }

  #convertMp3(mp3: Track, aac: Track, stream: Stream): LiveTranscode {
    return new LiveTranscode({
      engine: this.#options.engine,
      input: mp3,
      output: aac,
      codecArgs: codecArgs(aac),
      onFrame: (frame) => stream.push(frame),
      log: this.#options.log,
    });
  }

  close(reason: string): void {
    // A refused publish ends here again when its connection closes.
    clearTimeout(this.#refusalTimer);
    if (this.#closed) return;
    this.#closed = true;
    clearTimeout(this.#timer);
    if (this.#mp3) {
      const stopped = this.#mp3.close().catch(() => {}).finally(() =>
        this.#options.stopping.delete(stopped)
      );
      this.#options.stopping.add(stopped);
    }
    const { streams, log, name } = this.#options;
    if (this.#stream) {
      streams.remove(this.#stream);
      this.#stream.end();
      log.info("rtmp stream ended", { stream: name, reason });
    } else {
      this.#options.releaseName();
    }
  }
}
