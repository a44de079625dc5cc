/**
 * One track an SFU participant publishes and its subscribers. RTP is forwarded without
 * depacketizing: a track without simulcast goes to each subscriber's send path as it came; a
 * simulcast track's layers (rids, ordered lowest first) are measured by one LayerMonitor and
 * each subscriber gets one layer, as one continuous stream under its SSRC switching at
 * keyframes, chosen by its LayerChoice (changeQuality cap, receiver report loss, the layers
 * alive). On the send engine a layer is an engine group its subscribers share (layer_group.ts:
 * each packet handed over once, the Workers renumbering per subscriber); off it (werift, the
 * bridge streams) each subscriber is forwarded packet by packet through its own
 * SimulcastSwitch. Keyframe requests go to the publisher per layer (rate limited), NACKs are
 * answered from per-layer packet caches, the publisher's sender reports are passed on for lip
 * sync.
 */
import { Buffer } from "node:buffer";
import type { MediaStreamTrack, RtcpPacket, RTCRtpTransceiver } from "werift";
import { RtcpSrPacket, RtpHeader, RtpPacket } from "werift";
import type { NegotiatedCodec } from "../protocols/webrtc/codecs.ts";
import { PacketCache } from "../protocols/webrtc/packet_cache.ts";
import type { RetransmitBudget } from "../protocols/webrtc/retransmit_budget.ts";
import type { RtpSendPath } from "../protocols/webrtc/send_path.ts";
import { EngineGroup, EngineSendPath } from "../protocols/webrtc/engine_send_path.ts";
import { LayerGroup, type LayerSource, SharedForward } from "./layer_group.ts";
import { readVp8, shiftVp8, vp8Fields } from "../rtp/vp8_descriptor.ts";
import { LayerChoice, orderRids } from "../rtp/layer_choice.ts";
import { LayerMonitor, type LayerReport } from "../rtp/layer_monitor.ts";
import { ReceptionStats } from "../rtp/receiver_report.ts";
import { SimulcastSwitch } from "../rtp/simulcast_switch.ts";
import { vp8FrameType } from "../protocols/webrtc/video_payload.ts";

/** Shortest time between two keyframe requests sent for one layer, in milliseconds. */
export const sfuPliMinIntervalMs = 250;
/** A layer without a packet for this long is reported not alive, in milliseconds. */
export const aliveWindowMs = 1000;

/**
 * How soon a switch waiting for a keyframe asks again, in milliseconds: just over the 300 ms
 * within which Chromium ignores another keyframe request for the same encoding.
 */
export const switchKeyframeRetryMs = 350;

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

/** RTCP feedback about the track, counted as it flows, for `/sfu/stats` feedbackStats. */
export interface TrackFeedback {
  /** NACK packets its subscribers sent. */
  nacks: number;
  /** PLIs its subscribers sent. */
  plis: number;
  /** FIRs its subscribers sent. */
  firs: number;
  /** Packets resent from the cache in answer to NACKs. */
  retransmitted: number;
  /** PLIs the server sent its publisher. */
  sentPlis: number;
}

/** A subscriber's attachment to a published track. */
export class Subscription {
  readonly path: RtpSendPath;
  readonly #track: PublishedTrack;
  /** Present for a simulcast track forwarded packet by packet (off the send engine). */
  readonly #switch?: SimulcastSwitch;
  /**
   * Present on the send engine: the subscriber receives its layer's shared engine group,
   * rewritten for it by the Workers.
   */
  readonly #shared?: SharedForward;
  /** The track has layers to choose between (`#choice` is present). */
  readonly #layered: boolean;
  readonly #choice?: LayerChoice;
  /** One reused packet for what the switch rewrote (the send path reads it at once). */
  readonly #out = new RtpPacket(new RtpHeader(), Buffer.alloc(0));
  #muted = false;

  constructor(track: PublishedTrack, path: RtpSendPath) {
    this.#track = track;
    this.path = path;
    const codec = track.codec.codec;
    this.#layered = track.layers.length > 1 && (codec === "H264" || codec === "VP8");
    if (path instanceof EngineSendPath) {
      this.#shared = new SharedForward(
        path,
        track.layerSource,
        codec,
        this.#layered,
        switchKeyframeRetryMs,
      );
      if (this.#layered) this.#choice = new LayerChoice(track.layers.length);
    } else if (this.#layered && (codec === "H264" || codec === "VP8")) {
      this.#switch = new SimulcastSwitch({
        codec,
        ssrc: path.ssrc,
        requestKeyframe: (layer) => track.requestLayerKeyframe(layer),
        requestIntervalMs: switchKeyframeRetryMs,
      });
      this.#choice = new LayerChoice(track.layers.length);
    }
  }

  /** Whether the subscriber receives the track's shared engine groups (not packet by packet). */
  get shared(): boolean {
    return this.#shared !== undefined;
  }

  /** Layer forwarded, -1 before the first one or without layers. */
  get #forwardedLayer(): number {
    if (!this.#layered) return -1;
    return this.#shared ? this.#shared.layer : this.#switch!.layer;
  }

  /** rid of the layer forwarded (null for a track without layers or before the first one). */
  get layer(): string | null {
    const forwarded = this.#forwardedLayer;
    return forwarded < 0 ? null : this.#track.layers[forwarded];
  }

  /** The subscriber asked not to receive the track (muteRemoteTrack). */
  get muted(): boolean {
    return this.#muted;
  }

  /** Stops or resumes forwarding; a video resumes at a keyframe. */
  setMuted(muted: boolean): void {
    if (muted === this.#muted) return;
    this.#muted = muted;
    this.#shared?.setPaused(muted, performance.now());
    if (muted || this.#track.kind !== "video") return;
    if (this.#switch) this.#switch.restart(performance.now());
    else if (!this.#layered) this.#track.requestLayerKeyframe(0);
  }

  /** Whether the subscriber gets one of several layers. */
  get switchable(): boolean {
    return this.#layered;
  }

  /** Caps the layer at `rid` (changeQuality); false when the track has no such layer. */
  setQuality(rid: string): boolean {
    const layer = this.#track.layers.indexOf(rid);
    if (layer < 0 || !this.#choice) return false;
    this.#choice.setCap(layer);
    this.choose(performance.now());
    return true;
  }

  /** Caps the layer at index `sid`, 0 the lowest (changeSid); false without layers. */
  setSpatial(sid: number): boolean {
    if (!this.#choice) return false;
    this.#choice.setCap(sid);
    this.choose(performance.now());
    return true;
  }

  /** Caps VP8 temporal layers at `tid` (changeTid); false without layers. */
  setTemporal(tid: number): boolean {
    if (!this.#layered) return false;
    // Only VP8 temporal layers are told apart; H.264 has none to drop.
    this.#switch?.selectTemporal(tid);
    this.#shared?.selectTemporal(tid);
    return true;
  }

  /** Re-chooses the layer from the cap, the feedback and the layers alive now. */
  choose(nowMs: number, alive?: boolean[], kbps?: number[]): void {
    if (!this.#choice) return;
    const monitor = this.#track.monitor;
    const layer = this.#choice.choose(
      alive ?? monitor.aliveLayers(nowMs),
      kbps ?? monitor.bitratesKbps(nowMs),
      nowMs,
    );
    if (layer < 0) return;
    if (this.#shared) this.#shared.select(layer, nowMs);
    else this.#switch!.select(layer, nowMs);
  }

  /**
   * The subscriber's bandwidth estimate (its REMB) left for this track, in kbit/s: lowers
   * the layer at once when the forwarded one does not fit, lets it climb after a stable time.
   */
  onEstimate(kbps: number): void {
    this.#choice?.onEstimate(kbps, performance.now());
  }

  /** Measured bitrate of what is forwarded to the subscriber, in kbit/s (0 when muted). */
  sendingKbps(nowMs: number): number {
    if (this.#muted) return 0;
    const layer = this.#layered ? this.#forwardedLayer : 0;
    return layer < 0 ? 0 : this.#track.monitor.bitratesKbps(nowMs)[layer] ?? 0;
  }

  /** A receiver report of the subscriber: its fraction lost (0-255) of this track. */
  onLoss(fractionLost: number): void {
    this.#choice?.onLoss(fractionLost / 256, performance.now());
  }

  /** The subscriber needs a keyframe (its PLI or FIR, or it unmuted the track). */
  keyframeNeeded(): void {
    if (this.#switch) this.#switch.keyframeNeeded(performance.now());
    else if (this.#shared && this.#layered) this.#shared.keyframeNeeded(performance.now());
    else this.#track.requestLayerKeyframe(0);
  }

  /** Resends cached packets the subscriber reported lost, as far as its budget allows. */
  retransmit(sequenceNumbers: readonly number[], budget: RetransmitBudget): void {
    const track = this.#track;
    track.feedback.nacks++;
    const nowMs = performance.now();
    for (const seq of sequenceNumbers) {
      const packet = this.#switch
        ? this.#rewritten(this.#switch.retransmission(seq, (l, s) => track.cached(l, s)))
        : this.#shared && this.#layered
        ? this.#sharedResend(seq)
        : track.cached(0, seq);
      if (!packet || !budget.take(nowMs)) continue;
      this.path.send(packet);
      track.feedback.retransmitted++;
    }
  }

  /** The packet sent as `sequenceNumber` through a layer group, rewritten as it was sent. */
  #sharedResend(sequenceNumber: number): RtpPacket | undefined {
    const from = this.#shared!.resend(sequenceNumber);
    const packet = from && this.#track.cached(from.layer, from.layerSequence);
    if (!from || !packet) return undefined;
    const out = this.#out;
    out.header.sequenceNumber = sequenceNumber;
    out.header.timestamp = (packet.header.timestamp + from.timestampOffset) >>> 0;
    out.header.marker = packet.header.marker;
    out.payload = packet.payload;
    if (this.#track.codec.codec === "VP8" && (from.picIdOffset || from.tl0Offset)) {
      // Sent through this subscriber's own group, which the Worker does not renumber.
      const copy = Buffer.from(packet.payload);
      shiftVp8(copy, readVp8(copy, 0, copy.length, resendFields), from.picIdOffset, from.tl0Offset);
      out.payload = copy;
    }
    return out;
  }

  /** Ends the subscription: it leaves the track's layer groups. */
  close(): void {
    this.#shared?.close();
  }

  /** Takes one packet of the publisher's `layer` (a subscription forwarded packet by packet). */
  forward(layer: number, packet: RtpPacket, nowMs: number): void {
    if (this.#muted) return;
    if (!this.#switch) {
      if (layer === 0) this.path.send(packet);
      return;
    }
    const out = this.#rewritten(this.#switch.forward(layer, packet, nowMs));
    if (out) this.path.send(out);
  }

  /** A packet of `layer` that is not forwarded (padding): the rewritten sequence closes up. */
  skip(layer: number, packet: RtpPacket): void {
    if (!this.#muted) this.#switch?.skip(layer, packet.header.sequenceNumber);
  }

  /** Passes on the publisher's sender report of `layer` when that layer is forwarded. */
  senderReport(layer: number, ntpTimestamp: bigint, rtpTimestamp: number): void {
    if (this.#shared && this.#layered) {
      if (this.#shared.layer !== layer) return;
      const timestamp = (rtpTimestamp + this.#shared.timestampOffset) >>> 0;
      this.path.sendSenderReport(ntpTimestamp, timestamp);
    } else if (!this.#switch) {
      if (layer === 0) this.path.sendSenderReport(ntpTimestamp, rtpTimestamp);
    } else if (this.#switch.layer === layer) {
      const timestamp = (rtpTimestamp + this.#switch.timestampOffset) >>> 0;
      this.path.sendSenderReport(ntpTimestamp, timestamp);
    }
  }

  #rewritten(
    forwarded: ReturnType<SimulcastSwitch["forward"]>,
  ): RtpPacket | undefined {
    if (!forwarded) return undefined;
    const out = this.#out;
    out.header.sequenceNumber = forwarded.sequenceNumber;
    out.header.timestamp = forwarded.timestamp;
    out.header.marker = forwarded.marker;
    const p = forwarded.payload;
    // A rewritten VP8 payload is a view of the switch's scratch buffer.
    out.payload = Buffer.isBuffer(p) ? p : Buffer.from(p.buffer, p.byteOffset, p.length);
    return out;
  }
}

/** VP8 descriptor fields of a retransmission being renumbered (reused). */
const resendFields = vp8Fields();

/** Numbers published tracks and layer groups, for unique engine group names. */
let nextTrackSerial = 1;
let nextGroupSerial = 1;

/** A published track of an SFU participant and its subscribers. */
export class PublishedTrack {
  readonly info: TrackInfo;
  readonly codec: NegotiatedCodec;
  /** mid of the track in the publisher's own peer connection. */
  readonly mid: string;
  /** rids of the layers, lowest quality first; one null layer without simulcast. */
  readonly layers: readonly (string | null)[];
  /** Liveness, rates and picture size of each layer. */
  readonly monitor: LayerMonitor;
  readonly feedback: TrackFeedback = { nacks: 0, plis: 0, firs: 0, retransmitted: 0, sentPlis: 0 };
  /** SSRC of each layer, learnt from its packets. */
  readonly #ssrcs: (number | undefined)[];
  readonly #caches: PacketCache[];
  /** Sequence-number statistics of each layer (padding included), for the publisher's loss. */
  readonly #reception: (ReceptionStats | undefined)[];
  readonly #lastPliMs: number[];
  readonly #subscriptions: Subscription[] = [];
  /** Subscriptions forwarded packet by packet (not through layer groups). */
  readonly #solo: Subscription[] = [];
  /** Engine groups of the layers, by layer then abs-send-time id and temporal cap. */
  readonly #groups: Map<string, LayerGroup>[];
  /** VP8 descriptor of the packet being handed to the groups (reused). */
  readonly #vp8 = vp8Fields();
  readonly #transceiver: RTCRtpTransceiver;
  /** What the track's SharedForwards need of it. */
  readonly layerSource: LayerSource;
  /** The send engine's affinity key of the track's subscribers (one Worker for them all). */
  readonly engineAffinity: string;
  #closed = false;

  constructor(info: TrackInfo, codec: NegotiatedCodec, transceiver: RTCRtpTransceiver) {
    this.info = info;
    this.codec = codec;
    this.mid = transceiver.mid ?? "";
    this.layers = info.quality.length > 0 ? orderRids(info.quality) : [null];
    const count = this.layers.length;
    this.monitor = new LayerMonitor(codec.codec, codec.params.payloadType, count, aliveWindowMs);
    this.#ssrcs = new Array(count).fill(undefined);
    this.#caches = this.layers.map(() => new PacketCache());
    this.#reception = new Array(count).fill(undefined);
    this.#lastPliMs = new Array(count).fill(-Infinity);
    this.#groups = this.layers.map(() => new Map());
    this.#transceiver = transceiver;
    const serial = nextTrackSerial++;
    this.engineAffinity = `sfu/${serial}`;
    const simulcast = this.layers.length > 1;
    this.layerSource = {
      layerGroup: (layer, { absSendTimeId, transportCcId }, engine, tidCap) => {
        const groups = this.#groups[layer];
        const key = `${absSendTimeId ?? "-"}/${transportCcId ?? "-"}/${tidCap}`;
        let group = groups.get(key);
        if (!group) {
          // A new name each time: the engine may still hold a let-go one's last leave.
          const name = `sfu/${serial}/${layer}/${key}/${nextGroupSerial++}`;
          group = new LayerGroup(
            layer,
            new EngineGroup(name, absSendTimeId, false, transportCcId),
            engine,
            codec.params.clockRate,
            simulcast,
            codec.codec === "VP8",
            tidCap,
            key,
          );
          groups.set(key, group);
        }
        return group;
      },
      releaseGroup: (group) => {
        const groups = this.#groups[group.layer];
        if (groups.get(group.key) === group) groups.delete(group.key);
      },
      requestKeyframe: (layer) => this.requestLayerKeyframe(layer),
    };
    // werift may create the remote track while applying the offer, before this runs.
    const listen = (track: MediaStreamTrack) => {
      const layer = Math.max(0, this.layers.indexOf(track.rid ?? null));
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

  /** Subscriptions attached. */
  get subscriptions(): readonly Subscription[] {
    return this.#subscriptions;
  }

  /** What is measured of each layer, lowest first. */
  report(nowMs = performance.now()): LayerReport[] {
    return this.monitor.report(nowMs);
  }

  /** Starts forwarding to `path`; a video subscriber gets a keyframe of its layer soon. */
  subscribe(path: RtpSendPath): Subscription {
    const subscription = new Subscription(this, path);
    this.#subscriptions.push(subscription);
    if (!subscription.shared) this.#solo.push(subscription);
    // Chosen now, so the keyframe asked for is of the subscriber's layer.
    if (subscription.switchable) subscription.choose(performance.now());
    else if (this.kind === "video") this.requestLayerKeyframe(0);
    return subscription;
  }

  /** Stops forwarding to a subscription. */
  unsubscribe(subscription: Subscription): void {
    const i = this.#subscriptions.indexOf(subscription);
    if (i < 0) return;
    this.#subscriptions.splice(i, 1);
    const j = this.#solo.indexOf(subscription);
    if (j >= 0) this.#solo.splice(j, 1);
    subscription.close();
  }

  /**
   * Re-chooses every subscriber's layer (the room's timer); returns the layers' liveness when
   * it changed since the last call (what TRACK_QUALITY_STATE tells), else undefined.
   */
  tick(nowMs: number): boolean[] | undefined {
    if (this.layers.length < 2 || this.#closed) return undefined;
    const alive = this.monitor.aliveLayers(nowMs);
    const kbps = this.monitor.bitratesKbps(nowMs);
    for (const s of this.#subscriptions) s.choose(nowMs, alive, kbps);
    return this.monitor.changes(nowMs);
  }

  /** Asks every subscriber's layer for a keyframe (the track was unmuted). */
  requestKeyframe(): void {
    if (this.kind !== "video") return;
    for (const s of this.#subscriptions) s.keyframeNeeded();
    if (this.#subscriptions.length === 0) this.requestLayerKeyframe(0);
  }

  /** Asks the publisher for a keyframe of `layer` (PLI), at most once per `sfuPliMinIntervalMs`. */
  requestLayerKeyframe(layer: number): void {
    const nowMs = performance.now();
    const ssrc = this.#ssrcs[layer];
    if (this.#closed || ssrc === undefined) return;
    if (nowMs - this.#lastPliMs[layer] < sfuPliMinIntervalMs) return;
    this.#lastPliMs[layer] = nowMs;
    this.feedback.sentPlis++;
    this.#transceiver.receiver.sendRtcpPLI(ssrc).catch(() => {});
  }

  /** SSRCs of the layers seen so far. */
  get ssrcs(): number[] {
    return this.#ssrcs.filter((ssrc) => ssrc !== undefined);
  }

  /** Packets of the publisher expected (by sequence numbers) and received, all layers. */
  receptionCounts(): { expected: number; received: number } {
    let expected = 0;
    let received = 0;
    for (const stats of this.#reception) {
      if (!stats) continue;
      expected += stats.expected;
      received += stats.received;
    }
    return { expected, received };
  }

  /** The publisher's packet of `layer` with `sequenceNumber`, if still cached. */
  cached(layer: number, sequenceNumber: number): RtpPacket | undefined {
    return this.#caches[layer]?.get(sequenceNumber);
  }

  /** Stops forwarding to everyone (the publisher left or removed the track). */
  close(): void {
    this.#closed = true;
    for (const s of this.#subscriptions) s.close();
    this.#subscriptions.length = 0;
    this.#solo.length = 0;
    for (const cache of this.#caches) cache.clear();
  }

  #onRtp(layer: number, packet: RtpPacket): void {
    if (this.#closed) return;
    const nowMs = performance.now();
    const { ssrc, sequenceNumber, timestamp } = packet.header;
    let reception = this.#reception[layer];
    if (reception?.ssrc !== ssrc) {
      reception = this.#reception[layer] = new ReceptionStats(ssrc, this.codec.params.clockRate);
    }
    reception.update(sequenceNumber, timestamp, nowMs);
    // Padding-only packets are bandwidth probes: nothing to forward.
    if (packet.payload.length === 0) {
      const solo = this.#solo;
      for (let i = 0; i < solo.length; i++) solo[i].skip(layer, packet);
      for (const group of this.#groups[layer].values()) group.skip(sequenceNumber);
      return;
    }
    this.#ssrcs[layer] = packet.header.ssrc;
    this.monitor.add(layer, packet, nowMs);
    if (this.kind === "video") this.#caches[layer].put(packet);
    // A muted track is not forwarded (the publisher may keep sending black frames).
    if (this.info.mute) return;
    const solo = this.#solo;
    for (let i = 0; i < solo.length; i++) solo[i].forward(layer, packet, nowMs);
    this.#publishToGroups(layer, packet, nowMs);
  }

  /**
   * Hands a packet of `layer` to its engine groups, once each: subscribers waiting for the
   * layer move in first when it starts a keyframe (the move reaches the Workers before the
   * packet does); the others waiting are asked for again, throttled.
   */
  #publishToGroups(layer: number, packet: RtpPacket, nowMs: number): void {
    let keyframe: boolean | undefined;
    for (const group of this.#groups[layer].values()) {
      if (group.movers.size > 0) this.#moveTemporal(group, packet);
    }
    for (const groups of this.#groups) {
      for (const group of groups.values()) {
        if (group.waiting.size === 0) continue;
        if (group.layer === layer) {
          keyframe ??= group.waiting.values().next().value!.startsKeyframe(packet.payload);
          if (keyframe) {
            for (const member of [...group.waiting]) member.switchAt(group, packet, nowMs);
            continue;
          }
        }
        for (const member of group.waiting) member.maybeRequest(nowMs);
      }
    }
    for (const group of this.#groups[layer].values()) {
      if (group.members.size > 0) group.publish(packet, nowMs);
    }
  }

  /**
   * VP8: moves `group`'s members that chose another temporal cap to the group with that cap,
   * when `packet` starts a frame that allows it (as SimulcastSwitch.selectTemporal says).
   */
  #moveTemporal(group: LayerGroup, packet: RtpPacket): void {
    const f = readVp8(packet.payload, 0, packet.payload.length, this.#vp8);
    if (!f.starts) return;
    const key = vp8FrameType(packet.payload) === "key";
    for (const member of [...group.movers]) {
      const cap = member.temporalTarget;
      if (cap > group.tidCap && !key && !(f.tid > group.tidCap && f.sync)) continue;
      const path = member.path;
      const target = this.layerSource.layerGroup(
        group.layer,
        path.group,
        path.engine,
        cap,
      );
      member.moveAt(target, packet);
    }
  }

  #onRtcp(rtcp: RtcpPacket): void {
    if (!(rtcp instanceof RtcpSrPacket)) return;
    const layer = this.#ssrcs.indexOf(rtcp.ssrc);
    if (layer < 0) return;
    const { ntpTimestamp, rtpTimestamp } = rtcp.senderInfo;
    for (const s of this.#subscriptions) s.senderReport(layer, ntpTimestamp, rtpTimestamp);
  }
}
