/**
 * Sends the frames of a stream through the senders of a werift peer: packetized to RTP, with
 * sender reports that put every track on the stream's common timeline (so the browser keeps
 * audio and video in sync), and NACKs of video answered from a cache of sent packets. Used by
 * WebRTC frame players and by the peer of a SIP call. Given the server's send engine, a track
 * attached after the DTLS handshake is sent by the engine's Workers (werift keeps RTCP).
 */
import { Buffer } from "node:buffer";
import { RtpHeader, RtpPacket } from "werift";
import type { GenericNack, RTCRtpTransceiver } from "werift";
import { ParseError } from "../../core/errors.ts";
import type { MediaFrame, Track } from "../frame.ts";
import { PacketCache } from "../protocols/webrtc/packet_cache.ts";
import { RetransmitBudget } from "../protocols/webrtc/retransmit_budget.ts";
import { type RtpSendPath, WeriftSendPath } from "../protocols/webrtc/send_path.ts";
import {
  EngineGroup,
  EngineSendPath,
  type EngineSendPaths,
} from "../protocols/webrtc/engine_send_path.ts";
import { FramePacketizer } from "../rtp/frame_packetizer.ts";
import { H264Packetizer } from "../rtp/h264_packetizer.ts";
import { Vp8Packetizer } from "../rtp/vp8_packetizer.ts";
import type { Packetizer, PacketSink } from "../rtp/packetizer.ts";
import type { Stream, StreamReader } from "../stream.ts";

/** Time between two sender reports of a track, in milliseconds. */
export const senderReportIntervalMs = 1000;
/** Seconds from the NTP epoch (1900) to the Unix epoch (1970). */
const ntpUnixOffsetSec = 2_208_988_800;

/**
 * The engine groups of frame players. Packets are made per player, so each goes to its one
 * player (`EngineSendPath.send`), never to a whole group: one group per kind serves every
 * player, and the engine's table of group names stays bounded.
 */
const frameGroups = {
  audio: new EngineGroup("frame-players/audio"),
  video: new EngineGroup("frame-players/video"),
};

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

/** Reads a stream's frames and sends them through the attached senders. */
export class FrameSender {
  readonly #frames: Stream;
  readonly #engine?: EngineSendPaths;
  readonly #tracks = new Map<number, SendTrack>();
  #reader?: StreamReader;
  #sending: Promise<void> = Promise.resolve();
  /** Stream time (s) and NTP time (s) of the first frame sent: the sender reports' anchor. */
  #originPtsSec = NaN;
  #originNtpSec = 0;
  /** Reused for audio packets: WeriftSendPath copies the fields before it returns. */
  readonly #audioPacket = new RtpPacket(new RtpHeader(), Buffer.alloc(0));

  /**
   * `frames`: what is sent (a stream, or its audio conversion). `engine`: the server's send
   * engine, only for peers on the ICE mux (the engine sends from the mux's socket).
   */
  constructor(frames: Stream, engine?: EngineSendPaths) {
    this.#frames = frames;
    this.#engine = engine;
  }

  /**
   * Sends the stream's track of the transceiver's kind through its sender (once negotiated).
   * Attached once the peer is connected (DTLS keys and the selected pair known), the track
   * goes through the send engine when there is one; werift's path otherwise.
   */
  attach(transceiver: RTCRtpTransceiver): void {
    this.#attach(transceiver);
  }

  /** Starts reading the stream (at its last keyframe) and sending. */
  start(): void {
    if (this.#reader) return;
    this.#reader = this.#frames.reader(undefined, "webrtc");
    this.#sending = this.#send(this.#reader);
  }

  /** Stops reading; resolves once the last frame read has been sent. Leaves the engine. */
  async stop(): Promise<void> {
    this.#reader?.close();
    await this.#sending;
    for (const { path } of this.#tracks.values()) {
      if (path instanceof EngineSendPath) path.close();
    }
  }

  /** Packets sent, all tracks. */
  get packetsSent(): number {
    let n = 0;
    for (const t of this.#tracks.values()) n += t.path.packets;
    return n;
  }

  /** Packets lost on the server (socket buffer full, or too many in flight), all tracks. */
  get packetsDropped(): number {
    let n = 0;
    for (const t of this.#tracks.values()) n += t.path.dropped;
    return n;
  }

  #attach(transceiver: RTCRtpTransceiver): void {
    const kind = transceiver.kind as "audio" | "video";
    const sender = transceiver.sender;
    const codec = sender.codec;
    const frames = this.#frames;
    const track = frames.tracks.find((t) => t.kind === kind);
    if (!codec || !track) return;
    const path: RtpSendPath = this.#engine?.open(sender, codec.payloadType, frameGroups[kind]) ??
      new WeriftSendPath(sender, codec.payloadType);
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
