/**
 * A published track of an SFU participant as an ordinary Stream (WCS's SFU bridge): the
 * stream subscribes to the track like one more room subscriber, so a simulcast video follows
 * the highest layer alive through its own SimulcastSwitch (one continuous stream, switched at
 * keyframes). MediaFrames are made only while a reader (Web SDK player, recorder, RTMP push,
 * HLS, ...) is attached, and for `framesLingerMs` after the last one left.
 */
import type { RtpPacket as WeriftRtpPacket } from "werift";
import { ParseError } from "../../core/errors.ts";
import { VideoDtsDeriver } from "../codecs/dts_deriver.ts";
import type { MediaFrame, Track } from "../frame.ts";
import type { Depacketizer } from "../rtp/depacketizer.ts";
import { FrameDepacketizer } from "../rtp/frame_depacketizer.ts";
import { H264Depacketizer } from "../rtp/h264_depacketizer.ts";
import { RtpTimeline } from "../rtp/timeline.ts";
import { Stream } from "../stream.ts";
import { Vp8Depacketizer } from "../protocols/webrtc/vp8_depacketizer.ts";
import type { RtpSendPath } from "../protocols/webrtc/send_path.ts";
import { TrackMeter } from "../protocols/webrtc/track_meter.ts";
import { h264ParameterSets } from "../protocols/webrtc/video_payload.ts";
import { framesLingerMs } from "../providers/webrtc_publisher.ts";
import type { PublishedTrack, Subscription } from "./published_track.ts";

/** The bridge stream's name of a track: `{room}-{nickname}-VIDEO`, `-VIDEO-screen`, `-AUDIO`. */
export function bridgeStreamName(room: string, nickname: string, track: PublishedTrack): string {
  const base = `${room}-${nickname}-${track.info.type}`;
  return track.info.type === "VIDEO" && track.info.contentType === "screen"
    ? `${base}-screen`
    : base;
}

/** One SFU track as a Stream of the media core. */
export class BridgeStream extends Stream {
  readonly #source: PublishedTrack;
  readonly #subscription: Subscription;
  readonly #meter: TrackMeter;
  #timeline?: RtpTimeline;
  /** Decode times of video frames (RTP carries presentation times only). */
  #dts?: VideoDtsDeriver;
  #depacketizer?: Depacketizer;
  /** Next sequence number the depacketizer expects; -1 before the first. */
  #expectedSeq = -1;
  /** Frames are being made and no video keyframe has come since. */
  #awaitingKeyframe = false;
  /** performance.now() of the last packet that came while a reader was attached. */
  #lastReaderMs = -Infinity;
  #sps?: Uint8Array;
  #pps?: Uint8Array;

  constructor(name: string, source: PublishedTrack) {
    const { codec } = source;
    const track: Track = {
      id: 0,
      kind: codec.kind,
      codec: codec.codec,
      clockRate: codec.params.clockRate,
      ...(codec.kind === "audio"
        ? { sampleRate: codec.params.clockRate, channels: codec.params.channels ?? 2 }
        : {}),
    };
    super({
      name,
      mediaSessionId: crypto.randomUUID(),
      tracks: [track],
      mediaProvider: "WebRTC",
      stopProvider: () => {
        this.#source.unsubscribe(this.#subscription);
        return Promise.resolve();
      },
    });
    this.#source = source;
    this.#meter = new TrackMeter(codec.codec, codec.params.payloadType);
    const path: RtpSendPath = {
      // The SSRC the simulcast switch writes; the packets never leave the process.
      ssrc: (Math.random() * 0xffffffff) >>> 0,
      packets: 0,
      octets: 0,
      dropped: 0,
      send: (packet) => this.#onRtp(packet),
      sendSenderReport: () => {},
    };
    this.#subscription = source.subscribe(path);
  }

  /** Asks the participant for a keyframe of the layer forwarded. */
  override requestKeyframe(): void {
    if (this.#source.kind === "video") this.#subscription.keyframeNeeded();
  }

  /** The participant left or stopped the track: readers end, the subscription is dropped. */
  close(): void {
    this.#source.unsubscribe(this.#subscription);
    this.end();
  }

  #onRtp(packet: WeriftRtpPacket): void {
    if (this.ended) return;
    const nowMs = performance.now();
    if (this.#meter.add(packet, nowMs) && this.#meter.width > 0) {
      this.tracks[0].width = this.#meter.width;
      this.tracks[0].height = this.#meter.height;
    }
    if (this.#source.codec.codec === "H264") this.#keepParameterSets(packet.payload);
    if (this.readerCount > 0) this.#lastReaderMs = nowMs;
    if (nowMs - this.#lastReaderMs < framesLingerMs) this.#toFrames(packet);
    else if (this.#timeline) this.#stopFrames();
  }

  #toFrames(packet: WeriftRtpPacket): void {
    if (!this.#timeline) {
      this.#timeline = new RtpTimeline(this.tracks);
      this.#timeline.startSession([]);
      this.#dts = this.#source.kind === "video" ? new VideoDtsDeriver(this.tracks[0]) : undefined;
      this.#awaitingKeyframe = this.#source.kind === "video";
    }
    if (this.#awaitingKeyframe) this.requestKeyframe();
    const track = this.tracks[0];
    this.#depacketizer ??= track.codec === "H264"
      ? new H264Depacketizer(0)
      : track.codec === "VP8"
      ? new Vp8Depacketizer(0)
      : new FrameDepacketizer(0, "OPUS");
    const { header } = packet;
    if (this.#expectedSeq >= 0 && header.sequenceNumber !== this.#expectedSeq) {
      this.#depacketizer.reset();
    }
    this.#expectedSeq = (header.sequenceNumber + 1) & 0xffff;
    try {
      this.#depacketizer.push({
        marker: header.marker,
        payloadType: header.payloadType,
        sequenceNumber: header.sequenceNumber,
        timestamp: header.timestamp,
        ssrc: header.ssrc,
        // A rewritten simulcast packet is a view of the switch's reused buffer: a frame
        // assembled from several packets needs its own copy.
        payload: packet.payload.slice(),
      }, this.#emit);
    } catch (err) {
      if (!(err instanceof ParseError)) throw err;
      // The damaged unit is dropped; the next one starts clean.
    }
  }

  readonly #emit = (frame: MediaFrame): void => {
    if (frame.keyframe) this.#awaitingKeyframe = false;
    const pts = this.#timeline!.pts(0, frame.pts);
    const timed = { ...frame, pts, dts: pts };
    this.#dts?.derive(timed);
    this.push(timed);
  };

  /** Keeps the latest SPS and PPS on the track, so a reader attaching later can start at once. */
  #keepParameterSets(payload: Uint8Array): void {
    const type = payload[0] & 0x1f;
    if (type !== 7 && type !== 8 && type !== 24) return;
    for (const nal of h264ParameterSets(payload)) {
      if ((nal[0] & 0x1f) === 7) this.#sps = nal.slice();
      else this.#pps = nal.slice();
    }
    if (this.#sps && this.#pps) {
      this.tracks[0].config = { codec: "H264", sps: [this.#sps], pps: [this.#pps] };
    }
  }

  /** The last reader left a while ago: frames are no longer made. */
  #stopFrames(): void {
    this.#timeline = undefined;
    this.dropCachedGop();
    this.#depacketizer = undefined;
    this.#expectedSeq = -1;
  }
}
