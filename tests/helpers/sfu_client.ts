/**
 * An SFU SDK participant for fast tests: the SDK's messages (connection with appKey sfuApp,
 * joinRoom, updateRoomState, leaveRoom, ...) from a werift peer that publishes synthetic
 * H.264 (640x480 parameter sets each frame, 25 fps) and Opus, and handles server offers as
 * room.ts of the SDK does (a crossing offer of its own is rolled back, then sent again).
 */
import {
  MediaStreamTrack,
  type MediaStreamTrack as RemoteTrack,
  type RTCDataChannel,
  RTCPeerConnection,
  RTCRtpCodecParameters,
  RtpHeader,
  RtpPacket,
  useAbsSendTime,
  useSdesMid,
  useSdesRTPStreamId,
  useTransportWideCC,
} from "werift";
import { Buffer } from "node:buffer";
import type { Config } from "../../config.ts";
import { openPeerCount } from "../../media/protocols/webrtc/peer.ts";
import { waitFor } from "./media_fixtures.ts";
import { startTestServer, type TestServer } from "./test_server.ts";
import { WcsClient } from "./wcs_client.ts";
import { closeUdpWhenGathered, tcpClientIce } from "../webrtc_helpers.ts";

const sps = [0x67, 0x42, 0xc0, 0x1e, 0xda, 0x02, 0x80, 0xf6, 0x40];
const pps = [0x68, 0xce, 0x3c, 0x80];
/** A STAP-A with the SPS and PPS: a keyframe of 640x480 as the server's meter sees it. */
const keyPayload = Buffer.from([24, 0, sps.length, ...sps, 0, pps.length, ...pps]);
const opusPayload = Buffer.alloc(120, 0xfc);

/** An sfuCallback event. */
export type SfuEvent = Record<string, unknown> & { type: string };

/** Options of a participant. */
export interface SfuClientOptions {
  /** Publish video and audio at join (default true). */
  publish?: boolean;
}

/** One participant: its signaling connection, its peer and what it received. */
export class SfuClient {
  readonly ws: WcsClient;
  readonly nickname: string;
  readonly pc: RTCPeerConnection;
  readonly events: SfuEvent[] = [];
  /** RTP packets received, by mid of this peer. */
  readonly received = new Map<string, number>();
  /** Chat messages received on the control channel. */
  readonly chat: Record<string, unknown>[] = [];
  readonly control: RTCDataChannel;
  room = "";
  pin = "";
  /** Server offers that crossed an offer of this client (rolled back and sent again). */
  glares = 0;
  /** Server offers are kept unapplied until `releaseOffers` (to make glare happen). */
  holdOffers = false;
  #held: SfuEvent[] = [];
  #localTid = "";
  #tracks: MediaStreamTrack[] = [];
  #timer?: ReturnType<typeof setInterval>;
  #chain: Promise<void> = Promise.resolve();
  #pump: Promise<void>;
  #wake?: () => void;

  private constructor(
    ws: WcsClient,
    nickname: string,
    simulcast: boolean,
    absSendTime: boolean,
    tcp: boolean,
  ) {
    this.ws = ws;
    this.nickname = nickname;
    this.pc = new RTCPeerConnection({
      iceServers: [],
      ...(tcp ? tcpClientIce() : {}),
      codecs: {
        video: [
          new RTCRtpCodecParameters({
            mimeType: "video/H264",
            clockRate: 90000,
            payloadType: 102,
            rtcpFeedback: [{ type: "nack" }, { type: "nack", parameter: "pli" }],
            parameters: "level-asymmetry-allowed=1;packetization-mode=1;profile-level-id=42e01f",
          }),
        ],
        audio: [
          new RTCRtpCodecParameters({
            mimeType: "audio/opus",
            clockRate: 48000,
            channels: 2,
            payloadType: 111,
          }),
        ],
      },
      // A simulcast publisher's layers are told apart by their rid header extension.
      headerExtensions: {
        video: [
          ...(simulcast ? [useSdesMid(), useSdesRTPStreamId()] : []),
          ...(absSendTime ? [useAbsSendTime()] : []),
        ],
        audio: [],
      },
    });
    if (tcp) closeUdpWhenGathered(this.pc);
    this.pc.onTrack.subscribe((track: RemoteTrack) => {
      const transceiver = this.pc.getTransceivers().find((t) => t.receiver.tracks.includes(track));
      const mid = transceiver?.mid ?? "?";
      track.onReceiveRtp.subscribe(() => {
        this.received.set(mid, (this.received.get(mid) ?? 0) + 1);
      });
    });
    this.control = this.pc.createDataChannel("control");
    this.control.onMessage.subscribe((data) => {
      this.chat.push(JSON.parse(typeof data === "string" ? data : data.toString()));
      this.#wake?.();
    });
    this.#pump = this.#read();
  }

  /**
   * Connects as the SDK does: appKey sfuApp, `authToken: null`, custom nickname and room.
   * `autoPong: false` makes a client whose network went silent; `simulcast` negotiates the
   * mid and rid header extensions a simulcast transceiver needs; `absSendTime` takes the
   * server's abs-send-time stamps (a browser's receive-side estimator needs them); `transport`
   * goes in the connection's custom fields (the server's ICE-TCP choice); `blockUdp` (default:
   * `transport` is "TCP") makes the peer a client whose network blocks UDP, on ICE-TCP only.
   */
  static async connect(
    url: string,
    nickname: string,
    room: string,
    options: {
      autoPong?: boolean;
      simulcast?: boolean;
      absSendTime?: boolean;
      transport?: "TCP" | "UDP";
      blockUdp?: boolean;
    } = {},
  ): Promise<SfuClient> {
    const { client } = await WcsClient.connect(url, {
      appKey: "sfuApp",
      mediaProviders: ["WebRTC"],
      keepAlive: true,
      authToken: null,
      clientVersion: "0.5.28",
      clientOSVersion: "5.0 (X11)",
      clientBrowserVersion: "sfu_client (Deno)",
      custom: {
        nickname,
        roomName: room,
        ...(options.transport ? { transport: options.transport } : {}),
      },
    }, { autoPong: options.autoPong });
    return new SfuClient(
      client,
      nickname,
      options.simulcast ?? false,
      options.absSendTime ?? false,
      options.blockUdp ?? options.transport === "TCP",
    );
  }

  /**
   * Offers VP8 (payload type 96, NACK and PLI) as the one video codec instead of H.264: call
   * before any video transceiver is added (`addMedia`'s synthetic video is H.264).
   */
  offerVp8(): void {
    this.pc.config.codecs.video = [
      new RTCRtpCodecParameters({
        mimeType: "video/VP8",
        clockRate: 90000,
        payloadType: 96,
        rtcpFeedback: [{ type: "nack" }, { type: "nack", parameter: "pli" }],
      }),
    ];
  }

  /**
   * Takes the server's transport-wide sequence numbers (transport-cc) on the video it
   * receives: call before joining. werift's receivers then send transport feedback of their
   * own, which werift 0.25 writes with a short length (see sfu_transport_cc_test.ts).
   */
  takeTransportCc(): void {
    this.pc.config.headerExtensions.video = [
      ...(this.pc.config.headerExtensions.video ?? []),
      useTransportWideCC(),
    ];
  }

  /** Adds sendonly video (content camera) and audio (content mic) and starts sending. */
  addMedia(): void {
    for (const kind of ["video", "audio"] as const) {
      const track = new MediaStreamTrack({ kind });
      this.pc.addTransceiver(track, { direction: "sendonly" });
      this.#tracks.push(track);
    }
    if (this.#timer) return;
    let frame = 0;
    const ssrcSeq = new Map<MediaStreamTrack, number>();
    this.#timer = setInterval(() => {
      frame++;
      for (const track of this.#tracks) {
        const video = track.kind === "video";
        const seq = ((ssrcSeq.get(track) ?? 0) + 1) & 0xffff;
        ssrcSeq.set(track, seq);
        const header = new RtpHeader({
          payloadType: video ? 102 : 111,
          sequenceNumber: seq,
          timestamp: video ? frame * 3600 : frame * 1920,
          marker: true,
        });
        track.writeRtp(new RtpPacket(header, video ? keyPayload : opusPayload));
      }
    }, 40);
  }

  /** The offer as the SDK makes it: a=content after each a=msid, sendrecv made sendonly. */
  async #offer(): Promise<string> {
    const offer = await this.pc.createOffer();
    await this.pc.setLocalDescription(offer);
    const sdp = this.pc.localDescription!.sdp;
    const lines: string[] = [];
    let kind = "";
    for (const line of sdp.split("\r\n")) {
      if (line.startsWith("m=")) kind = line.slice(2).split(" ")[0];
      lines.push(line);
      // werift writes no a=msid; the browser's is `a=msid:<stream id> <track id>`.
      const mid = line.startsWith("a=mid:") ? line.slice(6) : undefined;
      const sending = this.pc.getTransceivers().find((t) => t.mid === mid && t.sender.track);
      if (mid === undefined || !sending || kind === "application") continue;
      lines.push(`a=msid:${this.nickname} ${sending.sender.track!.id}`);
      lines.push(`a=content:${kind === "video" ? "camera" : "mic"}`);
    }
    return lines.join("\r\n").replace(/a=sendrecv/g, "a=sendonly");
  }

  /** Sends joinRoom with an offer (or `sdp` as given) and returns its internalMessageId. */
  async sendJoin(room: string, pin: string, sdp?: string): Promise<string> {
    this.room = room;
    this.pin = pin;
    const internalMessageId = crypto.randomUUID();
    this.#localTid = crypto.randomUUID();
    this.ws.send("joinRoom", {
      id: room,
      pin,
      sdp: sdp ?? await this.#offer(),
      nickname: this.nickname,
      internalMessageId,
      sdpType: "offer",
      tid: this.#localTid,
    });
    return internalMessageId;
  }

  /** Joins and waits for JOINED (throws with OPERATION_FAILED's error). */
  async join(room: string, pin: string): Promise<SfuEvent> {
    const id = await this.sendJoin(room, pin);
    return await this.result(id, "JOINED");
  }

  /** Sends updateRoomState with a new offer (tracks added after joining). */
  async updateState(): Promise<string> {
    const internalMessageId = crypto.randomUUID();
    await this.#serial(async () => {
      this.#localTid = crypto.randomUUID();
      this.ws.send("updateRoomState", {
        id: this.room,
        pin: this.pin,
        sdp: await this.#offer(),
        internalMessageId,
        sdpType: "offer",
        tid: this.#localTid,
      });
    });
    return internalMessageId;
  }

  /** Sends `message` with `payload`, adding an internalMessageId; returns the id. */
  request(message: string, payload: Record<string, unknown>): string {
    const internalMessageId = crypto.randomUUID();
    this.ws.send(message, { ...payload, internalMessageId });
    return internalMessageId;
  }

  /** The event answering `internalMessageId`: `type`, or a thrown OPERATION_FAILED error. */
  async result(internalMessageId: string, type: string, timeoutMs = 10_000): Promise<SfuEvent> {
    const event = await this.waitFor(
      (e) => e.internalMessageId === internalMessageId,
      timeoutMs,
    );
    if (event.type === "OPERATION_FAILED") {
      throw new Error(`${event.operation}: ${event.error}`);
    }
    if (event.type !== type) throw new Error(`expected ${type}, got ${event.type}`);
    return event;
  }

  /** The first event (received so far or later) matching `match`. */
  async waitFor(match: (e: SfuEvent) => boolean, timeoutMs = 10_000): Promise<SfuEvent> {
    const deadline = Date.now() + timeoutMs;
    for (;;) {
      const found = this.events.find(match);
      if (found) return found;
      await this.#sleepUntil(deadline, () => `no matching event within ${timeoutMs} ms`);
    }
  }

  /** Waits until `check` holds (re-checked on every event, chat message and 100 ms). */
  async until(check: () => boolean, what: string, timeoutMs = 15_000): Promise<void> {
    const deadline = Date.now() + timeoutMs;
    while (!check()) {
      await this.#sleepUntil(deadline, () => `${what}: not within ${timeoutMs} ms`, 100);
    }
  }

  /** Applies the server offers held by `holdOffers`, and those to come. */
  releaseOffers(): void {
    this.holdOffers = false;
    for (const event of this.#held.splice(0)) void this.#serial(() => this.#remoteSdp(event));
  }

  /** Stops sending and closes the peer and the socket. */
  async close(): Promise<void> {
    clearInterval(this.#timer);
    await this.pc.close();
    await this.ws.close();
    await this.#pump;
  }

  async #sleepUntil(deadline: number, message: () => string, maxMs = 60_000): Promise<void> {
    const left = deadline - Date.now();
    if (left <= 0) throw new Error(message());
    let timer: ReturnType<typeof setTimeout> | undefined;
    await new Promise<void>((resolve) => {
      this.#wake = resolve;
      timer = setTimeout(resolve, Math.min(left, maxMs));
    });
    clearTimeout(timer);
  }

  #serial(step: () => Promise<void>): Promise<void> {
    const run = this.#chain.then(step);
    this.#chain = run.catch(() => {});
    return run;
  }

  async #read(): Promise<void> {
    for (;;) {
      let data: unknown[];
      try {
        data = await this.ws.next("sfuCallback", 3_600_000);
      } catch {
        this.#wake?.();
        return;
      }
      const event = data[0] as SfuEvent;
      this.events.push(event);
      const offer = event.type === "REMOTE_SDP" &&
        (event.info as { type: string }).type === "offer";
      if (offer && this.holdOffers) this.#held.push(event);
      else if (event.type === "REMOTE_SDP") void this.#serial(() => this.#remoteSdp(event));
      this.#wake?.();
    }
  }

  /** REMOTE_SDP as room.ts of the SDK handles it. */
  async #remoteSdp(event: SfuEvent): Promise<void> {
    const info = event.info as { sdp: string; type: "offer" | "answer"; tid: string };
    if (info.type === "answer") {
      if (this.pc.signalingState !== "have-local-offer" || info.tid !== this.#localTid) return;
      await this.pc.setRemoteDescription({ type: "answer", sdp: info.sdp });
      return;
    }
    // werift rolls a pending local offer back itself when a remote offer is applied.
    const reOffer = this.pc.signalingState === "have-local-offer";
    await this.pc.setRemoteDescription({ type: "offer", sdp: info.sdp });
    const answer = await this.pc.createAnswer();
    await this.pc.setLocalDescription(answer);
    this.ws.send("updateRoomState", {
      id: this.room,
      pin: this.pin,
      sdp: this.pc.localDescription!.sdp.replace(/a=sendrecv/g, "a=sendonly"),
      tid: this.#localTid,
      sdpType: "answer",
    });
    if (!reOffer) return;
    this.glares++;
    this.ws.send("updateRoomState", {
      id: this.room,
      pin: this.pin,
      sdp: await this.#offer(),
      internalMessageId: "",
      sdpType: "offer",
      tid: this.#localTid,
    });
  }
}

/**
 * Runs `fn` with a server (of `config`, else a test config) and a list for its SFU
 * participants; closes them and the server after, then waits until no server peer is left.
 */
export async function withSfuServer(
  fn: (server: TestServer, clients: SfuClient[]) => Promise<void>,
  config?: Config,
): Promise<void> {
  const server = await startTestServer(config);
  const clients: SfuClient[] = [];
  try {
    await fn(server, clients);
  } finally {
    await Promise.allSettled(clients.map((c) => c.close()));
    await server.stop();
  }
  await waitFor("every server peer closed", () => openPeerCount() === 0 ? true : undefined);
}
