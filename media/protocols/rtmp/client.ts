/**
 * The client side of RTMP: connect to a server, create a stream and publish or play it.
 * Used by pushes (publish our stream to another server) and pulls (play another server's
 * stream into ours).
 */
import { BadGatewayError, ParseError } from "../../../core/errors.ts";
import { type AmfObject, type AmfValue } from "./amf0.ts";
import { buildCommand, parseCommand, type RtmpCommand, StatusCode } from "./command.ts";
import { RtmpConn, windowAckBytes } from "./conn.ts";
import {
  buildUserControl,
  buildWindowAckSize,
  ChunkStreamId,
  MessageType,
  type RtmpMessage,
  UserControlEvent,
} from "./message.ts";
import type { RtmpUrl } from "./url.ts";

/** Longest connecting, the handshake and the command exchange may take, in milliseconds. */
export const clientSetupTimeoutMs = 5_000;
/** Buffer length asked of the server when playing, in milliseconds. */
const playBufferMs = 1_000;

/** The remote RTMP server could not be reached, refused us, or broke the exchange (HTTP 502). */
export class RemoteRtmpError extends BadGatewayError {}

/** A client connection that publishes or plays one stream. */
export interface RtmpClientSession {
  readonly conn: RtmpConn;
  /** The message stream id the server gave. */
  readonly streamId: number;
  /** The rest of the server's messages (media when playing). */
  readonly messages: AsyncGenerator<RtmpMessage>;
}

/**
 * Connects to `url` and publishes (mode "publish") or plays ("play") its stream name.
 * Failures are RemoteRtmpError with the reason: connection refused, the server's error
 * status, a timeout.
 */
export async function openRtmpClient(
  url: RtmpUrl,
  mode: "publish" | "play",
): Promise<RtmpClientSession> {
  let timedOut = false;
  let conn: RtmpConn | undefined;
  const timer = setTimeout(() => {
    timedOut = true;
    conn?.close();
  }, clientSetupTimeoutMs);
  const where = `${url.hostname}:${url.port}`;
  try {
    let tcp: Deno.TcpConn;
    try {
      tcp = await Deno.connect({ hostname: url.hostname, port: url.port, transport: "tcp" });
    } catch (err) {
      throw new RemoteRtmpError(`cannot connect to ${where}: ${(err as Error).message}`);
    }
    tcp.setNoDelay(true);
    conn = new RtmpConn(tcp);
    if (timedOut) conn.close();
    await conn.connectHandshake();
    await conn.announceChunkSize();
    const messages = conn.messages();
    const exchange = new CommandExchange(conn, messages);
    const connectInfo: AmfObject = {
      app: url.app,
      type: "nonprivate",
      flashVer: "FMLE/3.0 (compatible; media-server)",
      tcUrl: url.tcUrl,
    };
    if (mode === "play") {
      Object.assign(connectInfo, {
        fpad: false,
        capabilities: 15,
        audioCodecs: 0x0fff,
        videoCodecs: 0xff,
        videoFunction: 1,
      });
    }
    await exchange.call("connect", connectInfo);
    await conn.send(ChunkStreamId.control, {
      type: MessageType.windowAckSize,
      streamId: 0,
      timestamp: 0,
      payload: buildWindowAckSize(windowAckBytes),
    });
    if (mode === "publish") {
      exchange.notify("releaseStream", url.streamName);
      exchange.notify("FCPublish", url.streamName);
    }
    const created = await exchange.call("createStream", null);
    const streamId = created.args[0];
    if (typeof streamId !== "number") throw new ParseError("createStream answered no stream id");
    if (mode === "publish") {
      await exchange.send(buildCommand("publish", 0, null, url.streamName, "live"), streamId);
      await exchange.status(StatusCode.publishStart);
    } else {
      await exchange.send(buildCommand("play", 0, null, url.streamName, -2000), streamId);
      await conn.send(ChunkStreamId.control, {
        type: MessageType.userControl,
        streamId: 0,
        timestamp: 0,
        payload: userControlBufferLength(streamId, playBufferMs),
      });
      await exchange.status(StatusCode.playStart);
    }
    return { conn, streamId, messages };
  } catch (err) {
    conn?.close();
    if (err instanceof RemoteRtmpError) throw err;
    if (timedOut) {
      throw new RemoteRtmpError(`${where} did not complete the RTMP ${mode} setup in time`);
    }
    throw new RemoteRtmpError(`RTMP ${mode} at ${where} failed: ${(err as Error).message}`, {
      cause: err,
    });
  } finally {
    clearTimeout(timer);
  }
}

function userControlBufferLength(streamId: number, ms: number): Uint8Array {
  const out = new Uint8Array(10);
  out.set(buildUserControl(UserControlEvent.setBufferLength, streamId));
  new DataView(out.buffer).setUint32(6, ms);
  return out;
}

/** Sends commands and waits for their answers on a connection not yet carrying media. */
class CommandExchange {
  #nextTransaction = 1;
  constructor(readonly conn: RtmpConn, readonly messages: AsyncGenerator<RtmpMessage>) {}

  send(payload: Uint8Array, streamId = 0): Promise<void> {
    return this.conn.send(ChunkStreamId.command, {
      type: MessageType.commandAmf0,
      streamId,
      timestamp: 0,
      payload,
    });
  }

  /** A command whose answer is not waited for. */
  notify(name: string, ...args: AmfValue[]): void {
    this.send(buildCommand(name, this.#nextTransaction++, null, ...args)).catch(() => {});
  }

  /** A command and its `_result`; an `_error` answer is a RemoteRtmpError with its description. */
  async call(name: string, object: AmfValue, ...args: AmfValue[]): Promise<RtmpCommand> {
    const transactionId = this.#nextTransaction++;
    await this.send(buildCommand(name, transactionId, object, ...args));
    for (;;) {
      const command = await this.#nextCommand();
      if (command.transactionId !== transactionId) continue;
      if (command.name === "_result") return command;
      if (command.name === "_error") {
        throw new RemoteRtmpError(`the server refused ${name}: ${describe(command)}`);
      }
    }
  }

  /** Waits for onStatus `code`; an onStatus of level "error" is a RemoteRtmpError. */
  async status(code: string): Promise<void> {
    for (;;) {
      const command = await this.#nextCommand();
      if (command.name !== "onStatus") continue;
      const info = command.args[0] as AmfObject | undefined;
      if (info?.code === code) return;
      if (info?.level === "error") {
        throw new RemoteRtmpError(`the server answered ${describe(command)}`);
      }
    }
  }

  async #nextCommand(): Promise<RtmpCommand> {
    for (;;) {
      const { value, done } = await this.messages.next();
      if (done) throw new RemoteRtmpError("the server closed the connection");
      if (value.type === MessageType.commandAmf0) return parseCommand(value.payload);
      if (value.type === MessageType.commandAmf3) return parseCommand(value.payload.subarray(1));
    }
  }
}

function describe(command: RtmpCommand): string {
  const info = command.args[0];
  if (info && typeof info === "object" && !Array.isArray(info) && !(info instanceof Date)) {
    return [info.code, info.description].filter((x) => typeof x === "string").join(": ");
  }
  return command.name;
}
