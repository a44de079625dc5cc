/**
 * A stream played from another server over WebRTC into a local stream (a remote pull): our
 * werift peer makes a receive-only offer, the remote's answer says which codecs it sends, and
 * what arrives becomes a WebRtcPublisher, so local WebRTC players get the RTP as it came and
 * other readers get frames (Opus stays Opus).
 */
import { ParseError } from "../../core/errors.ts";
import type { Logger } from "../../core/log.ts";
import { type NegotiatedCodec, receiveOfferCodecs } from "../protocols/webrtc/codecs.ts";
import { Peer, type PeerAddress } from "../protocols/webrtc/peer.ts";
import { parseOfferMedia, type SdpMedia } from "../protocols/webrtc/sdp.ts";
import { WebRtcPublisher } from "./webrtc_publisher.ts";

/** What a remote play is built from. */
export interface RemotePlayOptions {
  /** Name of the local stream. */
  name: string;
  /** Id of the local stream. */
  mediaSessionId: string;
  nodeId: string;
  address: PeerAddress;
  log: Logger;
  /** Called once when the peer fails (ICE or DTLS) after the answer was applied. */
  onFailed: (info: string) => void;
}

/** The receiving peer of one remote play, and the local stream it feeds. */
export class RemotePlay {
  readonly #options: RemotePlayOptions;
  readonly #codecs = receiveOfferCodecs();
  readonly #peer: Peer;
  #stream?: WebRtcPublisher;

  /** A ServiceUnavailableError when the media port range is full. */
  constructor(options: RemotePlayOptions) {
    this.#options = options;
    this.#peer = new Peer(options.address, this.#codecs);
  }

  /** Our offer: receive video and audio, every codec we take. */
  offer(): Promise<string> {
    const pc = this.#peer.pc;
    return this.#peer.offer(() => {
      pc.addTransceiver("video", { direction: "recvonly" });
      pc.addTransceiver("audio", { direction: "recvonly" });
    });
  }

  /**
   * Applies the remote's answer and returns the local stream its media will feed;
   * `onMedia` runs once at the first packet. An answer without any codec of ours is a
   * ParseError.
   */
  async accept(answerSdp: string, onMedia: () => void): Promise<WebRtcPublisher> {
    const codecs = parseOfferMedia(answerSdp)
      .map((media) => this.#answered(media))
      .filter((codec) => codec !== undefined);
    if (codecs.length === 0) throw new ParseError("the remote answered with no codec we offered");
    const o = this.#options;
    const stream = new WebRtcPublisher({
      name: o.name,
      mediaSessionId: o.mediaSessionId,
      sessionId: "",
      appKey: "",
      nodeId: o.nodeId,
      clientStream: {},
      sdp: answerSdp,
      codecs,
      address: o.address,
      // The pull reports its own status; the local stream has no Web SDK client.
      client: { status: () => {}, event: () => {} },
      onPublishing: onMedia,
      log: o.log,
      peer: this.#peer,
    });
    this.#stream = stream;
    stream.receiveOn(this.#peer.pc.getTransceivers());
    this.#peer.onFailed((phase, diagnostics) => {
      const info = phase === "dtls" ? "Failed by DTLS error" : "Failed by ICE error";
      o.log.info("remote play peer failed", { name: o.name, info, diagnostics });
      o.onFailed(info);
    });
    await this.#peer.acceptAnswer(answerSdp);
    return stream;
  }

  /** The codec of ours the remote chose for an m-line of its answer, if it sends on it. */
  #answered(media: SdpMedia): NegotiatedCodec | undefined {
    if (media.direction === "inactive" || media.direction === "recvonly") return undefined;
    for (const codec of media.codecs) {
      const ours = this.#codecs.find((c) =>
        c.kind === media.kind && c.params.payloadType === codec.payloadType
      );
      if (ours) return ours;
    }
    return undefined;
  }

  /** Ends the local stream (with `info`) and closes the peer (idempotent). */
  async close(info: string): Promise<void> {
    if (this.#stream) await this.#stream.terminate(info);
    else await this.#peer.close();
  }
}
