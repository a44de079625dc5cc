/**
 * A local stream published to another server over WebRTC (a remote push): our werift peer
 * offers to send H.264 video and Opus audio (audio of another codec through the shared Opus
 * conversion), and once the remote's answer is applied and DTLS is up, the stream's frames go
 * out as RTP through the FrameSender: by the send engine when the server runs one and the
 * peer is on the ICE mux, by werift otherwise.
 */
import type { Logger } from "../../core/log.ts";
import { convertedAudio } from "../engine/audio_conversion.ts";
import type { CodecEngine } from "../engine/engine.ts";
import { serverOfferCodecs } from "../protocols/webrtc/codecs.ts";
import { Peer, type PeerAddress } from "../protocols/webrtc/peer.ts";
import type { EngineSendPaths } from "../protocols/webrtc/engine_send_path.ts";
import type { Stream } from "../stream.ts";
import { FrameSender } from "./webrtc_frame_sender.ts";

/** What a remote publish is built from. */
export interface RemotePublishOptions {
  /** The local stream sent. */
  source: Stream;
  /** Engine of the Opus conversion of audio of another codec. */
  engine: CodecEngine;
  address: PeerAddress;
  /** The server's send engine: sends the stream when the peer is on the ICE mux. */
  sendPaths?: EngineSendPaths;
  log: Logger;
  /** Called once when the peer fails (ICE or DTLS) after the answer was applied. */
  onFailed: (info: string) => void;
}

/** The sending peer of one remote publish. */
export class RemotePublish {
  /** The stream has video the remote takes as it is (H.264). */
  readonly hasVideo: boolean;
  /** The stream has audio (sent as Opus). */
  readonly hasAudio: boolean;
  readonly #options: RemotePublishOptions;
  readonly #peer: Peer;
  #sender?: FrameSender;
  #closed = false;

  /** A ServiceUnavailableError when the media port range is full. */
  constructor(options: RemotePublishOptions) {
    this.#options = options;
    const { tracks } = options.source;
    // Only H.264 is offered: VP8 of a local stream would need an offer of its own.
    this.hasVideo = tracks.some((t) => t.kind === "video" && t.codec === "H264");
    this.hasAudio = tracks.some((t) => t.kind === "audio");
    this.#peer = new Peer(options.address, serverOfferCodecs(this.hasVideo));
  }

  /** Our offer: send the stream's video and audio. */
  offer(): Promise<string> {
    const pc = this.#peer.pc;
    return this.#peer.offer(() => {
      if (this.hasVideo) pc.addTransceiver("video", { direction: "sendonly" });
      if (this.hasAudio) pc.addTransceiver("audio", { direction: "sendonly" });
      for (const transceiver of pc.getTransceivers()) {
        transceiver.sender.streamId = this.#options.source.mediaSessionId;
      }
    });
  }

  /** Applies the remote's answer; sending starts once DTLS is up (the SRTP keys exist). */
  async accept(answerSdp: string): Promise<void> {
    const o = this.#options;
    // At DTLS, not at werift's "connected" (which may come at ICE): the send engine takes
    // the SRTP keys, and a track attached before them would stay on werift's path.
    this.#peer.onMediaReady(() => this.#send());
    this.#peer.onFailed((phase, diagnostics) => {
      const info = phase === "dtls" ? "Failed by DTLS error" : "Failed by ICE error";
      o.log.info("remote publish peer failed", { name: o.source.name, info, diagnostics });
      o.onFailed(info);
    });
    await this.#peer.acceptAnswer(answerSdp);
  }

  /** RTP packets sent so far. */
  get packetsSent(): number {
    return this.#sender?.packetsSent ?? 0;
  }

  /** Stops sending and closes the peer (idempotent). */
  async close(): Promise<void> {
    if (this.#closed) return;
    this.#closed = true;
    await this.#sender?.stop();
    await this.#peer.close();
  }

  #send(): void {
    if (this.#sender || this.#closed) return;
    const { source, engine, log } = this.#options;
    const audio = source.tracks.find((t) => t.kind === "audio");
    const frames = audio && audio.codec !== "OPUS"
      ? convertedAudio(source, "OPUS", engine, log)
      : source;
    // The engine sends from the ICE mux's socket: a peer on ports of its own keeps werift.
    const sender = new FrameSender(
      frames,
      this.#options.address.mux ? this.#options.sendPaths : undefined,
    );
    for (const transceiver of this.#peer.pc.getTransceivers()) {
      const codec = transceiver.sender.codec?.name.toUpperCase();
      const track = frames.tracks.find((t) => t.kind === transceiver.kind);
      if (track && track.codec === codec) sender.attach(transceiver);
    }
    sender.start();
    this.#sender = sender;
  }
}
