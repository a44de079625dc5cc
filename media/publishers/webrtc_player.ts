/**
 * A browser playing a WebRTC-published stream: one peer connection whose senders forward the
 * publisher's packets through one send path per track. Keyframe requests and NACKs of the
 * browser go to the publisher (which owns the packet cache).
 */
import type { RTCRtpSender, RTCRtpTransceiver } from "werift";
import { GenericNack } from "werift";
import type { RegisteredStream, StreamRecord } from "../stream_record.ts";
import { finalStatus, type StreamClient } from "../protocols/webrtc/client.ts";
import type { NegotiatedCodec } from "../protocols/webrtc/codecs.ts";
import { Peer, type PeerAddress } from "../protocols/webrtc/peer.ts";
import type { TrickleCandidate } from "../protocols/webrtc/sdpfrag.ts";
import { RetransmitBudget } from "../protocols/webrtc/retransmit_budget.ts";
import { type RtpSendPath, WeriftSendPath } from "../protocols/webrtc/send_path.ts";
import { EngineSendPath, type EngineSendPaths } from "../protocols/webrtc/engine_send_path.ts";
import { dropRtpProtection } from "../protocols/webrtc/werift_trim.ts";
import type { WebRtcPublisher } from "../providers/webrtc_publisher.ts";

/** Time the browser has to connect, in milliseconds. */
export const playConnectTimeoutMs = 15_000;

/** What a player is built from. */
export interface WebRtcPlayerOptions {
  publisher: WebRtcPublisher;
  mediaSessionId: string;
  sessionId: string;
  appKey: string;
  nodeId: string;
  /** The stream object the client sent, without `sdp`. */
  clientStream: Record<string, unknown>;
  sdp: string;
  /** The player's codec for each offered m-line, in offer order (publisher's codec). */
  codecs: NegotiatedCodec[];
  address: PeerAddress;
  client: StreamClient;
  /** The server's send engine: once connected, media goes through it when it is started. */
  sendPaths?: EngineSendPaths;
}

/** A WebRTC play of a published stream. */
export class WebRtcPlayer implements RegisteredStream {
  readonly mediaSessionId: string;
  readonly name: string;
  readonly published = false;
  readonly publisher: WebRtcPublisher;
  readonly sessionId: string;
  readonly createDate = Date.now();
  readonly #options: WebRtcPlayerOptions;
  readonly #peer: Peer;
  readonly #paths: { kind: "audio" | "video"; path: RtpSendPath }[] = [];
  #status: "PENDING" | "PLAYING" | "ENDED" = "PENDING";
  #timer?: ReturnType<typeof setTimeout>;

  constructor(options: WebRtcPlayerOptions) {
    this.#options = options;
    this.publisher = options.publisher;
    this.mediaSessionId = options.mediaSessionId;
    this.name = options.publisher.name;
    this.sessionId = options.sessionId;
    this.#peer = new Peer(options.address, options.codecs);
  }

  /**
   * Answers the offer; forwarding and the PLAYING status start once the peer's media is ready
   * (DTLS connected: the keys the send engine takes exist, so a player on the engine always
   * gets the engine's path).
   */
  async answer(): Promise<string> {
    const pc = this.#peer.pc;
    this.publisher.addPlayer(this);
    this.#peer.onMediaReady(() => this.#connected());
    pc.connectionStateChange.subscribe((state) => {
      if (state === "failed") {
        void this.terminate(
          this.#status === "PLAYING" ? "Failed by ICE keep alive" : "Failed by ICE error",
        );
      }
    });
    const answer = await this.#peer.answer(this.#options.sdp, () => {
      for (const transceiver of pc.getTransceivers()) {
        transceiver.setDirection("sendonly");
        // a=msid lets the browser put the tracks into one MediaStream (ontrack streams[0]).
        transceiver.sender.streamId = this.mediaSessionId;
      }
    });
    this.#timer = setTimeout(
      () => void this.terminate("Failed by ICE timeout"),
      playConnectTimeoutMs,
    );
    return answer;
  }

  /** Adds candidates the client trickled (WHIP/WHEP PATCH). */
  addRemoteCandidates(candidates: readonly TrickleCandidate[]): Promise<void> {
    return this.#peer.addRemoteCandidates(candidates);
  }

  /** Ends the play because the publisher stopped (called by the publisher). */
  stop(info: string): Promise<void> {
    return this.terminate(info);
  }

  /** Ends the play: detaches, closes the peer, reports the final status. */
  async terminate(info: string): Promise<void> {
    if (this.#status === "ENDED") return;
    this.#status = "ENDED";
    clearTimeout(this.#timer);
    for (const { path } of this.#paths) {
      this.publisher.detachPath(path);
      if (path instanceof EngineSendPath) path.close();
    }
    this.#paths.length = 0;
    this.publisher.removePlayer(this);
    await this.#peer.close();
    this.#options.client.status(finalStatus(info, "STOPPED"), info, this.#muteFields());
  }

  /** Delivers a stream event of the publisher to this player's client. */
  event(event: Record<string, unknown>): void {
    if (this.#status !== "ENDED") this.#options.client.event(event);
  }

  /** True while the player receives media. */
  get playing(): boolean {
    return this.#status === "PLAYING";
  }

  /** Packets sent to this player, all tracks. */
  get packetsSent(): number {
    return this.#paths.reduce((n, p) => n + p.path.packets, 0);
  }

  /** Packets this player lost on the server (socket buffer full, or too many in flight). */
  get packetsDropped(): number {
    return this.#paths.reduce((n, p) => n + p.path.dropped, 0);
  }

  record(options: { metrics?: boolean } = {}): StreamRecord {
    const source = this.publisher.record(options);
    const client = this.#options.clientStream;
    return {
      ...source,
      custom: (client.custom as Record<string, unknown> | undefined) ?? {},
      appKey: this.#options.appKey,
      sessionId: this.sessionId,
      mediaSessionId: this.mediaSessionId,
      published: false,
      hasVideo: this.#options.codecs.some((c) => c.kind === "video"),
      hasAudio: this.#options.codecs.some((c) => c.kind === "audio"),
      status: this.#status === "ENDED" ? "STOPPED" : this.#status,
      sdp: this.#options.sdp,
      info: null,
      record: false,
      recordName: null,
      cvoExtension: client.cvoExtension === true,
      createDate: this.createDate,
      transport: this.#peer.transport === "tcp" ? "TCP" : "UDP",
      mediaType: "play",
      parentMediaSessionId: this.publisher.mediaSessionId,
    };
  }

  #connected(): void {
    if (this.#status !== "PENDING") return;
    clearTimeout(this.#timer);
    for (const transceiver of this.#peer.pc.getTransceivers()) this.#attach(transceiver);
    // With every track on the engine werift protects no RTP for this player: its SRTP
    // session (not SRTCP) is memory nothing uses.
    if (this.#paths.length > 0 && this.#paths.every(({ path }) => path instanceof EngineSendPath)) {
      for (const transport of this.#peer.pc.dtlsTransports) dropRtpProtection(transport);
    }
    this.#status = "PLAYING";
    this.#options.client.status("PLAYING", "", this.#muteFields());
  }

  #attach(transceiver: RTCRtpTransceiver): void {
    const kind = transceiver.kind as "audio" | "video";
    const sender: RTCRtpSender = transceiver.sender;
    const codec = sender.codec;
    if (!codec) return;
    // After the DTLS handshake (the peer's media is ready) the keys are known: the engine
    // takes the media when it runs; werift keeps RTCP either way.
    const group = this.publisher.engineGroup(kind);
    const path: RtpSendPath =
      (group && this.#options.sendPaths?.open(sender, codec.payloadType, group)) ||
      new WeriftSendPath(sender, codec.payloadType);
    this.#paths.push({ kind, path });
    sender.onPictureLossIndication.subscribe(() => this.publisher.requestKeyframe());
    const budget = new RetransmitBudget();
    sender.onGenericNack.subscribe((nack: GenericNack) =>
      this.publisher.retransmit(kind, path, nack.lost, budget)
    );
    sender.onRtcp.subscribe((rtcp) => {
      // FIR (RFC 5104, PSFB format 4) asks for a keyframe like PLI; werift leaves it to us.
      if (rtcp.type === 206 && (rtcp as { feedback?: { count?: number } }).feedback?.count === 4) {
        this.publisher.requestKeyframe();
      }
    });
    this.publisher.attachPath(kind, path);
  }

  #muteFields(): Record<string, unknown> {
    return {
      audioState: { ...this.publisher.audioState },
      videoState: { ...this.publisher.videoState },
    };
  }
}
