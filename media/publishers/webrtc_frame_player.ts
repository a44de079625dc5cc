/**
 * A browser playing a stream that did not come over WebRTC (RTSP, RTMP, VOD, ...): frames are
 * read from the stream (starting at a keyframe), packetized to RTP and sent through the
 * player's peer connection, with sender reports that put every track on the stream's common
 * timeline so the browser keeps audio and video in sync. Audio the browser cannot take is
 * read from the stream's shared Opus conversion instead (see engine/audio_conversion.ts).
 */
import type { RegisteredStream, StreamRecord } from "../stream_record.ts";
import { finalStatus, type StreamClient } from "../protocols/webrtc/client.ts";
import type { NegotiatedCodec } from "../protocols/webrtc/codecs.ts";
import { Peer, type PeerAddress } from "../protocols/webrtc/peer.ts";
import type { TrickleCandidate } from "../protocols/webrtc/sdpfrag.ts";
import type { Stream } from "../stream.ts";
import type { EngineSendPaths } from "../protocols/webrtc/engine_send_path.ts";
import { FrameSender } from "./webrtc_frame_sender.ts";
import { playConnectTimeoutMs } from "./webrtc_player.ts";

/** What a frame player is built from. */
export interface WebRtcFramePlayerOptions {
  /** The published stream (name, record, end). */
  source: Stream;
  /** What is read: `source`, or its audio conversion. */
  frames: Stream;
  mediaSessionId: string;
  sessionId: string;
  appKey: string;
  nodeId: string;
  /** The stream object the client sent, without `sdp`. */
  clientStream: Record<string, unknown>;
  sdp: string;
  /** The player's codec for each offered m-line it plays, in offer order. */
  codecs: NegotiatedCodec[];
  address: PeerAddress;
  client: StreamClient;
  /** The server's send engine: used once connected when started and the peer is on the mux. */
  sendPaths?: EngineSendPaths;
}

/** A WebRTC play of a stream made of MediaFrames. */
export class WebRtcFramePlayer implements RegisteredStream {
  readonly mediaSessionId: string;
  readonly name: string;
  readonly published = false;
  readonly sessionId: string;
  readonly createDate = Date.now();
  readonly source: Stream;
  readonly #options: WebRtcFramePlayerOptions;
  readonly #peer: Peer;
  readonly #sender: FrameSender;
  #status: "PENDING" | "PLAYING" | "ENDED" = "PENDING";
  #timer?: ReturnType<typeof setTimeout>;

  constructor(options: WebRtcFramePlayerOptions) {
    this.#options = options;
    this.source = options.source;
    this.mediaSessionId = options.mediaSessionId;
    this.name = options.source.name;
    this.sessionId = options.sessionId;
    this.#peer = new Peer(options.address, options.codecs);
    // The engine sends from the ICE mux's socket: a peer on a port of the range keeps werift.
    this.#sender = new FrameSender(
      options.frames,
      options.address.mux ? options.sendPaths : undefined,
    );
  }

  /**
   * Answers the offer; sending and the PLAYING status start once the peer's media is ready
   * (DTLS connected, as for WebRtcPlayer: werift's "connected" may come at ICE, before the
   * SRTP keys the send engine takes, and a track attached then would stay on werift's path).
   */
  async answer(): Promise<string> {
    const pc = this.#peer.pc;
    this.#peer.onMediaReady(() => this.#connected());
    pc.connectionStateChange.subscribe((state) => {
      if (state === "failed") {
        void this.terminate(
          this.#status === "PLAYING" ? "Failed by ICE keep alive" : "Failed by ICE error",
        );
      }
    });
    this.source.done.then(() => this.terminate("Stopped by publisher stop"));
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

  /** Ends the play: stops reading, closes the peer, reports the final status. */
  async terminate(info: string): Promise<void> {
    if (this.#status === "ENDED") return;
    this.#status = "ENDED";
    clearTimeout(this.#timer);
    await this.#sender.stop();
    await this.#peer.close();
    this.#options.client.status(finalStatus(info, "STOPPED"), info, muteFields(this.source));
  }

  /** Delivers a stream event (e.g. one sent by REST) to this player's client. */
  event(event: Record<string, unknown>): void {
    if (this.#status !== "ENDED") this.#options.client.event(event);
  }

  /** True while the player receives media. */
  get playing(): boolean {
    return this.#status === "PLAYING";
  }

  /** Packets sent to this player, all tracks. */
  get packetsSent(): number {
    return this.#sender.packetsSent;
  }

  /** Packets this player lost on the server (socket buffer full, or too many in flight). */
  get packetsDropped(): number {
    return this.#sender.packetsDropped;
  }

  record(options: { metrics?: boolean } = {}): StreamRecord {
    const source = this.source.record(options);
    const client = this.#options.clientStream;
    const audio = this.#options.codecs.find((c) => c.kind === "audio");
    return {
      ...source,
      custom: (client.custom as Record<string, unknown> | undefined) ?? {},
      nodeId: this.#options.nodeId,
      appKey: this.#options.appKey,
      sessionId: this.sessionId,
      mediaSessionId: this.mediaSessionId,
      published: false,
      hasVideo: this.#options.codecs.some((c) => c.kind === "video"),
      hasAudio: audio !== undefined,
      audioCodec: audio?.codec ?? "",
      status: this.#status === "ENDED" ? "STOPPED" : this.#status,
      sdp: this.#options.sdp,
      info: null,
      record: false,
      recordName: null,
      transport: this.#peer.transport === "tcp" ? "TCP" : "UDP",
      cvoExtension: client.cvoExtension === true,
      createDate: this.createDate,
      mediaType: "play",
      parentMediaSessionId: this.source.mediaSessionId,
    };
  }

  #connected(): void {
    if (this.#status !== "PENDING") return;
    clearTimeout(this.#timer);
    for (const transceiver of this.#peer.pc.getTransceivers()) this.#sender.attach(transceiver);
    this.#status = "PLAYING";
    this.#options.client.status("PLAYING", "", muteFields(this.source));
    this.#sender.start();
  }
}

/** The source's mute state, for status events (a player joining late learns it). */
function muteFields(source: Stream): Record<string, unknown> {
  return { audioState: { ...source.audioState }, videoState: { ...source.videoState } };
}
