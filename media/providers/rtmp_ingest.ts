/**
 * RTMP ingest: a publisher's connection becomes a Stream (mediaProvider "RTMP") once its
 * codecs are known, registered under the published name for every kind of reader. The name
 * is reserved from the publish command on, so a second publisher is refused at once.
 */
import { ConflictError, ParseError } from "../../core/errors.ts";
import type { Logger } from "../../core/log.ts";
import type { StreamDirectory } from "../stream_record.ts";
import type { RtmpConn } from "../protocols/rtmp/conn.ts";
import type { RtmpMessage } from "../protocols/rtmp/message.ts";
import type { PublishSink } from "../protocols/rtmp/server.ts";
import { Stream } from "../stream.ts";
import { probeTimeoutMs, RtmpMediaReceiver } from "./rtmp_receiver.ts";

/** Value of `mediaProvider` in the records of streams published or pulled over RTMP. */
export const rtmpMediaProvider = "RTMP";

/** Accepts RTMP publishers into the stream registry. */
export class RtmpIngest {
  #streams: StreamDirectory;
  #log: Logger;
  /** Names published over RTMP whose codecs are still being probed. */
  #probing = new Set<string>();

  constructor(streams: StreamDirectory, log: Logger) {
    this.#streams = streams;
    this.#log = log;
  }

  /** Starts receiving `name`; ConflictError when a stream of that name exists or is starting. */
  publish(name: string, conn: RtmpConn): PublishSink {
    if (this.#streams.published(name) || this.#probing.has(name)) {
      throw new ConflictError(`stream ${name} is already published`);
    }
    this.#probing.add(name);
    return new IngestSession(
      name,
      conn,
      this.#streams,
      this.#log,
      () => this.#probing.delete(name),
    );
  }
}

class IngestSession implements PublishSink {
  #receiver = new RtmpMediaReceiver();
  #stream: Stream | undefined;
  #closed = false;
  #timer: ReturnType<typeof setTimeout>;

  constructor(
    readonly name: string,
    readonly conn: RtmpConn,
    readonly streams: StreamDirectory,
    readonly log: Logger,
    readonly releaseName: () => void,
  ) {
    // From the publish command on: a publisher that sends nothing must not hold the name.
    this.#timer = setTimeout(() => this.#giveUpProbe(), probeTimeoutMs);
  }

  message(message: RtmpMessage): void {
    if (this.#closed) return;
    try {
      this.#deliver(this.#receiver.receive(message));
    } catch (err) {
      if (!(err instanceof ParseError || err instanceof ConflictError)) throw err;
      this.log.warn("rtmp publish refused", { stream: this.name, reason: err.message });
      this.close(err.message);
      this.conn.close();
    }
  }

  #giveUpProbe(): void {
    if (this.#closed || this.#stream) return;
    try {
      this.#deliver(this.#receiver.finishProbe());
    } catch (err) {
      this.log.warn("rtmp publish: no usable codec", { stream: this.name, err });
      this.close("no usable codec");
      this.conn.close();
    }
  }

  #deliver(frames: ReturnType<RtmpMediaReceiver["receive"]>): void {
    if (!this.#stream) {
      const tracks = this.#receiver.tracks;
      if (!tracks) return;
      clearTimeout(this.#timer);
      const stream = new Stream({
        name: this.name,
        mediaSessionId: crypto.randomUUID(),
        tracks,
        mediaProvider: rtmpMediaProvider,
        stopProvider: () => {
          this.conn.close();
          return Promise.resolve();
        },
      });
      this.releaseName();
      this.streams.add(stream);
      this.#stream = stream;
      this.log.info("rtmp stream published", {
        stream: this.name,
        codecs: tracks.map((t) => t.codec).join(","),
      });
    }
    for (const frame of frames) this.#stream.push(frame);
  }

  close(reason: string): void {
    if (this.#closed) return;
    this.#closed = true;
    clearTimeout(this.#timer);
    if (this.#stream) {
      this.streams.remove(this.#stream);
      this.#stream.end();
      this.log.info("rtmp stream ended", { stream: this.name, reason });
    } else {
      this.releaseName();
    }
  }
}
