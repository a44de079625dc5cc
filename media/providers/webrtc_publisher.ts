/**
 * A stream published from a browser over WebRTC. Its RTP is forwarded to WebRTC players as
 * it came (no depacketizing): players' keyframe requests reach the publisher, their NACKs are
 * answered from one packet cache per track, and the publisher's sender reports are passed on
 * so players keep audio and video in sync. It is also a Stream of the media core: MediaFrames
 * are made only while a reader (recorder, snapshot, ...) is attached.
 */
import type {
  MediaStreamTrack,
  RtcpPacket,
  RTCRtpReceiver,
  RTCRtpTransceiver,
  RtpPacket,
} from "werift";
import { RtcpSrPacket } from "werift";
import type { StreamRecord } from "../stream_record.ts";
import type { MediaFrame, Track } from "../frame.ts";
import { ParseError } from "../../core/errors.ts";
import { type Logger, silentLogger } from "../../core/log.ts";
import { VideoDtsDeriver } from "../codecs/dts_deriver.ts";
import type { Depacketizer } from "../rtp/depacketizer.ts";
import { FrameDepacketizer } from "../rtp/frame_depacketizer.ts";
import { H264Depacketizer } from "../rtp/h264_depacketizer.ts";
import { RtpTimeline } from "../rtp/timeline.ts";
import { Stream } from "../stream.ts";
import { Vp8Depacketizer } from "../protocols/webrtc/vp8_depacketizer.ts";
import { finalStatus, type StreamClient } from "../protocols/webrtc/client.ts";
import type { NegotiatedCodec } from "../protocols/webrtc/codecs.ts";
import { LatencyHistogram } from "../protocols/webrtc/latency.ts";
import { PacketCache } from "../protocols/webrtc/packet_cache.ts";
import {
  negotiatesRemb,
  type PublishBitrate,
  PublishRemb,
} from "../protocols/webrtc/publish_remb.ts";
import { Peer, type PeerAddress } from "../protocols/webrtc/peer.ts";
import type { TrickleCandidate } from "../protocols/webrtc/sdpfrag.ts";
import type { RetransmitBudget } from "../protocols/webrtc/retransmit_budget.ts";
import type { RtpSendPath } from "../protocols/webrtc/send_path.ts";
import { EngineGroup, EngineSendPath } from "../protocols/webrtc/engine_send_path.ts";
import { TrackMeter } from "../protocols/webrtc/track_meter.ts";
import { h264ParameterSets } from "../protocols/webrtc/video_payload.ts";

/** Shortest time between two keyframe requests sent to the publisher, in milliseconds. */
export const pliMinIntervalMs = 250;
/** Time the browser has to connect and send its first packet, in milliseconds. */
export const mediaStartTimeoutMs = 15_000;
/**
 * How long frames are still made after the last non-RTP reader left, in milliseconds: a
 * reader that follows soon after (a snapshot then a recording, ffprobe then a player)
 * starts at once from the cached GOP instead of waiting for a keyframe.
 */
export const framesLingerMs = 5000;

/** What a publisher is built from. */
export interface WebRtcPublisherOptions {
  name: string;
  mediaSessionId: string;
  /** sessionId of the signaling session that publishes. */
  sessionId: string;
  appKey: string;
  nodeId: string;
  /** The stream object the client sent, without `sdp` (for records and status events). */
  clientStream: Record<string, unknown>;
  /** The SDP offer. */
  sdp: string;
  /** Codec of each offered m-line, in offer order. */
  codecs: NegotiatedCodec[];
  address: PeerAddress;
  client: StreamClient;
  /** Called once when media starts flowing (the PUBLISHING status). */
  onPublishing?: () => void;
  /** Where connection failures are logged (info, with what ICE and DTLS reached). */
  log?: Logger;
  /** Time the browser has to connect and send media; `mediaStartTimeoutMs` by default. */
  mediaStartTimeoutMs?: number;
  /**
   * A peer its owner negotiates (a SIP call's sendrecv peer): the publisher then only reads
   * the transceivers given to `receiveOn`, and `answer` is not used.
   */
  peer?: Peer;
  /**
   * Tell the publisher (REMB, when its offer has goog-remb) it may send its video at up to
   * `maxKbps` while nothing is lost; without it, a browser stays near its starting rate.
   */
  remb?: PublishBitrate;
}

/** What the publisher needs of its players. */
export interface PublisherPlayer {
  /** Ends the play because the stream ended. */
  stop(info: string): Promise<void>;
  /** Delivers a stream event to the player's client. */
  event(event: Record<string, unknown>): void;
}

/** Per-track forwarding state. */
interface ForwardTrack {
  readonly codec: NegotiatedCodec;
  readonly track: Track;
  readonly meter: TrackMeter;
  readonly cache: PacketCache;
  /** Paths sent to one by one (werift's). */
  readonly paths: RtpSendPath[];
  /** The track's group on the send engine and the paths in it: one publish per packet. */
  readonly engineGroup: EngineGroup;
  readonly enginePaths: EngineSendPath[];
  receiver?: RTCRtpReceiver;
  mediaSsrc?: number;
  /** REMB to the publisher about this (video) track, with `remb` in the options. */
  remb?: PublishRemb;
  /** Set while a frame reader is attached. */
  depacketizer?: Depacketizer;
  /** Next sequence number the depacketizer expects; -1 before the first. */
  expectedSeq: number;
  /** Last sender report of the publisher: NTP time (s) and RTP timestamp. */
  srNtpSeconds: number;
  srRtpTimestamp: number;
  lastTimestamp: number;
  /** Latest H.264 parameter sets seen. */
  sps?: Uint8Array;
  pps?: Uint8Array;
}

/** A WebRTC publish: peer connection, forwarding, and the media-core Stream. */
export class WebRtcPublisher extends Stream {
  readonly sessionId: string;
  readonly appKey: string;
  readonly nodeId: string;
  readonly clientStream: Record<string, unknown>;
  /** Time from a packet's arrival to the send of its last forwarded copy. */
  readonly forwardLatency = new LatencyHistogram();
  readonly #peer: Peer;
  readonly #sdp: string;
  readonly #client: StreamClient;
  readonly #onPublishing?: () => void;
  readonly #forward: ForwardTrack[];
  readonly #players = new Set<PublisherPlayer>();
  readonly #remb?: PublishBitrate;
  #status: "PENDING" | "PUBLISHING" | "ENDED" = "PENDING";
  #lastPliMs = -Infinity;
  #timeline?: RtpTimeline;
  /** Decode times of the video tracks (RTP carries presentation times only), with the timeline. */
  #dts = new Map<number, VideoDtsDeriver>();
  #startTimer?: ReturnType<typeof setTimeout>;
  /** performance.now() when the answer was made, for the time media took to start. */
  #answeredMs = 0;
  readonly #log: Logger;
  readonly #mediaStartTimeoutMs: number;
  /** Frames are being made and no video keyframe has come since. */
  #awaitingKeyframe = false;
  /** performance.now() of the last packet that arrived while a non-RTP reader was attached. */
  #lastReaderMs = -Infinity;

  constructor(options: WebRtcPublisherOptions) {
    super({
      name: options.name,
      mediaSessionId: options.mediaSessionId,
      tracks: options.codecs.map((c, id) => ({
        id,
        kind: c.kind,
        codec: c.codec,
        clockRate: c.params.clockRate,
        ...(c.kind === "audio"
          ? { sampleRate: c.params.clockRate, channels: c.params.channels ?? 2 }
          : {}),
      })),
      mediaProvider: "WebRTC",
      // terminate() is overridden: the peer is closed there, before the Stream ends.
      stopProvider: () => Promise.resolve(),
    });
    this.sessionId = options.sessionId;
    this.appKey = options.appKey;
    this.nodeId = options.nodeId;
    this.clientStream = options.clientStream;
    this.#sdp = options.sdp;
    this.#client = options.client;
    this.#onPublishing = options.onPublishing;
    this.#log = options.log ?? silentLogger;
    this.#mediaStartTimeoutMs = options.mediaStartTimeoutMs ?? mediaStartTimeoutMs;
    this.#forward = options.codecs.map((codec, i) => ({
      codec,
      track: this.tracks[i],
      meter: new TrackMeter(codec.codec, codec.params.payloadType),
      cache: new PacketCache(),
      paths: [],
      engineGroup: new EngineGroup(`${options.mediaSessionId}/${i}`),
      enginePaths: [],
      expectedSeq: -1,
      srNtpSeconds: 0,
      srRtpTimestamp: 0,
      lastTimestamp: 0,
    }));
    this.#remb = options.remb;
    this.#peer = options.peer ?? new Peer(options.address, options.codecs);
  }

  /** Receives the media of `transceivers` of the owner's peer (see `peer` in the options). */
  receiveOn(transceivers: readonly RTCRtpTransceiver[]): void {
    for (const transceiver of transceivers) this.#bind(transceiver);
  }

  /** The codec of the first track of `kind`, if the stream has one. */
  codecOf(kind: "audio" | "video"): NegotiatedCodec | undefined {
    return this.#forward.find((f) => f.codec.kind === kind)?.codec;
  }

  /** Answers the offer; media and the PUBLISHING status follow once the browser connects. */
  async answer(): Promise<string> {
    const pc = this.#peer.pc;
    this.#peer.onFailed((phase, diagnostics) => {
      const info = phase === "dtls"
        ? "Failed by DTLS error"
        : this.#status === "PUBLISHING"
        ? "Failed by ICE keep alive"
        : "Failed by ICE error";
      this.#log.info("WebRTC publish failed", { ...this.#logFields(), info, diagnostics });
      void this.terminate(info);
    });
    const answer = await this.#peer.answer(this.#sdp, () => {
      for (const transceiver of pc.getTransceivers()) {
        transceiver.setDirection("recvonly");
        this.#bind(transceiver);
      }
    });
    this.#answeredMs = performance.now();
    this.#startTimer = setTimeout(() => {
      this.#log.info("WebRTC publish failed: no media from the browser", {
        ...this.#logFields(),
        info: "Failed by ICE timeout",
        timeoutMs: this.#mediaStartTimeoutMs,
        diagnostics: this.#peer.diagnostics(),
      });
      void this.terminate("Failed by ICE timeout");
    }, this.#mediaStartTimeoutMs);
    return answer;
  }

  /** Adds candidates the client trickled (WHIP/WHEP PATCH). */
  addRemoteCandidates(candidates: readonly TrickleCandidate[]): Promise<void> {
    return this.#peer.addRemoteCandidates(candidates);
  }

  /** Fields naming this stream in log lines. */
  #logFields(): Record<string, unknown> {
    return { name: this.name, mediaSessionId: this.mediaSessionId, sessionId: this.sessionId };
  }

  /** Attaches a player's send path of `kind`; it gets a keyframe soon. */
  attachPath(kind: "audio" | "video", path: RtpSendPath): void {
    const forward = this.#forward.find((f) => f.codec.kind === kind);
    if (!forward) return;
    if (path instanceof EngineSendPath) forward.enginePaths.push(path);
    else forward.paths.push(path);
    if (kind === "video") this.requestKeyframe();
  }

  /** Detaches a send path. */
  detachPath(path: RtpSendPath): void {
    for (const forward of this.#forward) {
      const list: RtpSendPath[] = path instanceof EngineSendPath
        ? forward.enginePaths
        : forward.paths;
      const i = list.indexOf(path);
      if (i >= 0) list.splice(i, 1);
    }
  }

  /** The send-engine group of the first track of `kind` (what engine paths of players join). */
  engineGroup(kind: "audio" | "video"): EngineGroup | undefined {
    return this.#forward.find((f) => f.codec.kind === kind)?.engineGroup;
  }

  /** Registers a player to stop when this stream ends. */
  addPlayer(player: PublisherPlayer): void {
    this.#players.add(player);
  }

  /** Forgets a player. */
  removePlayer(player: PublisherPlayer): void {
    this.#players.delete(player);
  }

  /** Packets resent to players from the packet cache, all tracks. */
  get retransmittedPackets(): number {
    return this.#forward.reduce((n, f) => n + f.meter.retransmitted, 0);
  }

  /** RTP packets and payload bytes received from the publisher, all tracks. */
  get receivedRtp(): { packets: number; bytes: number } {
    let packets = 0;
    let bytes = 0;
    for (const f of this.#forward) {
      packets += f.meter.packets;
      bytes += f.meter.bytes;
    }
    return { packets, bytes };
  }

  /** Number of players attached. */
  get playerCount(): number {
    return this.#players.size;
  }

  /** Asks the publisher for a keyframe (PLI), at most once per `pliMinIntervalMs`. */
  override requestKeyframe(): void {
    const nowMs = performance.now();
    if (nowMs - this.#lastPliMs < pliMinIntervalMs) return;
    const video = this.#forward.find((f) => f.codec.kind === "video");
    if (!video?.receiver || video.mediaSsrc === undefined) return;
    this.#lastPliMs = nowMs;
    video.meter.plis++;
    video.receiver.sendRtcpPLI(video.mediaSsrc).catch(() => {});
  }

  /** Resends cached packets of `kind` a player reported lost, as far as its budget allows. */
  retransmit(
    kind: "audio" | "video",
    path: RtpSendPath,
    sequenceNumbers: readonly number[],
    budget: RetransmitBudget,
  ): void {
    const forward = this.#forward.find((f) => f.codec.kind === kind);
    if (!forward) return;
    forward.meter.nacks++;
    const nowMs = performance.now();
    for (const seq of sequenceNumbers) {
      const packet = forward.cache.get(seq);
      if (!packet || !budget.take(nowMs)) continue;
      path.send(packet);
      forward.meter.retransmitted++;
    }
  }

  /** True once media flows. */
  get publishing(): boolean {
    return this.#status === "PUBLISHING";
  }

  /**
   * Delivers a stream event to the players forwarding this publisher's RTP; returns how many
   * (media/publishers/stream_events.ts reaches every other Web SDK player).
   */
  sendEvent(event: Record<string, unknown>): number {
    for (const player of this.#players) player.event(event);
    return this.#players.size;
  }

  /** Stops publishing: players stop, the peer closes, the client gets the final status. */
  override async terminate(info: string): Promise<void> {
    await this.#stop(info);
    this.end();
  }

  override record(options: { metrics?: boolean } = {}): StreamRecord {
    const base = super.record();
    const nowMs = performance.now();
    for (const f of this.#forward) f.meter.refresh(nowMs);
    const video = this.#forward.find((f) => f.codec.kind === "video")?.meter;
    const audio = this.#forward.find((f) => f.codec.kind === "audio")?.meter;
    const record: StreamRecord = {
      ...base,
      custom: (this.clientStream.custom as Record<string, unknown> | undefined) ?? {},
      nodeId: this.nodeId,
      appKey: this.appKey,
      sessionId: this.sessionId,
      status: this.#status === "PUBLISHING"
        ? "PUBLISHING"
        : this.#status === "PENDING"
        ? "PENDING"
        : "UNPUBLISHED",
      sdp: this.#sdp,
      width: video?.width ?? 0,
      height: video?.height ?? 0,
      bitrate: (video?.kbps ?? 0) + (audio?.kbps ?? 0),
      minBitrate: numberField(this.clientStream.minBitrate),
      maxBitrate: numberField(this.clientStream.maxBitrate),
      fps: video?.fps ?? 0,
      gop: video?.gopSize ?? 0,
      audioBitrate: audio?.kbps ?? 0,
      transport: this.#peer.transport === "tcp" ? "TCP" : "UDP",
      cvoExtension: this.clientStream.cvoExtension === true,
      mediaType: "publish",
      audioState: { ...this.audioState },
      videoState: { ...this.videoState },
    };
    delete record.metrics;
    if (options.metrics) {
      const [videoSync, audioSync] = this.#syncMs();
      record.metrics = {
        VIDEO_SYNC: videoSync,
        AUDIO_SYNC: audioSync,
        VIDEO_K_FRAMES: video?.keyFrames ?? 0,
        VIDEO_P_FRAMES: video?.pFrames ?? 0,
        VIDEO_B_FRAMES: video?.bFrames ?? 0,
        VIDEO_NACK: video?.nacks ?? 0,
        VIDEO_PLI: video?.plis ?? 0,
        VIDEO_LOST: video?.lost ?? 0,
        AUDIO_LOST: audio?.lost ?? 0,
        VIDEO_RATE: video?.kbps ?? 0,
        AUDIO_RATE: audio?.kbps ?? 0,
        VIDEO_CODEC: video?.payloadType ?? 0,
        AUDIO_CODEC: audio?.payloadType ?? 0,
        VIDEO_WIDTH: video?.width ?? 0,
        VIDEO_HEIGHT: video?.height ?? 0,
        VIDEO_FPS: video?.fps ?? 0,
        VIDEO_GOP_SIZE: video?.gopSize ?? 0,
      };
    }
    return record;
  }

  /**
   * How far, in ms, the latest video (first) and audio (second) packets lead the other
   * track in capture time, from the publisher's sender reports; 0 until both have one.
   */
  #syncMs(): [number, number] {
    const video = this.#forward.find((f) => f.codec.kind === "video");
    const audio = this.#forward.find((f) => f.codec.kind === "audio");
    if (!video?.srNtpSeconds || !audio?.srNtpSeconds) return [0, 0];
    const capture = (f: ForwardTrack) =>
      f.srNtpSeconds + (((f.lastTimestamp - f.srRtpTimestamp) | 0) / f.codec.params.clockRate);
    const lead = Math.round((capture(video) - capture(audio)) * 1000);
    return [lead, -lead];
  }

  #bind(transceiver: RTCRtpTransceiver): void {
    const index = this.#forward.findIndex((f) =>
      f.codec.kind === transceiver.kind && f.receiver === undefined
    );
    if (index < 0) return;
    const forward = this.#forward[index];
    forward.receiver = transceiver.receiver;
    // werift's answer keeps the offer's feedback: goog-remb when the publisher offered it.
    if (this.#remb && forward.codec.kind === "video" && negotiatesRemb(transceiver)) {
      forward.remb = new PublishRemb(this.#remb, transceiver.receiver);
    }
    // werift may create the remote track while applying the offer, before this runs.
    const listen = (track: MediaStreamTrack) =>
      track.onReceiveRtp.subscribe((rtp) => this.#onRtp(forward, rtp));
    transceiver.receiver.tracks.forEach(listen);
    transceiver.onTrack.subscribe(listen);
    transceiver.receiver.onRtcp.subscribe((rtcp) => this.#onRtcp(forward, rtcp));
  }

  #onRtp(forward: ForwardTrack, packet: RtpPacket): void {
    if (this.ended) return;
    const arrivalMs = performance.now();
    forward.remb?.count(packet, arrivalMs);
    // Padding-only packets are bandwidth probes: nothing to forward.
    if (packet.payload.length === 0) return;
    if (this.#status === "PENDING") this.#started();
    forward.mediaSsrc ??= packet.header.ssrc;
    if (forward.meter.add(packet, arrivalMs)) {
      forward.track.width = forward.meter.width || undefined;
      forward.track.height = forward.meter.height || undefined;
    }
    if (forward.codec.codec === "H264") this.#keepParameterSets(forward, packet.payload);
    forward.lastTimestamp = packet.header.timestamp;
    if (forward.codec.kind === "video") forward.cache.put(packet);
    const paths = forward.paths;
    for (let i = 0; i < paths.length; i++) paths[i].send(packet);
    const enginePaths = forward.enginePaths;
    if (enginePaths.length > 0) forward.engineGroup.publish(enginePaths[0].engine, packet);
    if (paths.length > 0 || enginePaths.length > 0) {
      this.forwardLatency.add(performance.now() - arrivalMs);
    }
    if (this.readerCount > 0) this.#lastReaderMs = arrivalMs;
    if (arrivalMs - this.#lastReaderMs < framesLingerMs) this.#toFrames(forward, packet);
    else if (this.#timeline) this.#stopFrames();
  }

  /**
   * Feeds the media core. Depacketizers and the timeline are made when a reader appears;
   * readers start at a keyframe, so one is asked for.
   */
  #toFrames(forward: ForwardTrack, packet: RtpPacket): void {
    if (!this.#timeline) {
      this.#timeline = new RtpTimeline(this.tracks);
      this.#timeline.startSession([]);
      this.#dts.clear();
      for (const track of this.tracks) {
        if (track.kind === "video") this.#dts.set(track.id, new VideoDtsDeriver(track));
      }
      this.#awaitingKeyframe = true;
    }
    // Asked again (rate-limited) until one comes: a request before the first video packet,
    // or a lost PLI, would otherwise leave new readers waiting a whole GOP.
    if (this.#awaitingKeyframe) this.requestKeyframe();
    forward.depacketizer ??= depacketizerFor(forward.track);
    const { header } = packet;
    if (forward.expectedSeq >= 0 && header.sequenceNumber !== forward.expectedSeq) {
      forward.depacketizer.reset();
    }
    forward.expectedSeq = (header.sequenceNumber + 1) & 0xffff;
    try {
      forward.depacketizer.push({
        marker: header.marker,
        payloadType: header.payloadType,
        sequenceNumber: header.sequenceNumber,
        timestamp: header.timestamp,
        ssrc: header.ssrc,
        payload: packet.payload,
      }, this.#emit);
    } catch (err) {
      if (!(err instanceof ParseError)) throw err;
      // The damaged unit is dropped; the next one starts clean.
    }
  }

  readonly #emit = (frame: MediaFrame): void => {
    if (frame.keyframe && this.tracks[frame.trackId]?.kind === "video") {
      this.#awaitingKeyframe = false;
    }
    const pts = this.#timeline!.pts(frame.trackId, frame.pts);
    const timed = { ...frame, pts, dts: pts };
    this.#dts.get(frame.trackId)?.derive(timed);
    this.push(timed);
  };

  /** Keeps the latest SPS and PPS on the track, so a reader attaching later can start at once. */
  #keepParameterSets(forward: ForwardTrack, payload: Uint8Array): void {
    const type = payload[0] & 0x1f;
    if (type !== 7 && type !== 8 && type !== 24) return;
    for (const nal of h264ParameterSets(payload)) {
      if ((nal[0] & 0x1f) === 7) forward.sps = nal.slice();
      else forward.pps = nal.slice();
    }
    if (forward.sps && forward.pps) {
      forward.track.config = { codec: "H264", sps: [forward.sps], pps: [forward.pps] };
    }
  }

  /** The last reader left a while ago: frames are no longer made (a new reader starts afresh). */
  #stopFrames(): void {
    this.#timeline = undefined;
    // The next frames start on a new timeline, after a gap: the cached GOP does not lead
    // to them.
    this.dropCachedGop();
    for (const forward of this.#forward) {
      forward.depacketizer = undefined;
      forward.expectedSeq = -1;
    }
  }

  #onRtcp(forward: ForwardTrack, rtcp: RtcpPacket): void {
    if (!(rtcp instanceof RtcpSrPacket) || rtcp.ssrc !== forward.mediaSsrc) return;
    const { ntpTimestamp, rtpTimestamp } = rtcp.senderInfo;
    forward.srNtpSeconds = Number(ntpTimestamp >> 32n) +
      Number(ntpTimestamp & 0xffffffffn) / 2 ** 32;
    forward.srRtpTimestamp = rtpTimestamp;
    this.#timeline?.senderReport(forward.track.id, {
      ssrc: rtcp.ssrc,
      ntpMs: ntpToMs(ntpTimestamp),
      rtpTimestamp,
    });
    for (const path of forward.paths) path.sendSenderReport(ntpTimestamp, rtpTimestamp);
    for (const path of forward.enginePaths) path.sendSenderReport(ntpTimestamp, rtpTimestamp);
  }

  #started(): void {
    this.#status = "PUBLISHING";
    clearTimeout(this.#startTimer);
    this.#log.debug("WebRTC publish: media started", {
      ...this.#logFields(),
      afterAnswerMs: Math.round(performance.now() - this.#answeredMs),
    });
    this.#client.status("PUBLISHING", "", this.#muteFields());
    this.#onPublishing?.();
  }

  #muteFields(): Record<string, unknown> {
    return { audioState: { ...this.audioState }, videoState: { ...this.videoState } };
  }

  async #stop(info: string): Promise<void> {
    if (this.#status === "ENDED") return;
    this.#status = "ENDED";
    clearTimeout(this.#startTimer);
    const playerInfo = info === "Stopped by rest /terminate" ? info : "Stopped by publisher stop";
    const players = [...this.#players];
    this.#players.clear();
    await Promise.allSettled(players.map((p) => p.stop(playerInfo)));
    for (const forward of this.#forward) {
      forward.remb?.close();
      forward.paths.length = 0;
      forward.enginePaths.length = 0;
      forward.cache.clear();
    }
    await this.#peer.close();
    this.#client.status(finalStatus(info, "UNPUBLISHED"), info, this.#muteFields());
  }
}

/** The depacketizer of a track's codec. */
function depacketizerFor(track: Track): Depacketizer {
  if (track.codec === "H264") return new H264Depacketizer(track.id);
  if (track.codec === "VP8") return new Vp8Depacketizer(track.id);
  return new FrameDepacketizer(track.id, "OPUS");
}

/** A 64-bit NTP timestamp in milliseconds since 1900. */
function ntpToMs(ntp: bigint): number {
  return Number(ntp >> 32n) * 1000 + Number(ntp & 0xffffffffn) * 1000 / 2 ** 32;
}

function numberField(value: unknown): number {
  return typeof value === "number" && Number.isInteger(value) ? value : 0;
}
