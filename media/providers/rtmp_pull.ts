/**
 * RTMP pull: plays a stream of a remote RTMP server and publishes it locally as a Stream
 * (mediaProvider "RTMP"). The stream ends when the remote stops sending or the pull is
 * terminated.
 */
import { ParseError } from "../../core/errors.ts";
import type { Logger } from "../../core/log.ts";
import type { MediaFrame } from "../frame.ts";
import {
  openRtmpClient,
  RemoteRtmpError,
  type RtmpClientSession,
} from "../protocols/rtmp/client.ts";
import type { RtmpUrl } from "../protocols/rtmp/url.ts";
import { Stream } from "../stream.ts";
import { rtmpMediaProvider } from "./rtmp_ingest.ts";
import { probeTimeoutMs, RtmpMediaReceiver } from "./rtmp_receiver.ts";

/** What a pull is made of. */
export interface RtmpPullOptions {
  url: RtmpUrl;
  /** Name of the local stream. */
  name: string;
  log: Logger;
}

/** A remote RTMP stream played into a local Stream. */
export class RtmpPull {
  readonly stream: Stream;
  #session: RtmpClientSession;
  #run: Promise<void> | undefined;

  private constructor(stream: Stream, session: RtmpClientSession) {
    this.stream = stream;
    this.#session = session;
  }

  /**
   * Connects, plays and waits until the codecs are known. RemoteRtmpError when the server is
   * unreachable, refuses, or sends no usable media within `probeTimeoutMs`.
   */
  static async open(options: RtmpPullOptions): Promise<RtmpPull> {
    const session = await openRtmpClient(options.url, "play");
    const receiver = new RtmpMediaReceiver();
    const held: MediaFrame[] = [];
    const timer = setTimeout(() => session.conn.close(), probeTimeoutMs);
    try {
      while (!receiver.tracks) {
        const { value, done } = await session.messages.next();
        if (done) break;
        held.push(...receiver.receive(value));
      }
    } catch (err) {
      session.conn.close();
      if (!(err instanceof ParseError)) throw err;
      throw new RemoteRtmpError(`the remote stream is not usable: ${err.message}`);
    } finally {
      clearTimeout(timer);
    }
    const tracks = receiver.tracks;
    if (!tracks) {
      session.conn.close();
      throw new RemoteRtmpError(
        `no media with known codecs from ${options.url.tcUrl} within ${probeTimeoutMs} ms`,
      );
    }
    const stream: Stream = new Stream({
      name: options.name,
      mediaSessionId: crypto.randomUUID(),
      tracks,
      mediaProvider: rtmpMediaProvider,
      stopProvider: (): Promise<void> => pull.stop(),
    });
    const pull: RtmpPull = new RtmpPull(stream, session);
    pull.#run = pull.#receive(receiver, held, options.log);
    return pull;
  }

  /** Settles when the pull has ended (remote gone, or stopped). */
  get ended(): Promise<void> {
    return this.#run ?? Promise.resolve();
  }

  /** Closes the connection; the stream ends. */
  async stop(): Promise<void> {
    this.#session.conn.close();
    await this.#run;
  }

  async #receive(receiver: RtmpMediaReceiver, held: MediaFrame[], log: Logger): Promise<void> {
    for (const frame of held) this.stream.push(frame);
    try {
      for await (const message of this.#session.messages) {
        for (const frame of receiver.receive(message)) this.stream.push(frame);
      }
    } catch (err) {
      log.info("rtmp pull ended", { stream: this.stream.name, reason: (err as Error).message });
    } finally {
      this.#session.conn.close();
      this.stream.end();
    }
  }
}
