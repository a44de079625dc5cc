/**
 * What the RTSP server does with the requests of one connection: DESCRIBE answers the SDP of
 * a published stream's tracks (404 for an unknown one), SETUP sets a track up over TCP
 * interleaved channels or UDP (server ports from the media range), PLAY starts an RtspPlay,
 * PAUSE stops it, TEARDOWN ends the session; OPTIONS, GET_PARAMETER and SET_PARAMETER keep
 * it alive. A publisher sends ANNOUNCE with its SDP, SETUP per track, then RECORD: its media
 * becomes a stream of the name (409 when the name is in use) until the session ends.
 * Methods out of order are 455 (server_state.ts). A UDP session that hears neither a request
 * nor an RTCP packet for its timeout ends with its connection; a TCP one ends with the
 * connection.
 */
import {
  ConflictError,
  MediaServerError,
  ParseError,
  ServiceUnavailableError,
} from "../../core/errors.ts";
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
import type { RtspServerAuth } from "../protocols/rtsp/server_auth.ts";
import { UdpPortPair, type UdpPortRange } from "../protocols/rtsp/udp_pair.ts";
import { trackMedia } from "../rtp/track_sdp.ts";
import { Stream } from "../stream.ts";
import type { ViewerDirectory } from "../stream_record.ts";
import { RtspPlay, type RtspTrackTransport } from "./rtsp_play.ts";
import { RtspRecord } from "../providers/rtsp_record.ts";

/** Session timeout announced in the Session header, in seconds. */
export const rtspSessionTimeoutSec = 60;
/** Server header of every answer. */
export const rtspServerName = "media-server-rtsp/1";

/** What a session needs of the server. */
export interface RtspSessionDeps {
  streams: ViewerDirectory;
  /** Address and port range of the UDP media sockets. */
  udp: UdpPortRange;
  log: Logger;
  /** Users clients must authenticate as (none: open). */
  auth: RtspServerAuth;
  /** Overrides `rtspSessionTimeoutSec` (tests). */
  sessionTimeoutSec?: number;
  /** URL query parameter carrying a viewer's access key (`cdn.aclPropertyName`). */
  aclPropertyName: string;
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
  /** The announced publish, from ANNOUNCE to the session's end. */
  #record: RtspRecord | undefined;
  /** Interleaved channels of the publish: channel to track id, RTCP on odd channels. */
  #recordChannels = new Map<number, { track: number; rtcp: boolean }>();
  /** UDP port pairs of the publish's tracks. */
  #recordPairs: UdpPortPair[] = [];
  #lastActivityMs = performance.now();
  /** Digest nonce of this connection. */
  readonly #nonce = crypto.randomUUID().replaceAll("-", "");
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
    const { auth } = this.#deps;
    const authorized = !auth.enabled || request.method === "OPTIONS" ||
      auth.check(request.headers.get("authorization"), request.method, this.#nonce);
    const reply = authorized ? await this.#handle(request) : {
      status: 401,
      headers: auth.challenges(this.#nonce).map((c): [string, string] => ["WWW-Authenticate", c]),
    };
    const headers: [string, string][] = [["Server", rtspServerName]];
    if (this.#id !== undefined && reply.status < 300) {
      headers.push(["Session", `${this.#id};timeout=${this.#timeoutSec}`]);
    }
    return { ...reply, headers: [...headers, ...(reply.headers ?? [])] };
  }

  interleaved(frame: InterleavedFrame): void {
    this.#touch();
    const target = this.#recordChannels.get(frame.channel);
    if (!target || this.#state !== "recording") return;
    if (target.rtcp) this.#record?.rtcp(target.track, frame.data);
    else this.#record?.rtp(target.track, frame.data);
  }

  async closed(): Promise<void> {
    clearInterval(this.#timer);
    await this.#play?.close();
    this.#play = undefined;
    await this.#endRecord();
  }

  /** Ends the publish: its stream, its sockets. */
  async #endRecord(): Promise<void> {
    const record = this.#record;
    this.#record = undefined;
    this.#recordChannels.clear();
    const pairs = this.#recordPairs;
    this.#recordPairs = [];
    if (record) {
      record.stream.end();
      this.#deps.streams.remove(record.stream);
    }
    await Promise.all(pairs.map((p) => p.close()));
  }

  #touch(): void {
    this.#lastActivityMs = performance.now();
  }

  #checkTimeout(): void {
    // Over TCP the connection is the session: a dead client is found by the write timeout.
    const streaming = this.#play?.playing || this.#state === "recording";
    if (streaming && !this.#usesUdp) return;
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
      case "ANNOUNCE":
        return this.#announce(request);
      case "RECORD":
        return this.#startRecord();
    }
  }

  /** The published stream `name`, if there is one. */
  #stream(name: string): Stream | undefined {
    const stream = this.#deps.streams.published(name);
    return stream instanceof Stream && !stream.ended ? stream : undefined;
  }

  async #describe(request: RtspServerRequest): Promise<RtspReply> {
    const accept = request.headers.get("accept");
    if (accept !== undefined && !/application\/sdp|\*\/\*/i.test(accept)) return { status: 400 };
    const { name } = parseTarget(request.url);
    // Through the CDN's gate: the viewer's key (`?aclAuth=` by default) checked, a stream of
    // another node pulled here.
    const key = new URL(request.url).searchParams.get(this.#deps.aclPropertyName) ?? undefined;
    try {
      await this.#deps.streams.open(name, key);
    } catch (err) {
      if (err instanceof MediaServerError) return { status: err.status };
      throw err;
    }
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

  #announce(request: RtspServerRequest): RtspReply {
    if (this.#play || this.#record) return { status: 455 };
    const type = request.headers.get("content-type");
    if (type !== undefined && !/^application\/sdp\b/i.test(type)) return { status: 415 };
    const { name } = parseTarget(request.url);
    if (name === "") return { status: 400 };
    if (this.#deps.streams.published(name)) return { status: 409 };
    try {
      this.#record = new RtspRecord(
        name,
        request.url.replace(/[?#].*$/, ""),
        new TextDecoder().decode(request.body),
        () => this.#conn.close(),
        this.#deps.log,
      );
    } catch (err) {
      if (!(err instanceof ParseError)) throw err;
      this.#deps.log.info("rtsp announce refused", { stream: name, reason: err.message });
      return { status: 400 };
    }
    this.#newSessionId();
    return { status: 200 };
  }

  async #setupRecord(record: RtspRecord, request: RtspServerRequest): Promise<RtspReply> {
    const track = record.trackFor(request.url.replace(/[?#].*$/, ""));
    if (track === undefined) return { status: 404 };
    const requested = pickTransport(request.headers.get("transport") ?? "");
    if (!requested) return { status: 461 };
    if (requested.protocol === "tcp") {
      const taken = [...this.#recordChannels.keys()];
      let channels = requested.interleaved;
      if (!channels) {
        let first = 0;
        while (taken.includes(first) || taken.includes(first + 1)) first += 2;
        channels = [first, first + 1];
      }
      if (taken.includes(channels[0]) || taken.includes(channels[1])) return { status: 461 };
      this.#recordChannels.set(channels[0], { track, rtcp: false });
      this.#recordChannels.set(channels[1], { track, rtcp: true });
      const answer = formatServerTransport({ protocol: "tcp", interleaved: channels });
      return { status: 200, headers: [["Transport", answer]] };
    }
    let pair: UdpPortPair;
    try {
      pair = await UdpPortPair.open(this.#deps.udp);
    } catch (err) {
      this.#deps.log.warn("rtsp setup without a UDP port pair", { err });
      return { status: 503 };
    }
    this.#recordPairs.push(pair);
    pair.listen(
      this.#conn.remoteAddress,
      (data) => {
        if (this.#state === "recording") record.rtp(track, data);
      },
      (data) => {
        this.#touch();
        if (this.#state === "recording") record.rtcp(track, data);
      },
    );
    this.#usesUdp = true;
    const answer = formatServerTransport({
      protocol: "udp",
      clientPorts: requested.clientPorts,
      serverPorts: [pair.rtpPort, pair.rtpPort + 1],
    });
    return { status: 200, headers: [["Transport", answer]] };
  }

  #startRecord(): RtspReply {
    const record = this.#record;
    if (!record) return { status: 455 };
    if (this.#state === "recording") return { status: 200 };
    try {
      this.#deps.streams.add(record.stream);
    } catch (err) {
      if (err instanceof ConflictError) return { status: 409 };
      if (err instanceof ServiceUnavailableError) return { status: 503 };
      throw err;
    }
    this.#deps.log.info("rtsp publisher recording", { stream: record.stream.name });
    return { status: 200 };
  }

  #newSessionId(): void {
    this.#id ??= [...crypto.getRandomValues(new Uint8Array(8))]
      .map((b) => b.toString(16).padStart(2, "0")).join("");
  }

  async #setup(request: RtspServerRequest): Promise<RtspReply> {
    if (this.#record) return this.#setupRecord(this.#record, request);
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
    this.#newSessionId();
    return { status: 200, headers: [["Transport", answer]] };
  }

  #startPlay(): RtspReply {
    const play = this.#play;
    if (!play || this.#record) return { status: 455 };
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
    await this.#endRecord();
    this.#usesUdp = false;
    const reply: RtspReply = { status: 200 };
    // The Session header goes on the answer, then the session is gone.
    const id = this.#id;
    this.#id = undefined;
    return id === undefined ? reply : { ...reply, headers: [["Session", id]] };
  }
}
