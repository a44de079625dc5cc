/**
 * One track an SFU participant publishes: its RTP is forwarded as it came to each subscriber's
 * send path (no depacketizing), subscribers' keyframe requests go to the publisher (rate
 * limited), their NACKs are answered from one packet cache, and the publisher's sender reports
 * are passed on for lip sync. It is measured for `/sfu/stats`.
 *
 * Simulcast seam: a publisher sends one encoding today (sdp_sections.ts `withoutSimulcast`).
 * The per-subscriber layer switcher (media/rtp/simulcast_*) takes the place of the direct
 * `paths` fan-out below: `Subscription.layer` names the forwarded layer, null without layers.
 */
import type { MediaStreamTrack, RtcpPacket, RTCRtpTransceiver, RtpPacket } from "werift";
import { RtcpSrPacket } from "werift";
import type { NegotiatedCodec } from "../protocols/webrtc/codecs.ts";
import { PacketCache } from "../protocols/webrtc/packet_cache.ts";
import type { RetransmitBudget } from "../protocols/webrtc/retransmit_budget.ts";
import type { RtpSendPath } from "../protocols/webrtc/send_path.ts";
import { TrackMeter } from "../protocols/webrtc/track_meter.ts";

/** Shortest time between two keyframe requests sent to the publisher, in milliseconds. */
export const sfuPliMinIntervalMs = 250;
/** A track without a packet for this long is reported not alive, in milliseconds. */
export const aliveWindowMs = 2000;

/** What the room tells about a track (ADD_TRACKS, REMOVE_TRACKS, MUTE_TRACKS). */
export interface TrackInfo {
  /** Track id: the publisher's MediaStreamTrack id from `a=msid`, else a generated one. */
  readonly id: string;
  readonly type: "AUDIO" | "VIDEO";
  /** `a=content` label (camera, screen, mic, ...), "" when the publisher gave none. */
  readonly contentType: string;
  /** Layers the track offers; empty without simulcast. */
  readonly quality: string[];
  mute: boolean;
  readonly creationTime: number;
}

/** A subscriber's attachment to a published track. */
export interface Subscription {
  readonly path: RtpSendPath;
  /** Layer forwarded to this subscriber; null for a track without layers. */
  layer: string | null;
}

/** A published track of an SFU participant and its subscribers. */
export class PublishedTrack {
  readonly info: TrackInfo;
  readonly codec: NegotiatedCodec;
  /** mid of the track in the publisher's own peer connection. */
  readonly mid: string;
  readonly meter: TrackMeter;
  readonly #cache = new PacketCache();
  readonly #subscriptions: Subscription[] = [];
  readonly #transceiver: RTCRtpTransceiver;
  #mediaSsrc?: number;
  #lastPliMs = -Infinity;
  #closed = false;

  constructor(info: TrackInfo, codec: NegotiatedCodec, transceiver: RTCRtpTransceiver) {
    this.info = info;
    this.codec = codec;
    this.mid = transceiver.mid ?? "";
    this.meter = new TrackMeter(codec.codec, codec.params.payloadType);
    this.#transceiver = transceiver;
    // werift may create the remote track while applying the offer, before this runs.
    const listen = (track: MediaStreamTrack) =>
      track.onReceiveRtp.subscribe((rtp) => this.#onRtp(rtp));
    transceiver.receiver.tracks.forEach(listen);
    transceiver.onTrack.subscribe(listen);
    transceiver.receiver.onRtcp.subscribe((rtcp) => this.#onRtcp(rtcp));
  }

  /** The kind of the track. */
  get kind(): "audio" | "video" {
    return this.codec.kind;
  }

  /** Whether packets came within `aliveWindowMs`. */
  get alive(): boolean {
    return this.meter.lastPacketMs > 0 &&
      performance.now() - this.meter.lastPacketMs < aliveWindowMs;
  }

  /** Subscriptions attached. */
  get subscriptions(): readonly Subscription[] {
    return this.#subscriptions;
  }

  /** Starts forwarding to `path`; a video subscriber gets a keyframe soon. */
  subscribe(path: RtpSendPath): Subscription {
    const subscription: Subscription = { path, layer: null };
    this.#subscriptions.push(subscription);
    if (this.kind === "video") this.requestKeyframe();
    return subscription;
  }

  /** Stops forwarding to a subscription. */
  unsubscribe(subscription: Subscription): void {
    const i = this.#subscriptions.indexOf(subscription);
    if (i >= 0) this.#subscriptions.splice(i, 1);
  }

  /** Asks the publisher for a keyframe (PLI), at most once per `sfuPliMinIntervalMs`. */
  requestKeyframe(): void {
    const nowMs = performance.now();
    if (this.#closed || this.#mediaSsrc === undefined) return;
    if (nowMs - this.#lastPliMs < sfuPliMinIntervalMs) return;
    this.#lastPliMs = nowMs;
    this.meter.plis++;
    this.#transceiver.receiver.sendRtcpPLI(this.#mediaSsrc).catch(() => {});
  }

  /** Resends cached packets a subscriber reported lost, as far as its budget allows. */
  retransmit(path: RtpSendPath, sequenceNumbers: readonly number[], budget: RetransmitBudget) {
    this.meter.nacks++;
    const nowMs = performance.now();
    for (const seq of sequenceNumbers) {
      const packet = this.#cache.get(seq);
      if (!packet || !budget.take(nowMs)) continue;
      path.send(packet);
      this.meter.retransmitted++;
    }
  }

  /** Stops forwarding to everyone (the publisher left or removed the track). */
  close(): void {
    this.#closed = true;
    this.#subscriptions.length = 0;
    this.#cache.clear();
  }

  #onRtp(packet: RtpPacket): void {
    // Padding-only packets are bandwidth probes: nothing to forward.
    if (this.#closed || packet.payload.length === 0) return;
    this.#mediaSsrc ??= packet.header.ssrc;
    this.meter.add(packet, performance.now());
    if (this.kind === "video") this.#cache.put(packet);
    // A muted track is not forwarded (the publisher may keep sending black frames).
    if (this.info.mute) return;
    const subscriptions = this.#subscriptions;
    for (let i = 0; i < subscriptions.length; i++) subscriptions[i].path.send(packet);
  }

  #onRtcp(rtcp: RtcpPacket): void {
    if (!(rtcp instanceof RtcpSrPacket) || rtcp.ssrc !== this.#mediaSsrc) return;
    const { ntpTimestamp, rtpTimestamp } = rtcp.senderInfo;
    for (const s of this.#subscriptions) s.path.sendSenderReport(ntpTimestamp, rtpTimestamp);
  }
}
