/**
 * One track an SFU participant publishes: its RTP is forwarded as it came to each subscriber's
 * send path (no depacketizing), subscribers' keyframe requests go to the publisher (rate
 * limited), their NACKs are answered from one packet cache, and the publisher's sender reports
 * are passed on for lip sync. Each simulcast layer (rid) is measured for `/sfu/stats`.
 *
 * Simulcast seam: every subscriber gets the first layer the publisher offers (the SDK's "h",
 * its full resolution). The per-subscriber layer switcher (media/rtp/simulcast_*) takes the
 * place of `#forwarded` below: `Subscription.layer` names the layer a subscriber gets.
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
/** A layer without a packet for this long is reported not alive, in milliseconds. */
export const aliveWindowMs = 2000;

/** What the room tells about a track (ADD_TRACKS, REMOVE_TRACKS, MUTE_TRACKS). */
export interface TrackInfo {
  /** Track id: the publisher's MediaStreamTrack id from `a=msid`, else a generated one. */
  readonly id: string;
  readonly type: "AUDIO" | "VIDEO";
  /** `a=content` label (camera, screen, mic, ...), "" when the publisher gave none. */
  readonly contentType: string;
  /** rids of the track's simulcast layers; empty without simulcast. */
  readonly quality: string[];
  mute: boolean;
  readonly creationTime: number;
}

/** One encoding the publisher sends: a simulcast layer, or the track's only one. */
export interface Layer {
  /** rid of the layer; null for a track without simulcast. */
  readonly rid: string | null;
  readonly meter: TrackMeter;
  ssrc?: number;
}

/** A subscriber's attachment to a published track. */
export interface Subscription {
  readonly path: RtpSendPath;
  /** rid of the layer forwarded to this subscriber; null for a track without layers. */
  layer: string | null;
}

/** A published track of an SFU participant and its subscribers. */
export class PublishedTrack {
  readonly info: TrackInfo;
  readonly codec: NegotiatedCodec;
  /** mid of the track in the publisher's own peer connection. */
  readonly mid: string;
  readonly layers: readonly Layer[];
  readonly #cache = new PacketCache();
  readonly #subscriptions: Subscription[] = [];
  readonly #transceiver: RTCRtpTransceiver;
  /** The layer every subscriber gets until layers are switched per subscriber. */
  readonly #forwarded: Layer;
  #lastPliMs = -Infinity;
  #closed = false;

  constructor(info: TrackInfo, codec: NegotiatedCodec, transceiver: RTCRtpTransceiver) {
    this.info = info;
    this.codec = codec;
    this.mid = transceiver.mid ?? "";
    const rids = info.quality.length > 0 ? info.quality : [null];
    this.layers = rids.map((rid) => ({
      rid,
      meter: new TrackMeter(codec.codec, codec.params.payloadType),
    }));
    this.#forwarded = this.layers[0];
    this.#transceiver = transceiver;
    // werift may create the remote track while applying the offer, before this runs.
    const listen = (track: MediaStreamTrack) => {
      const layer = this.layers.find((l) => l.rid === (track.rid ?? null)) ?? this.layers[0];
      track.onReceiveRtp.subscribe((rtp) => this.#onRtp(layer, rtp));
    };
    transceiver.receiver.tracks.forEach(listen);
    transceiver.onTrack.subscribe(listen);
    transceiver.receiver.onRtcp.subscribe((rtcp) => this.#onRtcp(rtcp));
  }

  /** The kind of the track. */
  get kind(): "audio" | "video" {
    return this.codec.kind;
  }

  /** Counters of the forwarded layer (NACKs, PLIs, rates). */
  get meter(): TrackMeter {
    return this.#forwarded.meter;
  }

  /** Whether `layer` (the forwarded one by default) had packets within `aliveWindowMs`. */
  alive(layer: Layer = this.#forwarded): boolean {
    const last = layer.meter.lastPacketMs;
    return last > 0 && performance.now() - last < aliveWindowMs;
  }

  /** Subscriptions attached. */
  get subscriptions(): readonly Subscription[] {
    return this.#subscriptions;
  }

  /** Starts forwarding to `path`; a video subscriber gets a keyframe soon. */
  subscribe(path: RtpSendPath): Subscription {
    const subscription: Subscription = { path, layer: this.#forwarded.rid };
    this.#subscriptions.push(subscription);
    if (this.kind === "video") this.requestKeyframe();
    return subscription;
  }

  /** Stops forwarding to a subscription. */
  unsubscribe(subscription: Subscription): void {
    const i = this.#subscriptions.indexOf(subscription);
    if (i >= 0) this.#subscriptions.splice(i, 1);
  }

  /** Asks for a keyframe of the forwarded layer (PLI), at most once per `sfuPliMinIntervalMs`. */
  requestKeyframe(): void {
    const nowMs = performance.now();
    const ssrc = this.#forwarded.ssrc;
    if (this.#closed || ssrc === undefined) return;
    if (nowMs - this.#lastPliMs < sfuPliMinIntervalMs) return;
    this.#lastPliMs = nowMs;
    this.meter.plis++;
    this.#transceiver.receiver.sendRtcpPLI(ssrc).catch(() => {});
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

  #onRtp(layer: Layer, packet: RtpPacket): void {
    // Padding-only packets are bandwidth probes: nothing to forward.
    if (this.#closed || packet.payload.length === 0) return;
    layer.ssrc ??= packet.header.ssrc;
    layer.meter.add(packet, performance.now());
    if (layer !== this.#forwarded) return;
    if (this.kind === "video") this.#cache.put(packet);
    // A muted track is not forwarded (the publisher may keep sending black frames).
    if (this.info.mute) return;
    const subscriptions = this.#subscriptions;
    for (let i = 0; i < subscriptions.length; i++) subscriptions[i].path.send(packet);
  }

  #onRtcp(rtcp: RtcpPacket): void {
    if (!(rtcp instanceof RtcpSrPacket) || rtcp.ssrc !== this.#forwarded.ssrc) return;
    const { ntpTimestamp, rtpTimestamp } = rtcp.senderInfo;
    for (const s of this.#subscriptions) s.path.sendSenderReport(ntpTimestamp, rtpTimestamp);
  }
}
