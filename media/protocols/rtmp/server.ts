/**
 * The RTMP listener: accepts connections, runs the handshake and the NetConnection /
 * NetStream command exchange (connect, createStream, publish, play, deleteStream), and hands
 * published media to a publish handler and played streams to a play handler. What a stream
 * is, and where it goes, is the handlers' business.
 */
import {
  ConflictError,
  MediaServerError,
  NotFoundError,
  ParseError,
} from "../../../core/errors.ts";
import type { Logger } from "../../../core/log.ts";
import { RtmpClosedError, RtmpConn, windowAckBytes } from "./conn.ts";
import {
  buildCommand,
  buildOnStatus,
  parseCommand,
  type RtmpCommand,
  StatusCode,
} from "./command.ts";
import { encodeAmf0 } from "./amf0.ts";
import {
  buildSetPeerBandwidth,
  buildUserControl,
  buildWindowAckSize,
  ChunkStreamId,
  MessageType,
  type RtmpMessage,
  UserControlEvent,
} from "./message.ts";

/** The message stream id createStream hands out (one NetStream per connection). */
export const mediaStreamId = 1;
/** Longest a connection may take from accept to publish or play, in milliseconds. */
export const sessionSetupTimeoutMs = 10_000;

/** Receives the media messages of one publishing connection. */
export interface PublishSink {
  /** An audio, video or data message on the published stream. */
  message(message: RtmpMessage): void;
  /** The publisher stopped or the connection ended; `reason` is for logs. */
  close(reason: string): void;
}

/** A playing connection: the handler writes to it until the stream or the connection ends. */
export interface PlayTarget {
  readonly conn: RtmpConn;
  /** Settles when the connection ends. */
  readonly ended: Promise<void>;
}

/** What the server does with publishers and players. */
export interface RtmpHandlers {
  /**
   * A publisher asks for `name` of application `app`; ConflictError when the name is in use
   * (answered with NetStream.Publish.BadName).
   */
  publish(name: string, app: string, conn: RtmpConn): PublishSink;
  /**
   * A player asks for `name`; NotFoundError when there is no such stream (answered with
   * NetStream.Play.StreamNotFound). Resolves when playing has ended.
   */
  play(name: string, app: string, target: PlayTarget): Promise<void>;
}

/** Serves RTMP on one TCP listener. */
export class RtmpServer {
  #listener: Deno.Listener | undefined;
  #conns = new Set<RtmpConn>();
  #sessions = new Set<Promise<void>>();
  #handlers: RtmpHandlers;
  #log: Logger;
  #accepting: Promise<void> | undefined;

  constructor(handlers: RtmpHandlers, log: Logger) {
    this.#handlers = handlers;
    this.#log = log;
  }

  /** Starts listening; returns the port (the ephemeral one when `port` is 0). */
  listen(hostname: string, port: number): number {
    this.#listener = Deno.listen({ hostname, port, transport: "tcp" });
    this.#accepting = this.#accept(this.#listener);
    return (this.#listener.addr as Deno.NetAddr).port;
  }

  async #accept(listener: Deno.Listener): Promise<void> {
    for (;;) {
      let tcp: Deno.Conn;
      try {
        tcp = await listener.accept();
      } catch {
        return; // the listener was closed
      }
      (tcp as Deno.TcpConn).setNoDelay(true);
      const conn = new RtmpConn(tcp);
      this.#conns.add(conn);
      const session = this.#serve(conn).finally(() => {
        conn.close();
        this.#conns.delete(conn);
        this.#sessions.delete(session);
      });
      this.#sessions.add(session);
    }
  }

  /** Stops listening, closes every connection and waits for their sessions to end. */
  async close(): Promise<void> {
    try {
      this.#listener?.close();
    } catch {
      // Closed already.
    }
    await this.#accepting;
    for (const conn of this.#conns) conn.close();
    await Promise.allSettled([...this.#sessions]);
  }

  async #serve(conn: RtmpConn): Promise<void> {
    const log = this.#log.child({ remote: conn.remote });
    let app = "";
    let sink: PublishSink | undefined;
    let playing: Promise<void> | undefined;
    const ended = Promise.withResolvers<void>();
    const setupTimer = setTimeout(() => {
      if (!sink && !playing) conn.close();
    }, sessionSetupTimeoutMs);
    try {
      await conn.acceptHandshake();
      for await (const message of conn.messages()) {
        if (message.type === MessageType.commandAmf0 || message.type === MessageType.commandAmf3) {
          const payload = message.type === MessageType.commandAmf3
            ? message.payload.subarray(1)
            : message.payload;
          const command = parseCommand(payload);
          switch (command.name) {
            case "connect":
              app = connectApp(command);
              await this.#acceptConnect(conn, command);
              break;
            case "createStream":
              await sendCommand(
                conn,
                buildCommand("_result", command.transactionId, null, mediaStreamId),
              );
              break;
            case "releaseStream":
            case "FCPublish":
            case "getStreamLength":
              if (command.transactionId > 0) {
                await sendCommand(conn, buildCommand("_result", command.transactionId, null));
              }
              break;
            case "publish": {
              if (sink || playing) throw new ParseError("second publish/play on one connection");
              const name = streamNameArg(command);
              try {
                sink = this.#handlers.publish(name, app, conn);
              } catch (err) {
                if (!(err instanceof ConflictError)) throw err;
                await sendStatus(conn, "error", StatusCode.publishBadName, err.message);
                log.info("rtmp publish refused", { stream: name, reason: err.message });
                return;
              }
              await conn.send(ChunkStreamId.control, userControl(UserControlEvent.streamBegin));
              await sendStatus(conn, "status", StatusCode.publishStart, `${name} is now published`);
              log.info("rtmp publish", { stream: name });
              break;
            }
            case "play": {
              if (sink || playing) throw new ParseError("second publish/play on one connection");
              const name = streamNameArg(command);
              await conn.send(ChunkStreamId.control, userControl(UserControlEvent.streamBegin));
              playing = this.#handlers.play(name, app, { conn, ended: ended.promise }).catch(
                async (err) => {
                  if (err instanceof NotFoundError) {
                    await sendStatus(conn, "error", StatusCode.playStreamNotFound, err.message)
                      .catch(() => {});
                  } else if (!(err instanceof RtmpClosedError)) {
                    log.warn("rtmp play failed", { stream: name, err });
                  }
                },
              ).finally(() => conn.close());
              break;
            }
            case "deleteStream":
            case "closeStream":
            case "FCUnpublish":
              if (sink) {
                sink.close(`publisher sent ${command.name}`);
                sink = undefined;
                return;
              }
              break;
          }
        } else if (
          sink && (message.type === MessageType.audio || message.type === MessageType.video ||
            message.type === MessageType.dataAmf0)
        ) {
          sink.message(message);
        }
      }
    } catch (err) {
      if (!(err instanceof RtmpClosedError) && !conn.closed) {
        log.info("rtmp connection dropped", {
          reason: err instanceof ParseError || err instanceof MediaServerError
            ? err.message
            : String(err),
        });
      }
    } finally {
      clearTimeout(setupTimer);
      sink?.close("connection closed");
      ended.resolve();
      conn.close();
      await playing;
    }
  }

  async #acceptConnect(conn: RtmpConn, command: RtmpCommand): Promise<void> {
    await conn.send(ChunkStreamId.control, {
      type: MessageType.windowAckSize,
      streamId: 0,
      timestamp: 0,
      payload: buildWindowAckSize(windowAckBytes),
    });
    await conn.send(ChunkStreamId.control, {
      type: MessageType.setPeerBandwidth,
      streamId: 0,
      timestamp: 0,
      payload: buildSetPeerBandwidth(windowAckBytes),
    });
    await conn.announceChunkSize();
    await sendCommand(
      conn,
      buildCommand(
        "_result",
        command.transactionId,
        { fmsVer: "FMS/3,0,1,123", capabilities: 31 },
        {
          level: "status",
          code: StatusCode.connectSuccess,
          description: "Connection succeeded.",
          objectEncoding: 0,
        },
      ),
    );
  }
}

function connectApp(command: RtmpCommand): string {
  const object = command.object;
  if (object && typeof object === "object" && !Array.isArray(object) && !(object instanceof Date)) {
    const app = object.app;
    if (typeof app === "string") return app.split("?")[0];
  }
  return "";
}

/** The stream name argument of publish/play, without a query (tokens are not names). */
function streamNameArg(command: RtmpCommand): string {
  const name = command.args[0];
  if (typeof name !== "string" || name === "") {
    throw new ParseError(`${command.name} without a stream name`);
  }
  return name.split("?")[0];
}

function userControl(event: number): RtmpMessage {
  return {
    type: MessageType.userControl,
    streamId: 0,
    timestamp: 0,
    payload: buildUserControl(event, mediaStreamId),
  };
}

function sendCommand(conn: RtmpConn, payload: Uint8Array, streamId = 0): Promise<void> {
  return conn.send(ChunkStreamId.command, {
    type: MessageType.commandAmf0,
    streamId,
    timestamp: 0,
    payload,
  });
}

/** Sends onStatus on the media stream. */
export function sendStatus(
  conn: RtmpConn,
  level: "status" | "error",
  code: string,
  description: string,
): Promise<void> {
  return sendCommand(conn, buildOnStatus(level, code, description), mediaStreamId);
}

/** Sends `|RtmpSampleAccess`, which Flash-era players expect before media. */
export function sendSampleAccess(conn: RtmpConn): Promise<void> {
  return conn.send(ChunkStreamId.data, {
    type: MessageType.dataAmf0,
    streamId: mediaStreamId,
    timestamp: 0,
    payload: encodeAmf0("|RtmpSampleAccess", true, true),
  });
}
