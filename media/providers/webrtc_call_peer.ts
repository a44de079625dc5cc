/**
 * The browser's side of a SIP call: one werift peer, sendrecv. What the browser sends (its
 * microphone in Opus, its camera) becomes a Stream (`received`, a WebRtcPublisher reading this
 * peer's transceivers), and a given Stream is sent to the browser (`play`): its audio as Opus
 * (through the shared conversion when it is G.711 or another codec), its video when the
 * negotiated codec is the stream's own. The peer answers the browser's offer (outgoing calls)
 * or makes the offer itself (incoming calls, whose answer comes later with `answer`). What
 * the browser hears goes through the send engine once DTLS is up, when the server runs one and
 * the peer is on the ICE mux (werift's path otherwise).
 */
import type { RTCRtpTransceiver } from "werift";
import { ParseError } from "../../core/errors.ts";
import type { Logger } from "../../core/log.ts";
import type { CodecEngine } from "../engine/engine.ts";
import { convertedAudio } from "../engine/audio_conversion.ts";
import {
  type NegotiatedCodec,
  pickPublishCodec,
  serverOfferCodecs,
} from "../protocols/webrtc/codecs.ts";
import { Peer, type PeerAddress } from "../protocols/webrtc/peer.ts";
import { parseOfferMedia } from "../protocols/webrtc/sdp.ts";
import type { EngineSendPaths } from "../protocols/webrtc/engine_send_path.ts";
import { FrameSender } from "../publishers/webrtc_frame_sender.ts";
import type { Stream } from "../stream.ts";
import { WebRtcPublisher } from "./webrtc_publisher.ts";

/** Time the browser has to connect once both descriptions are set, in milliseconds. */
export const callConnectTimeoutMs = 15_000;

/** What a call peer is built from. */
export interface WebRtcCallPeerOptions {
  callId: string;
  /** sessionId of the Web SDK session of the call. */
  sessionId: string;
  appKey: string;
  nodeId: string;
  address: PeerAddress;
  /** Engine of the Opus conversion of what the browser hears. */
  engine: CodecEngine;
  /** The server's send engine: sends what the browser hears when the peer is on the mux. */
  sendPaths?: EngineSendPaths;
  log: Logger;
  /** Called once when the browser cannot be reached (ICE or DTLS failure, connect timeout). */
  onFailed: (info: string) => void;
}

/** A sendrecv WebRTC peer of one SIP call. */
export class WebRtcCallPeer {
  readonly callId: string;
  readonly #options: WebRtcCallPeerOptions;
  #peer?: Peer;
  #received?: WebRtcPublisher;
  #connected = false;
  #closed = false;
  #timer?: ReturnType<typeof setTimeout>;
  /** What the browser hears, and its sender once the peer is connected. */
  #source?: Stream;
  #sender?: FrameSender;

  constructor(options: WebRtcCallPeerOptions) {
    this.#options = options;
    this.callId = options.callId;
  }

  /** What the browser sends, as a Stream (set by `answer` or `offer`). */
  get received(): Stream | undefined {
    return this.#received;
  }

  /** True once ICE and DTLS are up (the SRTP keys exist). */
  get connected(): boolean {
    return this.#connected;
  }

  /** True when the peer has a video m-line with a codec (the call has video). */
  get hasVideo(): boolean {
    return this.#received?.tracks.some((t) => t.kind === "video") ?? false;
  }

  /**
   * Answers the browser's offer (an outgoing call). A malformed offer, or one without Opus
   * audio, is a ParseError; a full media port range a ServiceUnavailableError.
   */
  async answer(offerSdp: string): Promise<string> {
    const media = parseOfferMedia(offerSdp);
    const codecs = media.map(pickPublishCodec);
    if (!codecs.some((c) => c?.kind === "audio")) {
      throw new ParseError("the call's offer has no Opus audio");
    }
    const peer = this.#open(codecs.filter((c) => c !== undefined));
    const sdp = await peer.answer(offerSdp, () => {
      const transceivers = peer.pc.getTransceivers();
      for (const transceiver of transceivers) this.#prepare(transceiver);
      this.#received!.receiveOn(transceivers);
    });
    this.#startConnectTimer();
    return sdp;
  }

  /** Makes the offer of an incoming call: Opus, and H.264 when `video`. */
  async offer(video: boolean): Promise<string> {
    const peer = this.#open(serverOfferCodecs(video));
    return await peer.offer(() => {
      peer.pc.addTransceiver("audio", { direction: "sendrecv" });
      if (video) peer.pc.addTransceiver("video", { direction: "sendrecv" });
      const transceivers = peer.pc.getTransceivers();
      for (const transceiver of transceivers) this.#prepare(transceiver);
      this.#received!.receiveOn(transceivers);
    });
  }

  /** Applies the browser's answer to `offer` (a malformed one is a ParseError). */
  async acceptAnswer(answerSdp: string): Promise<void> {
    if (!this.#peer) throw new Error("acceptAnswer before offer");
    await this.#peer.acceptAnswer(answerSdp);
    this.#startConnectTimer();
  }

  /**
   * Sends `source` to the browser from now on (undefined: nothing). Before the peer is
   * connected it waits for the connection.
   */
  play(source: Stream | undefined): void {
    if (source === this.#source || this.#closed) return;
    this.#source = source;
    void this.#sender?.stop();
    this.#sender = undefined;
    if (this.#connected && source) this.#send(source);
  }

  /** Stops sending and receiving and closes the peer (idempotent). */
  async close(): Promise<void> {
    if (this.#closed) return;
    this.#closed = true;
    clearTimeout(this.#timer);
    await this.#sender?.stop();
    this.#sender = undefined;
    await this.#received?.terminate("Stopped by call end");
    await this.#peer?.close();
  }

  /** The peer with its codecs, and the publisher that reads it. */
  #open(codecs: NegotiatedCodec[]): Peer {
    if (this.#peer) throw new Error("the call's peer is negotiated already");
    const o = this.#options;
    const peer = new Peer(o.address, codecs);
    this.#peer = peer;
    this.#received = new WebRtcPublisher({
      name: o.callId,
      mediaSessionId: o.callId,
      sessionId: o.sessionId,
      appKey: o.appKey,
      nodeId: o.nodeId,
      clientStream: {},
      sdp: "",
      codecs,
      address: o.address,
      // The call reports its own statuses; the browser's media has none of its own.
      client: { status: () => {}, event: () => {} },
      log: o.log,
      peer,
    });
    // At DTLS, not at werift's "connected" (which may come at ICE): the send engine takes
    // the SRTP keys, and a track attached before them would stay on werift's path.
    peer.onMediaReady(() => this.#onConnected());
    peer.onFailed((phase, diagnostics) => {
      const info = phase === "dtls" ? "Failed by DTLS error" : "Failed by ICE error";
      o.log.info("WebRTC call peer failed", { callId: o.callId, info, diagnostics });
      this.#fail(info);
    });
    return peer;
  }

  #prepare(transceiver: RTCRtpTransceiver): void {
    transceiver.setDirection("sendrecv");
    // a=msid lets the browser put the tracks into one MediaStream (ontrack streams[0]).
    transceiver.sender.streamId = this.callId;
  }

  #startConnectTimer(): void {
    if (this.#connected) return;
    this.#timer = setTimeout(() => this.#fail("Failed by ICE timeout"), callConnectTimeoutMs);
  }

  #fail(info: string): void {
    if (this.#closed) return;
    clearTimeout(this.#timer);
    this.#options.onFailed(info);
  }

  #onConnected(): void {
    if (this.#connected || this.#closed) return;
    this.#connected = true;
    clearTimeout(this.#timer);
    if (this.#source) this.#send(this.#source);
  }

  /** Starts sending `source` through the transceivers whose codec it has. */
  #send(source: Stream): void {
    const audio = source.tracks.find((t) => t.kind === "audio");
    const o = this.#options;
    const frames = audio && audio.codec !== "OPUS"
      ? convertedAudio(source, "OPUS", o.engine, o.log)
      : source;
    // The engine sends from the ICE mux's socket: a peer on ports of its own keeps werift.
    const sender = new FrameSender(frames, o.address.mux ? o.sendPaths : undefined);
    for (const transceiver of this.#peer!.pc.getTransceivers()) {
      const codec = transceiver.sender.codec?.name.toUpperCase();
      const track = frames.tracks.find((t) => t.kind === transceiver.kind);
      if (track && track.codec === codec) sender.attach(transceiver);
    }
    sender.start();
    this.#sender = sender;
  }
}
