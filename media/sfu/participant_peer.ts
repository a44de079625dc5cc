/**
 * The one werift peer connection of an SFU participant, negotiated both ways as the SFU SDK
 * expects: the client's offers (joinRoom, updateRoomState) publish its tracks, labelled by
 * `a=content`; the server's offers add a sendonly transceiver per track of another participant
 * it must deliver. Negotiations run one at a time. Glare (a client offer while a server offer
 * waits for its answer) is resolved for the server, as the SDK does: it rolls its own offer
 * back, answers ours, then offers again, so the crossing client offer is dropped here.
 */
import type {
  RTCDataChannel,
  RtcpPacket,
  RtcpPayloadSpecificFeedback,
  RTCRtpTransceiver,
} from "werift";
import {
  GenericNack,
  RtcpRrPacket,
  RtcpSrPacket,
  RTCRtpHeaderExtensionParameters,
  useAbsSendTime,
  useSdesMid,
  useSdesRTPStreamId,
} from "werift";
import { type Logger, silentLogger } from "../../core/log.ts";
import {
  type NegotiatedCodec,
  receiveOfferCodecs,
  serverOfferCodecs,
} from "../protocols/webrtc/codecs.ts";
import { Peer, type PeerAddress } from "../protocols/webrtc/peer.ts";
import { RetransmitBudget } from "../protocols/webrtc/retransmit_budget.ts";
import {
  EngineGroup,
  type EngineSendPath,
  type EngineSendPaths,
} from "../protocols/webrtc/engine_send_path.ts";
import { type RtpSendPath, WeriftSendPath } from "../protocols/webrtc/send_path.ts";
import { absSendTimeUri } from "../rtp/abs_send_time.ts";
import { readRemb, rembPacket } from "../rtp/remb.ts";
import { parseTransportCc, transportCcUri } from "../rtp/transport_cc.ts";
import { TransportCcLog } from "../send_engine/transport_cc_log.ts";
import { ParseError } from "../../core/errors.ts";
import { installTransportCcBytes, transportCcBytes } from "./transport_cc_feedback.ts";
import { TransportCcEstimate } from "./transport_cc_estimate.ts";
import type { PublishedTrack, Subscription } from "./published_track.ts";
import { parseSections, type SdpSection } from "./sdp_sections.ts";
import { UplinkEstimate, uplinkRembIntervalMs } from "./uplink_estimate.ts";

/** Label of the data channel the SFU SDK opens for chat. */
export const controlChannelLabel = "control";

/** Highest id of a one-byte RTP header extension (RFC 8285). */
const maxExtensionId = 14;

/**
 * The RTP header extensions of SFU peers, by kind. mid and rid: a simulcast publisher's
 * layers carry no a=ssrc, werift tells them by rid. abs-send-time: stamped on what the client
 * receives, for its bandwidth estimate (REMB).
 */
function sfuExtensions(kind: "audio" | "video"): RTCRtpHeaderExtensionParameters[] {
  return kind === "video" ? [useSdesMid(), useSdesRTPStreamId(), useAbsSendTime()] : [useSdesMid()];
}

/**
 * Share of what is forwarded to a client by which its REMB may fall short of it before that
 * counts as congestion: a browser's first estimate is the rate it measured coming in, which
 * the payload rates measured here may exceed by noise, while after overuse it estimates 0.85
 * of what comes in.
 */
export const estimateTolerance = 0.1;

/** What the peer tells the client about its uplink (REMB to a publisher). */
export interface UplinkOptions {
  /** The bitrate a publisher is told it may send when nothing is lost, in kbit/s. */
  readonly maxPublishKbps: number;
  /** The tracks the participant publishes now. */
  readonly published: () => Iterable<PublishedTrack>;
}

/** A track of another participant delivered on this peer, at `mid`. */
export interface Delivery {
  readonly track: PublishedTrack;
  readonly mid: string;
}

/** What the peer needs from its owner (the room's participant). */
export interface PeerSignals {
  /** Tracks about to be offered to the client, with their mids here (ADD_TRACKS). */
  delivering(deliveries: readonly Delivery[]): void;
  /** A server offer for the client (REMOTE_SDP of type offer). */
  offer(sdp: string, tid: string): void;
  /** A text message of the client on the control data channel. */
  controlMessage(text: string): void;
  /** The connection failed (ICE or DTLS). */
  failed(reason: string): void;
}

/** RTCP the client sent about one track delivered to it, for `/sfu/stats`. */
export interface DeliveryFeedback {
  receivedNACK: number;
  receivedPLI: number;
  receivedFIR: number;
  /** Of the latest receiver report: the fraction lost (0-1) since the one before. */
  fractionLost: number;
  /** Of the latest receiver report: packets lost in all. */
  packetsLost: number;
  /** Of the latest receiver report: interarrival jitter, in RTP timestamp units. */
  jitter: number;
  /** The client's latest bandwidth estimate (REMB) covering the track, in bit/s; 0 before one. */
  remb: number;
  /** Transport-cc feedback packets the client sent on the track's transport. */
  transportCcFeedback: number;
  /**
   * The estimate derived from that feedback for the transport (delivery rate, cut where a
   * queue builds), in bit/s; 0 before one.
   */
  transportCcEstimate: number;
}

/** A track published in a client offer, before the room knows it. */
export interface OfferedTrack {
  readonly section: SdpSection;
  readonly transceiver: RTCRtpTransceiver;
  readonly codec: NegotiatedCodec;
}

/** What a client offer changed. */
export interface OfferOutcome {
  readonly answer: string;
  /** Sections the client now sends that were not published before. */
  readonly added: OfferedTrack[];
  /** mids (in this peer) of published tracks the client stopped sending. */
  readonly stopped: string[];
}

/**
 * A transceiver here that sends a track of another participant: one the server offered for a
 * delivered track, or a lease slot (a recvonly transceiver the client offered, filled by
 * leaseTrack). Once negotiated and connected it has its path.
 */
interface Slot {
  track?: PublishedTrack;
  readonly transceiver: RTCRtpTransceiver;
  subscription?: Subscription;
  /** The subscription's path when on the send engine, left with the delivery. */
  enginePath?: EngineSendPath;
  /** The NACK listener of the sender, dropped with the delivery. */
  nacks?: { unSubscribe(): void };
  /** Changes the client asked for before the subscription was attached, applied then. */
  readonly requested: ((subscription: Subscription) => void)[];
  /** What the client's RTCP said about the slot's track. */
  readonly feedback: DeliveryFeedback;
}

function noFeedback(): DeliveryFeedback {
  return {
    receivedNACK: 0,
    receivedPLI: 0,
    receivedFIR: 0,
    fractionLost: 0,
    packetsLost: 0,
    jitter: 0,
    remb: 0,
    transportCcFeedback: 0,
    transportCcEstimate: 0,
  };
}

/** A delivered track (offered by the server). */
interface Receiving extends Slot {
  readonly track: PublishedTrack;
}

/**
 * The codecs an SFU peer takes: Opus, H.264 (constrained baseline, mode 1) and VP8, video with
 * goog-remb feedback (the browser reports its receive-side estimate, and takes ours as a cap).
 */
export function sfuCodecs(): NegotiatedCodec[] {
  const [opus, h264] = serverOfferCodecs(true);
  const vp8 = receiveOfferCodecs().find((c) => c.codec === "VP8");
  const video = vp8 ? [h264, vp8] : [h264];
  for (const c of video) c.params.rtcpFeedback = [...c.params.rtcpFeedback, { type: "goog-remb" }];
  return [opus, ...video];
}

/**
 * Numbers the engine groups of delivered tracks' own: what only that subscriber gets (its
 * retransmissions, a VP8 simulcast track rewritten for it per packet); the layers it shares
 * with others are the published track's groups (layer_group.ts).
 */
let nextEngineGroup = 1;

/** An SFU participant's peer connection. */
export class ParticipantPeer {
  readonly #peer: Peer;
  readonly #codecs = sfuCodecs();
  readonly #signals: PeerSignals;
  readonly #log: Logger;
  /** mids of this peer's published (receiving) transceivers. */
  readonly #publishedMids = new Set<string>();
  readonly #receiving = new Map<PublishedTrack, Receiving>();
  /** Lease slots by their mid. */
  readonly #leases = new Map<string, Slot>();
  /**
   * Transceivers of withdrawn deliveries were stopped: the next server offer rejects their
   * m-lines (port 0), which later deliveries of the same kind then take over.
   */
  #stopsToOffer = false;
  /** Tracks to offer at the next server negotiation. */
  #pending: PublishedTrack[] = [];
  #queue: Promise<unknown> = Promise.resolve();
  /** The first client offer was answered: server offers may follow. */
  #answered = false;
  #control?: RTCDataChannel;
  /** Transports whose RTCP is watched for keyframe requests. */
  readonly #rtcpWatched = new WeakSet<object>();
  /** REMB to the client for what it publishes; absent without `UplinkOptions`. */
  readonly #uplink?: {
    estimate: UplinkEstimate;
    options: UplinkOptions;
    timer: ReturnType<typeof setInterval>;
  };
  #closed = false;
  /** The send engine, when it runs and this peer is on the ICE mux whose socket it sends from. */
  readonly #sendPaths?: EngineSendPaths;
  /**
   * Transport-cc of what the client receives: its numbers are stamped by the send engine's
   * Workers or by werift's path, whichever sends a track, in one log per transport.
   */
  readonly #transportCc: { log?: TransportCcLog; estimate: TransportCcEstimate };

  /**
   * `uplink`: send the client REMB for what it publishes (else it ramps on its own).
   * `sendPaths`: the server's send engine, which takes the delivered tracks' media once the
   * peer is connected (werift keeps ICE, DTLS and RTCP).
   */
  constructor(
    address: PeerAddress,
    signals: PeerSignals,
    log: Logger = silentLogger,
    uplink?: UplinkOptions,
    sendPaths?: EngineSendPaths,
  ) {
    this.#signals = signals;
    this.#log = log;
    this.#sendPaths = address.mux ? sendPaths : undefined;
    installTransportCcBytes();
    // The log (about 24 KB) is made when the first numbered track starts.
    this.#transportCc = { estimate: new TransportCcEstimate() };
    this.#peer = new Peer(address, this.#codecs, {
      video: sfuExtensions("video"),
      audio: sfuExtensions("audio"),
    });
    if (uplink) {
      const timer = setInterval(() => this.#sendUplinkRemb(), uplinkRembIntervalMs);
      this.#uplink = {
        estimate: new UplinkEstimate(uplink.maxPublishKbps),
        options: uplink,
        timer,
      };
    }
    const pc = this.#peer.pc;
    this.#peer.onFailed((phase, diagnostics) => {
      this.#log.info("SFU peer failed", { phase, diagnostics });
      signals.failed(phase === "dtls" ? "Failed by DTLS error" : "Failed by ICE error");
    });
    // Delivered tracks start when the peer's media is ready (its DTLS transport connected:
    // the SRTP keys exist, which the send engine takes), not at werift's "connected", which
    // it reports once ICE is.
    this.#peer.onMediaReady(() => this.#attachReady());
    pc.onDataChannel.subscribe((channel) => {
      if (channel.label !== controlChannelLabel) return;
      this.#control = channel;
      channel.onMessage.subscribe((data) => {
        signals.controlMessage(typeof data === "string" ? data : new TextDecoder().decode(data));
      });
    });
  }

  /** Sends a text message to the client on its control channel (dropped until it is open). */
  sendControl(text: string): void {
    if (this.#control?.readyState === "open") this.#control.send(text);
  }

  /**
   * Applies a client offer and answers it. "glare" when a server offer waits for its answer:
   * the client rolls its offer back and sends it again after answering ours. A malformed
   * offer is a ParseError and leaves the peer as it was.
   */
  clientOffer(sdp: unknown): Promise<OfferOutcome | "glare"> {
    const sections = parseSections(sdp);
    return this.#run(async () => {
      if (this.#peer.pc.signalingState === "have-local-offer") return "glare";
      const added: OfferedTrack[] = [];
      const stopped: string[] = [];
      const answer = await this.#peer.answer(sdp as string, () => {
        this.#keepTransportCc(sdp as string);
        for (const transceiver of this.#peer.pc.getTransceivers()) {
          const section = sections.find((s) => s.mid === transceiver.mid);
          if (!section || this.#isDelivery(transceiver) || transceiver.stopping) continue;
          const sends = section.direction === "sendonly" || section.direction === "sendrecv";
          const known = this.#publishedMids.has(section.mid);
          if (sends) {
            transceiver.setDirection("recvonly");
            // Our later offers must keep receiving the layers: an offer without them makes
            // the browser send its first encoding only.
            if (section.rids.length > 0) {
              transceiver.options.simulcast = section.rids.map((rid) => ({
                rid,
                direction: "recv" as const,
              }));
            }
            const codec = this.#negotiated(transceiver);
            if (!known && codec) {
              this.#publishedMids.add(section.mid);
              added.push({ section, transceiver, codec });
            }
          } else if (
            section.direction === "recvonly" && !this.#isLease(transceiver)
          ) {
            // A lease slot (the SDK's getRemoteTrack): it sends what leaseTrack puts in it.
            transceiver.setDirection("sendonly");
            this.#leases.set(section.mid, { transceiver, requested: [], feedback: noFeedback() });
          } else if (section.direction === "recvonly") {
            transceiver.setDirection("sendonly");
          } else {
            transceiver.setDirection("inactive");
            if (known) {
              this.#publishedMids.delete(section.mid);
              stopped.push(section.mid);
            }
          }
        }
      });
      this.#answered = true;
      this.#attachReady();
      this.#negotiateSoon();
      return { answer: withTransportCcFeedback(answer, this.#transportCcMids()), added, stopped };
    });
  }

  /** Applies the client's answer to the pending server offer; false when none is pending. */
  clientAnswer(sdp: unknown): Promise<boolean> {
    parseSections(sdp);
    return this.#run(async () => {
      if (this.#peer.pc.signalingState !== "have-local-offer") return false;
      await this.#peer.acceptAnswer(sdp as string);
      this.#keepTransportCc(sdp as string);
      this.#attachReady();
      this.#negotiateSoon();
      return true;
    });
  }

  /** Delivers `track` of another participant: offered at the next server negotiation. */
  deliver(track: PublishedTrack): void {
    if (this.#closed || this.#receiving.has(track) || this.#pending.includes(track)) return;
    this.#pending.push(track);
    this.#negotiateSoon();
  }

  /**
   * Stops delivering `track`; returns its mid here when the client was told of it (for
   * REMOVE_TRACKS), undefined when it was never offered.
   */
  withdraw(track: PublishedTrack): string | undefined {
    const i = this.#pending.indexOf(track);
    if (i >= 0) this.#pending.splice(i, 1);
    for (const slot of this.#leases.values()) if (slot.track === track) this.#release(slot);
    const receiving = this.#receiving.get(track);
    if (!receiving) return undefined;
    this.#receiving.delete(track);
    if (receiving.subscription) track.unsubscribe(receiving.subscription);
    receiving.enginePath?.close();
    receiving.nacks?.unSubscribe();
    const mid = receiving.transceiver.mid ?? undefined;
    // Stopped rather than left sendonly without media: the subscriber's SDP stays as long as
    // the tracks it receives, not as long as every track ever delivered.
    receiving.transceiver.stop();
    this.#stopsToOffer = true;
    this.#negotiateSoon();
    return mid;
  }

  /** The mid here of a delivered track; undefined when it is not delivered here. */
  midOf(track: PublishedTrack): string | undefined {
    return this.#receiving.get(track)?.transceiver.mid ?? undefined;
  }

  /**
   * The delivered track named by `idOrMid` (its source track id, or its mid here as the SDK
   * names it in lease mode), undefined when none is.
   */
  deliveredTrack(idOrMid: string): PublishedTrack | undefined {
    return this.#slotOf(idOrMid)?.track;
  }

  /**
   * Applies `change` to the subscription of the delivered track `idOrMid` (as for
   * `deliveredTrack`): at once when it forwards already, else when it starts.
   */
  configure(idOrMid: string, change: (subscription: Subscription) => void): void {
    const slot = this.#slotOf(idOrMid);
    if (!slot) return;
    if (slot.subscription) change(slot.subscription);
    else slot.requested.push(change);
  }

  /**
   * leaseTrack: the lease slot at `mid` sends `track` from now on (null empties it). False
   * when there is no slot at `mid` or it cannot carry the track (another kind or codec).
   */
  lease(mid: string, track: PublishedTrack | null): boolean {
    const slot = this.#leases.get(mid);
    if (!slot) return false;
    const codec = slot.transceiver.sender.codec;
    if (
      track && (slot.transceiver.kind !== track.kind ||
        (codec && codec.mimeType.toLowerCase() !== track.codec.params.mimeType.toLowerCase()))
    ) return false;
    this.#release(slot);
    if (!track) return true;
    slot.track = track;
    this.#attachReady();
    return true;
  }

  /**
   * The tracks delivered here, the layer each one forwards (null without layers) and what the
   * client's RTCP said of it.
   */
  incoming(): Map<PublishedTrack, { layer: string | null; feedback: DeliveryFeedback }> {
    const out = new Map<PublishedTrack, { layer: string | null; feedback: DeliveryFeedback }>();
    for (const slot of this.#slots()) {
      if (!slot.track) continue;
      out.set(slot.track, { layer: slot.subscription?.layer ?? null, feedback: slot.feedback });
    }
    return out;
  }

  /** The bitrate the client is told it may publish (REMB), in kbit/s; 0 without. */
  get uplinkKbps(): number {
    return this.#uplink?.estimate.kbps ?? 0;
  }

  /** Closes the connection; delivered tracks stop forwarding here. */
  async close(): Promise<void> {
    if (this.#closed) return;
    this.#closed = true;
    clearInterval(this.#uplink?.timer);
    for (const track of [...this.#receiving.keys()]) this.withdraw(track);
    for (const slot of this.#leases.values()) this.#release(slot);
    this.#pending = [];
    await this.#queue.catch(() => {});
    await this.#peer.close();
  }

  /** Runs one negotiation step after the ones queued before it. */
  #run<T>(step: () => Promise<T>): Promise<T> {
    const result = this.#queue.then(() => {
      if (this.#closed) throw new Error("the participant's peer is closed");
      return step();
    });
    this.#queue = result.catch(() => {});
    return result;
  }

  /** Queues a server offer when tracks wait to be delivered and the peer is stable. */
  #negotiateSoon(): void {
    if (!this.#answered || this.#closed) return;
    if (this.#pending.length === 0 && !this.#stopsToOffer) return;
    this.#run(() => this.#offer()).catch((err) => {
      if (!this.#closed) this.#log.warn("SFU server offer failed", { err });
    });
  }

  async #offer(): Promise<void> {
    const pc = this.#peer.pc;
    if (pc.signalingState !== "stable") return;
    if (this.#pending.length === 0 && !this.#stopsToOffer) return;
    const batch = this.#pending;
    this.#pending = [];
    this.#stopsToOffer = false;
    const added: Receiving[] = [];
    let sdp = await this.#peer.offer(() => {
      for (const track of batch) {
        const transceiver = pc.addTransceiver(track.kind, { direction: "sendonly" });
        transceiver.headerExtensions = this.#offerExtensions(track.kind);
        const codec = this.#codecs.find((c) => c.params.mimeType === track.codec.params.mimeType);
        if (codec) transceiver.setCodecPreferences([codec.params]);
        const receiving: Receiving = { track, transceiver, requested: [], feedback: noFeedback() };
        this.#receiving.set(track, receiving);
        added.push(receiving);
      }
    });
    const tid = crypto.randomUUID();
    sdp = withTransportCcFeedback(sdp, this.#transportCcMids());
    this.#signals.delivering(added.map((r) => ({ track: r.track, mid: r.transceiver.mid ?? "" })));
    this.#signals.offer(sdp, tid);
  }

  /**
   * The header extensions of a transceiver the server offers, under the ids the session
   * already gives their URIs (the client's offers chose them) and unused ids for the rest:
   * werift numbers its own from 1, which may be an id the client gave another extension, and
   * a browser refuses an offer giving one id two meanings in a BUNDLE.
   */
  #offerExtensions(kind: "audio" | "video"): RTCRtpHeaderExtensionParameters[] {
    const inUse = new Map<string, number>();
    for (const t of this.#peer.pc.getTransceivers()) {
      for (const e of t.headerExtensions) if (!inUse.has(e.uri)) inUse.set(e.uri, e.id);
    }
    const taken = new Set(inUse.values());
    const out: RTCRtpHeaderExtensionParameters[] = [];
    const uris = sfuExtensions(kind).map((e) => e.uri);
    if (kind === "video") uris.push(transportCcUri);
    for (const uri of uris) {
      let id = inUse.get(uri);
      if (id === undefined) {
        id = 1;
        while (taken.has(id) && id <= maxExtensionId) id++;
        if (id > maxExtensionId) continue;
        taken.add(id);
      }
      out.push(new RTCRtpHeaderExtensionParameters({ id, uri }));
    }
    return out;
  }

  /** Starts forwarding the delivered tracks whose sender is negotiated, once media is ready. */
  #attachReady(): void {
    if (this.#closed || !this.#peer.mediaReady) return;
    for (const receiving of this.#slots()) {
      const track = receiving.track;
      if (receiving.subscription || !track) continue;
      const sender = receiving.transceiver.sender;
      const codec = sender.codec;
      if (!codec || this.#peer.pc.signalingState !== "stable") continue;
      const absSendTime = receiving.transceiver.headerExtensions.find((e) =>
        e.uri === absSendTimeUri
      );
      const transportCcId = receiving.transceiver.headerExtensions.find((e) =>
        e.uri === transportCcUri
      )?.id;
      const transportCc = transportCcId === undefined
        ? undefined
        : { id: transportCcId, log: this.#transportCc.log ??= new TransportCcLog() };
      const group = new EngineGroup(
        `sfu/${nextEngineGroup++}`,
        absSendTime?.id,
        true,
        transportCcId,
      );
      // The track's subscribers on one Worker: its layer groups' packets go to that one only.
      const enginePath = this.#sendPaths?.open(
        sender,
        codec.payloadType,
        group,
        track.engineAffinity,
        transportCc && { id: transportCc.id, log: transportCc.log.buffer },
      );
      const path: RtpSendPath = enginePath ??
        new WeriftSendPath(sender, codec.payloadType, absSendTime?.id, transportCc);
      receiving.enginePath = enginePath;
      const budget = new RetransmitBudget();
      const subscription = track.subscribe(path);
      receiving.subscription = subscription;
      for (const change of receiving.requested.splice(0)) change(subscription);
      const feedback = receiving.feedback;
      receiving.nacks = sender.onGenericNack.subscribe((nack: GenericNack) => {
        feedback.receivedNACK++;
        subscription.retransmit(nack.lost, budget);
      });
    }
    for (const transport of this.#peer.pc.dtlsTransports) {
      if (this.#rtcpWatched.has(transport)) continue;
      this.#rtcpWatched.add(transport);
      transport.onRtcp.subscribe((rtcp) => {
        this.#keyframeRequest(rtcp);
        this.#lossReport(rtcp);
        this.#estimateReport(rtcp);
        this.#transportCcReport(rtcp);
      });
    }
  }

  /**
   * The client's REMB: its estimate for the video it receives here. Each delivered track it
   * names may use what the others forwarded to it leave of the estimate (a browser's estimate
   * follows what it receives, so an equal split would lower a track because another one is
   * low), plus `estimateTolerance` of the total.
   */
  #estimateReport(rtcp: RtcpPacket): void {
    const remb = readRemb(rtcp);
    if (!remb) return;
    const named = this.#slots().filter((slot) =>
      slot.subscription && slot.track?.kind === "video" &&
      (remb.ssrcs.length === 0 || remb.ssrcs.includes(slot.transceiver.sender.ssrc))
    );
    for (const slot of named) slot.feedback.remb = remb.bps;
    this.#shareEstimate(named, remb.bps / 1000);
  }

  /** Shares a transport's estimate (kbit/s) among the video slots it covers, as for REMB. */
  #shareEstimate(named: Slot[], estimateKbps: number): void {
    const nowMs = performance.now();
    const sending = named.map((slot) => slot.subscription!.sendingKbps(nowMs));
    const totalKbps = sending.reduce((sum, kbps) => sum + kbps, 0);
    named.forEach((slot, i) => {
      const others = totalKbps - sending[i];
      slot.subscription!.onEstimate(estimateKbps + estimateTolerance * totalKbps - others);
    });
  }

  /**
   * The client's transport-cc feedback: which of the transport's numbered packets arrived and
   * when. The estimate it gives (transport_cc_estimate.ts) steers the layers of every video
   * track delivered on the transport, as a REMB covering them all would.
   */
  #transportCcReport(rtcp: RtcpPacket): void {
    const transportCc = this.#transportCc;
    const bytes = transportCcBytes(rtcp);
    if (!transportCc.log || !bytes) return;
    let feedback;
    try {
      feedback = parseTransportCc(bytes);
    } catch (err) {
      if (!(err instanceof ParseError)) throw err;
      this.#log.debug("malformed transport-cc feedback", { reason: err.message });
      return;
    }
    const kbps = transportCc.estimate.onFeedback(feedback, transportCc.log, performance.now());
    const slots = this.#slots();
    for (const slot of slots) slot.feedback.transportCcFeedback = transportCc.estimate.feedbacks;
    if (kbps === undefined) return;
    const named = slots.filter((slot) => slot.subscription && slot.track?.kind === "video");
    for (const slot of named) slot.feedback.transportCcEstimate = Math.round(kbps * 1000);
    this.#shareEstimate(named, kbps);
  }

  /** mids of the transceivers sending to the client with transport-cc. */
  #transportCcMids(): Set<string> {
    const mids = new Set<string>();
    for (const slot of this.#slots()) {
      const { mid, headerExtensions } = slot.transceiver;
      if (mid !== null && headerExtensions.some((e) => e.uri === transportCcUri)) mids.add(mid);
    }
    return mids;
  }

  /**
   * Keeps transport-cc on the delivered tracks' transceivers where `sdp` (the client's offer
   * or answer) has it for their mid: werift keeps only the extensions of its configuration,
   * which leaves transport-cc out so that the client's own (published) tracks do not get it
   * (werift's feedback to a publisher cut a browser's rate, see Peer).
   */
  #keepTransportCc(sdp: string): void {
    const ids = transportCcIds(sdp);
    for (const slot of this.#slots()) {
      const transceiver = slot.transceiver;
      const id = transceiver.mid === null ? undefined : ids.get(transceiver.mid);
      const extensions = transceiver.headerExtensions.filter((e) => e.uri !== transportCcUri);
      if (id !== undefined) {
        extensions.push(new RTCRtpHeaderExtensionParameters({ id, uri: transportCcUri }));
      }
      transceiver.headerExtensions = extensions;
    }
  }

  /** The REMB to the client for the video it publishes: the uplink estimate, updated. */
  #sendUplinkRemb(): void {
    const uplink = this.#uplink;
    const pc = this.#peer.pc;
    if (!uplink || pc.connectionState !== "connected") return;
    const ssrcs: number[] = [];
    let expected = 0;
    let received = 0;
    let receivedKbps = 0;
    let rtcpSsrc: number | undefined;
    const nowMs = performance.now();
    for (const track of uplink.options.published()) {
      if (track.kind !== "video" || track.ssrcs.length === 0) continue;
      ssrcs.push(...track.ssrcs);
      const counts = track.receptionCounts();
      expected += counts.expected;
      received += counts.received;
      receivedKbps += track.monitor.bitratesKbps(nowMs).reduce((sum, kbps) => sum + kbps, 0);
      rtcpSsrc ??= pc.getTransceivers().find((t) => t.mid === track.mid)?.receiver.rtcpSsrc;
    }
    const transport = pc.dtlsTransports[0];
    if (ssrcs.length === 0 || !transport) return;
    const kbps = uplink.estimate.update(expected, received, receivedKbps, nowMs);
    transport.sendRtcp([rembPacket(rtcpSsrc ?? 0, kbps * 1000, ssrcs)]).catch(() => {});
  }

  /** Receiver reports of the client about delivered tracks: their loss steers the layer. */
  #lossReport(rtcp: RtcpPacket): void {
    if (!(rtcp instanceof RtcpRrPacket) && !(rtcp instanceof RtcpSrPacket)) return;
    for (const report of rtcp.reports) {
      for (const r of this.#slots()) {
        if (r.transceiver.sender.ssrc !== report.ssrc) continue;
        r.feedback.fractionLost = report.fractionLost / 256;
        r.feedback.packetsLost = report.packetsLost;
        r.feedback.jitter = report.jitter;
        r.subscription?.onLoss(report.fractionLost);
      }
    }
  }

  /**
   * PLI and FIR (RFC 4585, RFC 5104) of the client, routed by their media SSRC to the track
   * delivered under it. werift routes them by the feedback's sender SSRC first, which a
   * browser sets to the SSRC of a track it publishes on the same connection: they would
   * reach that track's receiver instead.
   */
  #keyframeRequest(rtcp: RtcpPacket): void {
    if (rtcp.type !== 206) return;
    const feedback = (rtcp as RtcpPayloadSpecificFeedback).feedback as {
      count: number;
      mediaSsrc: number;
      fir?: { ssrc: number }[];
    };
    if (feedback.count !== 1 && feedback.count !== 4) return;
    const ssrcs = feedback.count === 4 && feedback.fir?.length
      ? feedback.fir.map((entry) => entry.ssrc)
      : [feedback.mediaSsrc];
    for (const r of this.#slots()) {
      if (!r.track || !ssrcs.includes(r.transceiver.sender.ssrc)) continue;
      if (feedback.count === 4) {
        r.track.feedback.firs++;
        r.feedback.receivedFIR++;
      } else {
        r.track.feedback.plis++;
        r.feedback.receivedPLI++;
      }
      r.subscription?.keyframeNeeded();
    }
  }

  /** Every slot: delivered tracks, then lease slots. */
  #slots(): Slot[] {
    return [...this.#receiving.values(), ...this.#leases.values()];
  }

  /** The slot with a track named by `idOrMid`: a lease slot's mid, else a delivered track. */
  #slotOf(idOrMid: string): Slot | undefined {
    const lease = this.#leases.get(idOrMid);
    if (lease?.track) return lease;
    for (const r of this.#receiving.values()) {
      if (r.track.info.id === idOrMid || r.transceiver.mid === idOrMid) return r;
    }
    return undefined;
  }

  /** Empties a lease slot: its track stops forwarding here. */
  #release(slot: Slot): void {
    if (slot.track && slot.subscription) slot.track.unsubscribe(slot.subscription);
    slot.enginePath?.close();
    slot.nacks?.unSubscribe();
    slot.track = undefined;
    slot.subscription = undefined;
    slot.enginePath = undefined;
    slot.nacks = undefined;
    slot.requested.length = 0;
    Object.assign(slot.feedback, noFeedback());
  }

  #isLease(transceiver: RTCRtpTransceiver): boolean {
    for (const slot of this.#leases.values()) if (slot.transceiver === transceiver) return true;
    return false;
  }

  #isDelivery(transceiver: RTCRtpTransceiver): boolean {
    for (const r of this.#receiving.values()) if (r.transceiver === transceiver) return true;
    return false;
  }

  /** Our codec for what the offer negotiated on `transceiver`, if we take it. */
  #negotiated(transceiver: RTCRtpTransceiver): NegotiatedCodec | undefined {
    const chosen = transceiver.codecs[0];
    if (!chosen) return undefined;
    const ours = this.#codecs.find((c) =>
      c.params.mimeType.toLowerCase() === chosen.mimeType.toLowerCase()
    );
    return ours && { ...ours, params: chosen };
  }
}

/** The transport-cc extension id of each mid of `sdp` that has it. */
function transportCcIds(sdp: string): Map<string, number> {
  const ids = new Map<string, number>();
  let mid: string | undefined;
  let id: number | undefined;
  const end = () => {
    if (mid !== undefined && id !== undefined) ids.set(mid, id);
    mid = id = undefined;
  };
  for (const raw of sdp.split(/\r?\n/)) {
    const line = raw.trim();
    if (line.startsWith("m=")) end();
    else if (line.startsWith("a=mid:")) mid = line.slice(6);
    else if (line.startsWith("a=extmap:") && line.split(" ")[1] === transportCcUri) {
      id = parseInt(line.slice(9), 10);
    }
  }
  end();
  return ids;
}

/**
 * `sdp` with `a=rtcp-fb:<pt> transport-cc` for every payload type of the m-sections of `mids`
 * (werift writes the feedback of its configured codecs only, which must not ask publishers
 * for transport-cc).
 */
function withTransportCcFeedback(sdp: string, mids: ReadonlySet<string>): string {
  if (mids.size === 0) return sdp;
  const sections = sdp.split(/\r\n(?=m=)/);
  return sections.map((section) => {
    const mid = /\r\na=mid:(\S+)/.exec(section)?.[1];
    if (mid === undefined || !mids.has(mid)) return section;
    return section.replace(
      /\r\na=rtpmap:(\d+) [^\r]*/g,
      (line, pt) =>
        section.includes(`a=rtcp-fb:${pt} transport-cc`)
          ? line
          : `${line}\r\na=rtcp-fb:${pt} transport-cc`,
    );
  }).join("\r\n");
}
