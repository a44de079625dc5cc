/**
 * A browser playing a stream that did not come over WebRTC (RTSP, RTMP, VOD, ...): frames are
 * read from the stream (starting at a keyframe), packetized to RTP and sent through the
 * player's peer connection, with sender reports that put every track on the stream's common
 * timeline so the browser keeps audio and video in sync. Audio the browser cannot take is
 * read from the stream's shared Opus conversion instead (see engine/audio_conversion.ts).
 */
import { Buffer } from "node:buffer";
import { RtpHeader, RtpPacket } from "werift";
import type { GenericNack, RTCRtpTransceiver } from "werift";
import { ParseError } from "../../core/errors.ts";
import type { RegisteredStream, StreamRecord } from "../stream_record.ts";
import type { MediaFrame, Track } from "../frame.ts";
import { finalStatus, type StreamClient } from "../protocols/webrtc/client.ts";
import type { NegotiatedCodec } from "../protocols/webrtc/codecs.ts";
import { PacketCache } from "../protocols/webrtc/packet_cache.ts";
import { Peer, type PeerAddress } from "../protocols/webrtc/peer.ts";
import type { TrickleCandidate } from "../protocols/webrtc/sdpfrag.ts";
import { RetransmitBudget } from "../protocols/webrtc/retransmit_budget.ts";
import { type RtpSendPath, WeriftSendPath } from "../protocols/webrtc/send_path.ts";
import { FramePacketizer } from "../rtp/frame_packetizer.ts";
import { H264Packetizer } from "../rtp/h264_packetizer.ts";
import { Vp8Packetizer } from "../rtp/vp8_packetizer.ts";
import type { Packetizer, PacketSink } from "../rtp/packetizer.ts";
import type { Stream, StreamReader } from "../stream.ts";
import { playConnectTimeoutMs } from "./webrtc_player.ts";

/** Time between two sender reports of a track, in milliseconds. */
export const senderReportIntervalMs = 1000;
/** Seconds from the NTP epoch (1900) to the Unix epoch (1970). */
const ntpUnixOffsetSec = 2_208_988_800;

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
}

/** Send state of one track. */
interface SendTrack {
  readonly track: Track;
  readonly path: RtpSendPath;
  readonly packetizer: Packetizer;
  /** RTP clock of the negotiated codec, in Hz. */
  readonly rtpClock: number;
  /** Random start of the RTP timestamps (RFC 3550 §5.1). */
  readonly timestampBase: number;
  /** Sent video packets, for NACKs; none for audio. */
  readonly cache?: PacketCache;
  sequenceNumber: number;
  lastReportMs: number;
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
  readonly #tracks = new Map<number, SendTrack>();
  #status: "PENDING" | "PLAYING" | "ENDED" = "PENDING";
  #timer?: ReturnType<typeof setTimeout>;
  #reader?: StreamReader;
  #sending: Promise<void> = Promise.resolve();
  /** Stream time (s) and NTP time (s) of the first frame sent: the sender reports' anchor. */
  #originPtsSec = NaN;
  #originNtpSec = 0;
  /** Reused for audio packets: WeriftSendPath copies the fields before it returns. */
  readonly #audioPacket = new RtpPacket(new RtpHeader(), Buffer.alloc(0));

  constructor(options: WebRtcFramePlayerOptions) {
    this.#options = options;
    this.source = options.source;
    this.mediaSessionId = options.mediaSessionId;
    this.name = options.source.name;
    this.sessionId = options.sessionId;
    this.#peer = new Peer(options.address, options.codecs);
  }

  /** Answers the offer; sending and the PLAYING status start once the browser connects. */
  async answer(): Promise<string> {
    const pc = this.#peer.pc;
    pc.connectionStateChange.subscribe((state) => {
      if (state === "connected") this.#connected();
      else if (state === "failed") {
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
    this.#reader?.close();
    await this.#sending;
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
    let n = 0;
    for (const t of this.#tracks.values()) n += t.path.packets;
    return n;
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
      transport: "UDP",
      cvoExtension: client.cvoExtension === true,
      createDate: this.createDate,
      mediaType: "play",
      parentMediaSessionId: this.source.mediaSessionId,
    };
  }

  #connected(): void {
    if (this.#status !== "PENDING") return;
    clearTimeout(this.#timer);
    for (const transceiver of this.#peer.pc.getTransceivers()) this.#attach(transceiver);
    this.#status = "PLAYING";
    this.#options.client.status("PLAYING", "", muteFields(this.source));
    this.#reader = this.#options.frames.reader(undefined, "webrtc");
    this.#sending = this.#send(this.#reader);
  }

  #attach(transceiver: RTCRtpTransceiver): void {
    const kind = transceiver.kind as "audio" | "video";
    const sender = transceiver.sender;
    const codec = sender.codec;
    const frames = this.#options.frames;
    const track = frames.tracks.find((t) => t.kind === kind);
    if (!codec || !track) return;
    const path = new WeriftSendPath(sender, codec.payloadType);
    const video = kind === "video";
    const send: SendTrack = {
      track,
      path,
      packetizer: track.codec === "H264"
        ? new H264Packetizer(() => {
          // Read at each keyframe: a provider may learn or change them while playing.
          const config = frames.tracks[track.id].config;
          return config?.codec === "H264" ? [...config.sps, ...config.pps] : [];
        })
        : track.codec === "VP8"
        ? new Vp8Packetizer()
        : new FramePacketizer(),
      rtpClock: codec.clockRate,
      timestampBase: randomUint32(),
      cache: video ? new PacketCache() : undefined,
      sequenceNumber: randomUint32() & 0xffff,
      lastReportMs: -Infinity,
    };
    this.#tracks.set(track.id, send);
    if (!send.cache) return;
    const cache = send.cache;
    const budget = new RetransmitBudget();
    sender.onGenericNack.subscribe((nack: GenericNack) => {
      const nowMs = performance.now();
      for (const seq of nack.lost) {
        const packet = cache.get(seq);
        if (packet && budget.take(nowMs)) path.send(packet);
      }
    });
    // Keyframe requests (PLI, FIR) are not passed on: a non-WebRTC source cannot be asked for
    // one, and this player started at the stream's last keyframe, which is all it can offer.
  }

  async #send(reader: StreamReader): Promise<void> {
    for (;;) {
      const frame = await reader.next();
      if (frame === undefined) break;
      const send = this.#tracks.get(frame.trackId);
      if (send) this.#sendFrame(send, frame);
    }
    reader.close();
  }

  #sendFrame(send: SendTrack, frame: MediaFrame): void {
    const ptsSec = frame.pts / send.track.clockRate;
    if (Number.isNaN(this.#originPtsSec)) {
      this.#originPtsSec = ptsSec;
      this.#originNtpSec = Date.now() / 1000 + ntpUnixOffsetSec;
    }
    const timestamp = (send.timestampBase + Math.round(ptsSec * send.rtpClock)) >>> 0;
    const clockRatio = send.rtpClock / send.track.clockRate;
    const emit: PacketSink = (bytes, marker, offset) => {
      // werift wants a Buffer: a view over the same bytes, not a copy.
      const payload = Buffer.from(bytes.buffer, bytes.byteOffset, bytes.byteLength);
      const packet = send.cache ? new RtpPacket(new RtpHeader(), payload) : this.#audioPacket;
      packet.payload = payload;
      packet.header.marker = marker;
      packet.header.sequenceNumber = send.sequenceNumber;
      packet.header.timestamp = (timestamp + Math.round(offset * clockRatio)) >>> 0;
      send.sequenceNumber = (send.sequenceNumber + 1) & 0xffff;
      send.path.send(packet);
      send.cache?.put(packet);
    };
    try {
      send.packetizer.packetize(frame, emit);
    } catch (err) {
      if (!(err instanceof ParseError)) throw err;
      // A malformed frame is skipped; the next one goes out as usual.
      return;
    }
    const nowMs = performance.now();
    if (nowMs - send.lastReportMs >= senderReportIntervalMs) {
      send.lastReportMs = nowMs;
      const ntpSec = this.#originNtpSec + (ptsSec - this.#originPtsSec);
      send.path.sendSenderReport(toNtp(ntpSec), timestamp);
    }
  }
}

/** A 64-bit NTP timestamp of `seconds` since 1900. */
function toNtp(seconds: number): bigint {
  const whole = Math.floor(seconds);
  return (BigInt(whole) << 32n) | BigInt(Math.floor((seconds - whole) * 2 ** 32));
}

function randomUint32(): number {
  return crypto.getRandomValues(new Uint32Array(1))[0];
}

/** The source's mute state, for status events (a player joining late learns it). */
function muteFields(source: Stream): Record<string, unknown> {
  return { audioState: { ...source.audioState }, videoState: { ...source.videoState } };
}
