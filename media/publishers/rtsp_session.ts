/**
 * What the RTSP server does with the requests of one connection: DESCRIBE answers the SDP of
 * a published stream's tracks (404 for an unknown one), SETUP sets a track up over TCP
 * interleaved channels or UDP (server ports from the media range), PLAY starts an RtspPlay,
 * PAUSE stops it, TEARDOWN ends the session; OPTIONS, GET_PARAMETER and SET_PARAMETER keep
 * it alive. Methods out of order are 455 (server_state.ts). A UDP session that hears neither
 * a request nor an RTCP packet for its timeout ends with its connection; a TCP one ends with
 * the connection.
 */
import type { Logger } from "../../core/log.ts";
import { writeSdp } from "../formats/sdp/sdp.ts";
import type { SdpMedia } from "../formats/sdp/sdp.ts";
import type { InterleavedFrame, RtspServerRequest } from "../protocols/rtsp/message.ts";
import type { RtspReply } from "../protocols/rtsp/response.ts";
import type { RtspConnHandler, RtspServerConn } from "../protocols/rtsp/server_conn.ts";
import {
  nextState,
  refusalStatus,
  type RtspServerState,
  type ServerMethod,
  serverMethods,
} from "../protocols/rtsp/server_state.ts";
import { formatServerTransport, pickTransport } from "../protocols/rtsp/server_transport.ts";
import { contentBase, parseTarget, trackControl } from "../protocols/rtsp/server_url.ts";
import { parseSession } from "../protocols/rtsp/headers.ts";
import { UdpPortPair, type UdpPortRange } from "../protocols/rtsp/udp_pair.ts";
import { trackMedia } from "../rtp/track_sdp.ts";
import { Stream } from "../stream.ts";
import type { StreamDirectory } from "../stream_record.ts";
import { RtspPlay, type RtspTrackTransport } from "./rtsp_play.ts";

/** Session timeout announced in the Session header, in seconds. */
export const rtspSessionTimeoutSec = 60;
/** Server header of every answer. */
export const rtspServerName = "media-server-rtsp/1";

/** What a session needs of the server. */
export interface RtspSessionDeps {
  streams: StreamDirectory;
  /** Address and port range of the UDP media sockets. */
  udp: UdpPortRange;
  log: Logger;
  /** Overrides `rtspSessionTimeoutSec` (tests). */
  sessionTimeoutSec?: number;
}

const encoder = new TextEncoder();

/** The handler of one RTSP connection. */
export class RtspSession implements RtspConnHandler {
  readonly #deps: RtspSessionDeps;
  readonly #conn: RtspServerConn;
  readonly #timeoutSec: number;
  #state: RtspServerState = "init";
  #id: string | undefined;
  #play: RtspPlay | undefined;
  /** True once a track went over UDP: the session then needs keepalives. */
  #usesUdp = false;
  #lastActivityMs = performance.now();
  #timer: ReturnType<typeof setInterval>;

  constructor(deps: RtspSessionDeps, conn: RtspServerConn) {
    this.#deps = deps;
    this.#conn = conn;
    this.#timeoutSec = deps.sessionTimeoutSec ?? rtspSessionTimeoutSec;
    // Checked a few times per timeout: the clock is only read, not re-armed, on activity.
    this.#timer = setInterval(() => this.#checkTimeout(), this.#timeoutSec * 250);
  }

  async request(request: RtspServerRequest): Promise<RtspReply> {
    this.#touch();
    const reply = await this.#handle(request);
    const headers: [string, string][] = [["Server", rtspServerName]];
    if (this.#id !== undefined && reply.status < 300) {
      headers.push(["Session", `${this.#id};timeout=${this.#timeoutSec}`]);
    }
    return { ...reply, headers: [...headers, ...(reply.headers ?? [])] };
  }

  interleaved(_frame: InterleavedFrame): void {
    this.#touch();
  }

  async closed(): Promise<void> {
    clearInterval(this.#timer);
    await this.#play?.close();
    this.#play = undefined;
  }

  #touch(): void {
    this.#lastActivityMs = performance.now();
  }

  #checkTimeout(): void {
    // Over TCP the connection is the session: a dead client is found by the write timeout.
    const udp = this.#play?.playing && this.#usesUdp;
    if (this.#play?.playing && !udp) return;
    if (performance.now() - this.#lastActivityMs < this.#timeoutSec * 1000) return;
    this.#deps.log.info("rtsp session timed out", { remote: this.#conn.remote });
    this.#conn.close();
  }

  async #handle(request: RtspServerRequest): Promise<RtspReply> {
    const method = request.method;
    const refusal = refusalStatus(method, this.#state);
    if (refusal === 501) return { status: 501, headers: [["Public", serverMethods.join(", ")]] };
    const sessionHeader = request.headers.get("session");
    if (sessionHeader !== undefined && method !== "OPTIONS") {
      const { id } = parseSession(sessionHeader);
      if (id !== this.#id) return { status: 454 };
    }
    if (refusal !== 0) return { status: refusal };
    const reply = await this.#method(method as ServerMethod, request);
    if (reply.status < 300) this.#state = nextState(method as ServerMethod, this.#state);
    return reply;
  }

  #method(method: ServerMethod, request: RtspServerRequest): Promise<RtspReply> | RtspReply {
    switch (method) {
      case "OPTIONS":
        return { status: 200, headers: [["Public", serverMethods.join(", ")]] };
      case "DESCRIBE":
        return this.#describe(request);
      case "SETUP":
        return this.#setup(request);
      case "PLAY":
        return this.#startPlay();
      case "PAUSE":
        return this.#pause();
      case "TEARDOWN":
        return this.#teardown();
      case "GET_PARAMETER":
      case "SET_PARAMETER":
        return { status: 200 };
    }
  }

  /** The published stream `name`, if there is one. */
  #stream(name: string): Stream | undefined {
    const stream = this.#deps.streams.published(name);
    return stream instanceof Stream && !stream.ended ? stream : undefined;
  }

  #describe(request: RtspServerRequest): RtspReply {
    const accept = request.headers.get("accept");
    if (accept !== undefined && !/application\/sdp|\*\/\*/i.test(accept)) return { status: 400 };
    const { name } = parseTarget(request.url);
    const stream = this.#stream(name);
    if (!stream) return { status: 404 };
    const media = stream.tracks.map((t) => trackMedia(t, trackControl(t.id)))
      .filter((m): m is SdpMedia => m !== undefined);
    if (media.length === 0) return { status: 404 };
    const address = this.#conn.localAddress;
    const family = address.includes(":") ? "IP6" : "IP4";
    const sdp = writeSdp({
      version: 0,
      origin: `- ${stream.createDate} 1 IN ${family} ${address}`,
      sessionName: name,
      connection: `IN ${family} ${family === "IP6" ? "::" : "0.0.0.0"}`,
      timing: ["0 0"],
      bandwidths: [],
      other: [],
      attributes: [{ name: "control", value: "*" }, { name: "range", value: "npt=now-" }],
      media,
    });
    return {
      status: 200,
      headers: [["Content-Base", contentBase(request.url)], ["Content-Type", "application/sdp"]],
      body: encoder.encode(sdp),
    };
  }

  async #setup(request: RtspServerRequest): Promise<RtspReply> {
    const { name, trackId } = parseTarget(request.url);
    if (trackId === undefined) return { status: 459 };
    const stream = this.#stream(name);
    const track = stream?.tracks[trackId];
    if (!stream || !track) return { status: 404 };
    if (this.#play && this.#play.stream !== stream) return { status: 459 };
    const requested = pickTransport(request.headers.get("transport") ?? "");
    if (!requested) return { status: 461 };
    this.#play ??= new RtspPlay(stream, this.#conn, `${rtspServerName}@${this.#conn.localAddress}`);
    const play = this.#play;
    let transport: RtspTrackTransport;
    let answer: string;
    const ssrcOf = (t: RtspTrackTransport) => play.setup(track, t, request.url);
    if (requested.protocol === "tcp") {
      const used = play.channelsInUse(trackId);
      let channels = requested.interleaved;
      if (!channels) {
        let first = 0;
        while (used.has(first) || used.has(first + 1)) first += 2;
        channels = [first, first + 1];
      }
      if (used.has(channels[0]) || used.has(channels[1])) return { status: 461 };
      transport = { protocol: "tcp", interleaved: channels };
      answer = formatServerTransport(transport, await ssrcOf(transport));
    } else {
      let pair: UdpPortPair;
      try {
        pair = await UdpPortPair.open(this.#deps.udp);
      } catch (err) {
        this.#deps.log.warn("rtsp setup without a UDP port pair", { err });
        return { status: 503 };
      }
      // Receiver reports keep a UDP session alive.
      pair.listen(this.#conn.remoteAddress, () => {}, () => this.#touch());
      transport = {
        protocol: "udp",
        pair,
        clientPorts: requested.clientPorts,
        address: this.#conn.remoteAddress,
      };
      this.#usesUdp = true;
      answer = formatServerTransport({
        protocol: "udp",
        clientPorts: requested.clientPorts,
        serverPorts: [pair.rtpPort, pair.rtpPort + 1],
      }, await ssrcOf(transport));
    }
    this.#id ??= [...crypto.getRandomValues(new Uint8Array(8))]
      .map((b) => b.toString(16).padStart(2, "0")).join("");
    return { status: 200, headers: [["Transport", answer]] };
  }

  #startPlay(): RtspReply {
    const play = this.#play;
    if (!play) return { status: 455 };
    if (play.stream.ended) return { status: 404 };
    const rtpInfo = play.play();
    return {
      status: 200,
      headers: [["Range", "npt=now-"], ["RTP-Info", rtpInfo]],
      // Packets follow the answer: the connection writes in order.
      afterWrite: () => play.start(),
    };
  }

  async #pause(): Promise<RtspReply> {
    await this.#play?.pause();
    return { status: 200 };
  }

  async #teardown(): Promise<RtspReply> {
    await this.#play?.close();
    this.#play = undefined;
    this.#usesUdp = false;
    const reply: RtspReply = { status: 200 };
    // The Session header goes on the answer, then the session is gone.
    const id = this.#id;
    this.#id = undefined;
    return id === undefined ? reply : { ...reply, headers: [["Session", id]] };
  }
}
