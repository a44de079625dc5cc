/**
 * The RTMP listener: accepts connections under per-listener and per-address caps, runs the
 * handshake and the NetConnection / NetStream command exchange (connect, createStream,
 * publish, play, the unpublish sequence), and hands each connection to a session of the
 * handlers, which admits it and its publishes and plays. What a stream is, who may publish
 * it and where it goes, is the handlers' business.
 */
import {
  CappedListener,
  type ListenerCaps,
  type ListenerLimits,
} from "../../../core/capped_listener.ts";
import {
  ConflictError,
  MediaServerError,
  NotFoundError,
  ParseError,
} from "../../../core/errors.ts";
import type { Logger } from "../../../core/log.ts";
import { RtmpClosedError, RtmpConn, windowAckBytes } from "./conn.ts";
import { resolveFdSend, type RtmpTransport } from "./fd_send.ts";
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
/**
 * Longest a connection may take from accept to publish or play (handshake, connect and the
 * hooks included), and may stay idle after unpublishing, in milliseconds.
 */
export const sessionSetupTimeoutMs = 10_000;
/**
 * Time a refused client has to read its error status before the server hangs up, in ms: a
 * socket closed at once, with bytes of the client still unread, resets, and the client may
 * lose the status and print only "Input/output error" or "Broken pipe".
 */
export const refusalGraceMs = 2000;

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

/** What a client's `connect` asks for. */
export interface RtmpConnectRequest {
  /** Application: the `app` of connect without its query ("live"). */
  readonly app: string;
  /** Query fields of the app or the tcUrl (`rtmp://host/live?token=abc` gives token). */
  readonly query: Record<string, string>;
  /** Remote address and port, for logs. */
  readonly remote: string;
}

/** One connected client, as the handlers admitted it. */
export interface RtmpSession {
  /**
   * A publisher asks for `name` (`query`: the fields of the name's query). ConflictError when
   * the name is in use (answered NetStream.Publish.BadName), any other MediaServerError
   * (ForbiddenError: refused by policy) NetStream.Publish.Failed with its message.
   */
  publish(name: string, query: Record<string, string>, conn: RtmpConn): Promise<PublishSink>;
  /**
   * A player asks for `name`; NotFoundError when there is no such stream (answered with
   * NetStream.Play.StreamNotFound), another MediaServerError NetStream.Play.Failed. Resolves
   * when playing has ended.
   */
  play(name: string, query: Record<string, string>, target: PlayTarget): Promise<void>;
  /** The connection ended (after its publish or play has). */
  close(): void;
}

/** What the server does with clients. */
export interface RtmpHandlers {
  /**
   * A client connects; a MediaServerError (ForbiddenError: refused by a backend) is answered
   * NetConnection.Connect.Rejected with its message, and the connection is closed.
   */
  connect(request: RtmpConnectRequest): Promise<RtmpSession>;
}

/** Caps and timeouts of one RTMP listener. */
export interface RtmpServerOptions extends ListenerCaps {
  /** Overrides `sessionSetupTimeoutMs` (tests). */
  readonly setupTimeoutMs?: number;
  /**
   * How connections write (`rtmp.transport`): `ffi` with send(2) on the socket's descriptor
   * (fd_send.ts; the constructor throws when it cannot run), `deno` with Deno's writes, `auto`
   * (default) ffi when it can run, else deno.
   */
  readonly transport?: RtmpTransport;
}

/** Serves RTMP on one TCP listener. */
export class RtmpServer {
  #listener: CappedListener<RtmpConn>;
  #handlers: RtmpHandlers;
  #log: Logger;
  #options: RtmpServerOptions;
  /** The write path the connections take: "ffi" or "deno". */
  readonly transport: "ffi" | "deno";

  constructor(handlers: RtmpHandlers, log: Logger, options: RtmpServerOptions) {
    this.#handlers = handlers;
    this.#log = log;
    this.#options = options;
    const fdSend = resolveFdSend(options.transport ?? "auto");
    this.transport = fdSend ? "ffi" : "deno";
    const connOptions = { fdSend };
    this.#listener = new CappedListener(options, {
      protocol: "rtmp",
      wrap: (tcp) => new RtmpConn(tcp, connOptions),
      serve: (conn) => this.#serve(conn),
    }, log);
  }

  /** Starts listening; returns the port (the ephemeral one when `port` is 0). */
  listen(hostname: string, port: number): number {
    return this.#listener.listen(hostname, port);
  }

  /** The listener's connection caps: held, max, refused. */
  limitsSnapshot(): ListenerLimits {
    return this.#listener.limitsSnapshot();
  }

  /** Stops listening, closes every connection and waits for their sessions to end. */
  close(): Promise<void> {
    return this.#listener.close();
  }

  async #serve(conn: RtmpConn): Promise<void> {
    const setupTimeoutMs = this.#options.setupTimeoutMs ?? sessionSetupTimeoutMs;
    let session: RtmpSession | undefined;
    let sink: PublishSink | undefined;
    let playing: Promise<void> | undefined;
    const ended = Promise.withResolvers<void>();
    // Armed while the connection neither publishes nor plays: from accept, and again after
    // an unpublish, so a client that stays idle (or half-open) does not hold its slots.
    let setupTimer: ReturnType<typeof setTimeout> | undefined;
    const armSetupTimer = () => {
      clearTimeout(setupTimer);
      setupTimer = setTimeout(() => {
        if (!sink && !playing) conn.close();
      }, setupTimeoutMs);
    };
    // A cleared timer still held here would stay for the connection's life.
    const disarmSetupTimer = () => {
      clearTimeout(setupTimer);
      setupTimer = undefined;
    };
    armSetupTimer();
    // After a refusal, what the client still sends is ignored until it hangs up or the grace
    // time ends.
    let refused = false;
    let graceTimer: ReturnType<typeof setTimeout> | undefined;
    const hangUpSoon = () => {
      refused = true;
      disarmSetupTimer();
      graceTimer ??= setTimeout(() => conn.close(), refusalGraceMs);
    };
    try {
      await conn.acceptHandshake();
      // Before any command: every message this server sends, refusals included, is chunked
      // at this size, which a client must know to read it.
      await conn.announceChunkSize();
      for await (const message of conn.messages()) {
        if (refused) continue;
        if (message.type === MessageType.commandAmf0 || message.type === MessageType.commandAmf3) {
          const payload = message.type === MessageType.commandAmf3
            ? message.payload.subarray(1)
            : message.payload;
          const command = parseCommand(payload);
          switch (command.name) {
            case "connect": {
              if (session) throw new ParseError("second connect on one connection");
              const request = { ...connectTarget(command), remote: conn.remote };
              try {
                session = await this.#handlers.connect(request);
              } catch (err) {
                if (!(err instanceof MediaServerError)) throw err;
                await sendCommand(
                  conn,
                  buildCommand("_error", command.transactionId, null, {
                    level: "error",
                    code: StatusCode.connectRejected,
                    description: err.message,
                  }),
                );
                this.#logOf(conn).info("rtmp connect refused", {
                  app: request.app,
                  reason: err.message,
                });
                hangUpSoon();
                break;
              }
              await this.#acceptConnect(conn, command);
              break;
            }
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
              if (!session) {
                await refuseBeforeConnect(
                  conn,
                  command,
                  StatusCode.publishFailed,
                  this.#logOf(conn),
                );
                hangUpSoon();
                break;
              }
              if (sink || playing) throw new ParseError("second publish/play on one connection");
              const { name, query } = streamNameArg(command);
              try {
                sink = await session.publish(name, query, conn);
              } catch (err) {
                if (!(err instanceof MediaServerError)) throw err;
                const code = err instanceof ConflictError
                  ? StatusCode.publishBadName
                  : StatusCode.publishFailed;
                await sendStatus(conn, "error", code, err.message);
                this.#logOf(conn).info("rtmp publish refused", {
                  stream: name,
                  reason: err.message,
                });
                hangUpSoon();
                break;
              }
              disarmSetupTimer();
              await conn.send(ChunkStreamId.control, userControl(UserControlEvent.streamBegin));
              await sendStatus(conn, "status", StatusCode.publishStart, `${name} is now published`);
              this.#logOf(conn).info("rtmp publish", { stream: name });
              break;
            }
            case "play": {
              if (!session) {
                await refuseBeforeConnect(conn, command, StatusCode.playFailed, this.#logOf(conn));
                hangUpSoon();
                break;
              }
              if (sink || playing) throw new ParseError("second publish/play on one connection");
              const { name, query } = streamNameArg(command);
              disarmSetupTimer();
              await conn.send(ChunkStreamId.control, userControl(UserControlEvent.streamBegin));
              playing = session.play(name, query, { conn, ended: ended.promise }).then(
                () => conn.close(),
                async (err) => {
                  if (err instanceof MediaServerError) {
                    const code = err instanceof NotFoundError
                      ? StatusCode.playStreamNotFound
                      : StatusCode.playFailed;
                    await sendStatus(conn, "error", code, err.message).catch(() => {});
                    if (!(err instanceof NotFoundError)) {
                      this.#logOf(conn).info("rtmp play refused", {
                        stream: name,
                        reason: err.message,
                      });
                    }
                    hangUpSoon();
                    return;
                  }
                  if (!(err instanceof RtmpClosedError)) {
                    this.#logOf(conn).warn("rtmp play failed", { stream: name, err });
                  }
                  conn.close();
                },
              );
              break;
            }
            case "FCUnpublish":
            case "deleteStream":
            case "closeStream":
              // The client ends its publish and closes the connection itself (ffmpeg sends
              // FCUnpublish then deleteStream, then hangs up): answer, never hang up first,
              // or its next write fails ("Broken pipe", rtmp2sink exits 1).
              if (sink) {
                sink.close(`publisher sent ${command.name}`);
                sink = undefined;
                armSetupTimer();
                await sendStatus(conn, "status", StatusCode.unpublishSuccess, "unpublished");
              }
              if (command.name === "FCUnpublish") {
                await sendCommand(
                  conn,
                  buildCommand("onFCUnpublish", 0, null, {
                    level: "status",
                    code: StatusCode.unpublishSuccess,
                    description: "unpublished",
                  }),
                );
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
        this.#logOf(conn).info("rtmp connection dropped", {
          reason: err instanceof ParseError || err instanceof MediaServerError
            ? err.message
            : String(err),
        });
      }
    } finally {
      clearTimeout(setupTimer);
      clearTimeout(graceTimer);
      sink?.close("connection closed");
      ended.resolve();
      conn.close();
      await playing;
      session?.close();
    }
  }

  /**
   * The logger of `conn`'s lines, made when a line is written: connections log rarely, and a
   * child logger held per connection was a dozen closures for each idle player.
   */
  #logOf(conn: RtmpConn): Logger {
    return this.#log.child({ remote: conn.remote });
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

/** Answers publish or play sent before connect with an error status. */
async function refuseBeforeConnect(
  conn: RtmpConn,
  command: RtmpCommand,
  code: string,
  log: Logger,
): Promise<void> {
  const description = `${command.name} before connect`;
  await sendStatus(conn, "error", code, description);
  log.info("rtmp command refused", { reason: description });
}

/** The application of connect and the query fields of its app or tcUrl. */
function connectTarget(command: RtmpCommand): Omit<RtmpConnectRequest, "remote"> {
  const object = command.object;
  let app = "";
  const query: Record<string, string> = {};
  if (object && typeof object === "object" && !Array.isArray(object) && !(object instanceof Date)) {
    if (typeof object.tcUrl === "string") Object.assign(query, queryFields(object.tcUrl));
    if (typeof object.app === "string") {
      app = object.app.split("?")[0];
      Object.assign(query, queryFields(object.app));
    }
  }
  return { app, query };
}

/** The fields of the query of `text` (after its first "?"); none without one. */
function queryFields(text: string): Record<string, string> {
  const at = text.indexOf("?");
  if (at < 0) return {};
  return Object.fromEntries(new URLSearchParams(text.slice(at + 1)));
}

/** The stream name argument of publish/play and its query (tokens are not names). */
function streamNameArg(command: RtmpCommand): { name: string; query: Record<string, string> } {
  const arg = command.args[0];
  if (typeof arg !== "string" || arg === "") {
    throw new ParseError(`${command.name} without a stream name`);
  }
  return { name: arg.split("?")[0], query: queryFields(arg) };
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
