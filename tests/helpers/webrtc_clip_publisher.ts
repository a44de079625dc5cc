/**
 * A WHIP publisher sending real media: an H.264 (Constrained Baseline) + Opus clip encoded by
 * ffmpeg, packetized with the server's own packetizers and sent over werift at its real pace,
 * looped with continuous timestamps. Unlike the synthetic peers of webrtc_helpers.ts, what it
 * sends decodes without errors, so a player downstream can be held to "no decoder errors".
 */
import { Buffer } from "node:buffer";
import {
  MediaStreamTrack,
  RTCPeerConnection,
  RTCRtpCodecParameters,
  type RTCRtpSender,
  RtpHeader,
  RtpPacket,
} from "werift";
import type { MediaFrame, Track } from "../../media/frame.ts";
import { TsDemuxer } from "../../media/formats/mpegts/demuxer.ts";
import { run } from "../../media/formats/test_fixtures.ts";
import { FramePacketizer } from "../../media/rtp/frame_packetizer.ts";
import { H264Packetizer } from "../../media/rtp/h264_packetizer.ts";
import type { Packetizer } from "../../media/rtp/packetizer.ts";
import { ntpUnixOffsetSec } from "../../media/rtp/sender_report.ts";
import { h264Codec, loopbackIce } from "../webrtc_helpers.ts";

/** A demuxed clip: its tracks and frames (video first), and its length in seconds. */
export interface Clip {
  tracks: Track[];
  frames: MediaFrame[];
  seconds: number;
}

/** Shape of the clip ffmpeg makes. */
export interface ClipShape {
  seconds: number;
  width: number;
  height: number;
  /** H.264 bit rate, in kbit/s. */
  videoKbps: number;
}

/** Encodes testsrc2 at 25 fps (a keyframe a second) and a 440 Hz tone as H.264 + Opus. */
export async function makeH264OpusClip(shape: ClipShape): Promise<Clip> {
  const dir = await Deno.makeTempDir({ prefix: "clip-" });
  try {
    const path = `${dir}/clip.ts`;
    await run("ffmpeg", [
      ...[
        "-v",
        "error",
        "-f",
        "lavfi",
        "-i",
        `testsrc2=size=${shape.width}x${shape.height}:rate=25`,
      ],
      ...["-f", "lavfi", "-i", "sine=frequency=440:sample_rate=48000", "-t", String(shape.seconds)],
      ...["-c:v", "libx264", "-profile:v", "baseline", "-preset", "ultrafast", "-g", "25"],
      ...["-b:v", `${shape.videoKbps}k`, "-maxrate", `${shape.videoKbps}k`],
      ...["-bufsize", `${shape.videoKbps}k`, "-pix_fmt", "yuv420p", "-threads", "1"],
      ...["-c:a", "libopus", "-b:a", "64k", "-ac", "2", "-f", "mpegts", path],
    ]);
    const demuxer = new TsDemuxer();
    const frames = [...demuxer.push(await Deno.readFile(path)), ...demuxer.flush()];
    const tracks = demuxer.tracks.toSorted((a, b) => a.id - b.id);
    // In send order: the muxer delays audio, and a frame sent late would make the sender
    // reports (wall clock against the last timestamp sent) disagree between the tracks.
    const seconds = (f: MediaFrame) => f.dts / tracks[f.trackId].clockRate;
    frames.sort((a, b) => seconds(a) - seconds(b));
    // The Opus encoder's priming makes the audio a frame longer than asked for; a looped
    // clip must not overlap itself.
    const end = seconds(frames[0]) + shape.seconds;
    return { tracks, frames: frames.filter((f) => seconds(f) < end), seconds: shape.seconds };
  } finally {
    await Deno.remove(dir, { recursive: true });
  }
}

/** One outgoing track: its werift track, packetizer and RTP state. */
interface Sender {
  track: MediaStreamTrack;
  packetizer: Packetizer;
  clockRate: number;
  seq: number;
}

/**
 * Makes werift's sender reports carry the real NTP time of the last packet sent. werift
 * 0.25 writes the decimal digits of the fraction of a second as the NTP fraction, so its
 * reports are off by up to a second and differ between tracks; the server aligns a WebRTC
 * source's tracks on them, which would move the audio against the video by that much.
 * werift stores the NTP time of each packet it sends (`ntpTimestamp`) and puts it in the
 * next report, so the stored value is replaced at each store.
 */
function correctSenderReportClock(sender: RTCRtpSender): void {
  let ntp = 0n;
  Object.defineProperty(sender, "ntpTimestamp", {
    configurable: true,
    get: () => ntp,
    set: () => {
      const seconds = (performance.timeOrigin + performance.now()) / 1000 + ntpUnixOffsetSec;
      const whole = Math.floor(seconds);
      ntp = (BigInt(whole) << 32n) | BigInt(Math.floor((seconds - whole) * 2 ** 32));
    },
  });
}

/** How often the pacing timer runs, in milliseconds. */
const paceIntervalMs = 10;

/** Publishes a Clip over WHIP from werift on 127.0.0.1, looping it until closed. */
export class ClipPublisher {
  readonly pc = new RTCPeerConnection({
    ...loopbackIce(),
    codecs: {
      video: [h264Codec()],
      audio: [new RTCRtpCodecParameters({ mimeType: "audio/opus", clockRate: 48000, channels: 2 })],
    },
  });
  /** RTP packets sent, audio and video. */
  packets = 0;
  /** Bytes of RTP payload sent. */
  payloadBytes = 0;
  #senders = new Map<number, Sender>();
  #timer?: ReturnType<typeof setInterval>;
  #location?: string;

  constructor(readonly clip: Clip) {
    for (const track of clip.tracks) {
      const config = track.config;
      const packetizer = track.codec === "H264"
        ? new H264Packetizer(() => config?.codec === "H264" ? [...config.sps, ...config.pps] : [])
        : new FramePacketizer();
      const werift = new MediaStreamTrack({ kind: track.kind });
      correctSenderReportClock(this.pc.addTransceiver(werift, { direction: "sendonly" }).sender);
      this.#senders.set(track.id, {
        track: werift,
        packetizer,
        clockRate: track.clockRate,
        seq: 1,
      });
    }
  }

  /** POSTs the offer to `${restUrl}/whip/<name>`, applies the answer and starts sending. */
  async publish(restUrl: string, name: string): Promise<void> {
    await this.pc.setLocalDescription(await this.pc.createOffer());
    const res = await fetch(`${restUrl}/whip/${name}`, {
      method: "POST",
      headers: { "Content-Type": "application/sdp" },
      body: this.pc.localDescription!.sdp,
    });
    const answer = await res.text();
    if (res.status !== 201) throw new Error(`WHIP ${res.status}: ${answer}`);
    this.#location = new URL(res.headers.get("location")!, restUrl).href;
    await this.pc.setRemoteDescription({ type: "answer", sdp: answer });
    this.#start();
  }

  #start(): void {
    const frames = this.clip.frames;
    const first = frames[0];
    const startSeconds = first.dts / this.#senders.get(first.trackId)!.clockRate;
    const startMs = performance.now();
    let next = 0;
    let loop = 0;
    this.#timer = setInterval(() => {
      const elapsedSeconds = (performance.now() - startMs) / 1000;
      for (;;) {
        if (next === frames.length) {
          next = 0;
          loop++;
        }
        const frame = frames[next];
        const sender = this.#senders.get(frame.trackId)!;
        const clipSeconds = frame.dts / sender.clockRate - startSeconds;
        if (loop * this.clip.seconds + clipSeconds > elapsedSeconds) break;
        this.#send(frame, sender, Math.round(loop * this.clip.seconds * sender.clockRate));
        next++;
      }
    }, paceIntervalMs);
  }

  #send(frame: MediaFrame, sender: Sender, loopOffset: number): void {
    const timestamp = frame.pts + loopOffset;
    sender.packetizer.packetize(frame, (payload, marker, timestampOffset) => {
      const header = new RtpHeader({
        sequenceNumber: sender.seq,
        timestamp: (timestamp + timestampOffset) >>> 0,
        marker,
        payloadType: 96,
      });
      sender.seq = (sender.seq + 1) & 0xffff;
      this.packets++;
      this.payloadBytes += payload.length;
      sender.track.writeRtp(new RtpPacket(header, Buffer.from(payload)));
    });
  }

  /** Stops sending, ends the WHIP session (DELETE) and closes the peer. */
  async close(): Promise<void> {
    clearInterval(this.#timer);
    if (this.#location) await (await fetch(this.#location, { method: "DELETE" })).body?.cancel();
    await this.pc.close();
  }
}
