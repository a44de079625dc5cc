/**
 * The media of one RTSP player: the set-up tracks of a Stream packetized to RTP (H.264,
 * H.265, VP8, AAC as RFC 3640 AAC-hbr, Opus, G.711 as they are) and sent over the RTSP
 * connection's interleaved channels or to the client's UDP ports, with RTCP sender reports
 * (SR + CNAME) that put every track on the stream's common timeline for A/V sync. The player
 * reads through its own bounded StreamReader, so a slow client loses frames (and waits for
 * the next keyframe) without slowing the stream or other players; one that stops reading
 * entirely is dropped by the connection's write timeout.
 */
import { ParseError } from "../../core/errors.ts";
import type { MediaFrame, Track } from "../frame.ts";
import type { RtspServerConn } from "../protocols/rtsp/server_conn.ts";
import type { UdpPortPair } from "../protocols/rtsp/udp_pair.ts";
import { AacPacketizer } from "../rtp/aac_packetizer.ts";
import { FramePacketizer } from "../rtp/frame_packetizer.ts";
import { H264Packetizer } from "../rtp/h264_packetizer.ts";
import { H265Packetizer } from "../rtp/h265_packetizer.ts";
import type { Packetizer } from "../rtp/packetizer.ts";
import { rtpHeaderBytes } from "../rtp/packet.ts";
import { writeRtpHeader } from "../rtp/rtp_writer.ts";
import { ntpUnixOffsetSec, writeSenderReport } from "../rtp/sender_report.ts";
import { trackPayloadType, trackRtpClock } from "../rtp/track_sdp.ts";
import { Vp8Packetizer } from "../rtp/vp8_packetizer.ts";
import type { Stream, StreamReader } from "../stream.ts";

/** Time between two sender reports of a track, in milliseconds. */
export const senderReportIntervalMs = 2000;
/** Bytes of the interleaved frame header (`$`, channel, 16-bit length). */
const interleavedHeaderBytes = 4;
/**
 * Most bytes of one write to a TCP player: a keyframe goes in several, so a player's buffer
 * stays this size rather than its largest frame's.
 */
export const tcpWriteBytes = 32 * 1024;

/** Where a track's packets go. */
export type RtspTrackTransport =
  | { protocol: "tcp"; interleaved: [number, number] }
  | { protocol: "udp"; pair: UdpPortPair; clientPorts: [number, number]; address: string };

/** Send state of one set-up track. */
interface OutTrack {
  readonly track: Track;
  readonly transport: RtspTrackTransport;
  readonly packetizer: Packetizer;
  readonly payloadType: number;
  readonly rtpClock: number;
  readonly ssrc: number;
  /** Random start of the RTP timestamps (RFC 3550 §5.1). */
  readonly timestampBase: number;
  /** Control URL the client set the track up with, for RTP-Info. */
  readonly url: string;
  sequenceNumber: number;
  packets: number;
  octets: number;
  lastReportMs: number;
}

/** A packet of a frame: its payload, marker bit and timestamp offset (in the track's clock). */
interface FramePacket {
  readonly payload: Uint8Array;
  readonly marker: boolean;
  readonly offset: number;
}

/**
 * The packets of each frame, made once for all the players of its stream (every player of a
 * track packetizes alike; only the headers differ), kept as long as the frame is.
 */
const packetsByFrame = new WeakMap<MediaFrame, readonly FramePacket[]>();

/** The packets of `frame`; none for a malformed frame, which is skipped. */
function framePackets(frame: MediaFrame, packetizer: Packetizer): readonly FramePacket[] {
  let packets = packetsByFrame.get(frame);
  if (packets) return packets;
  const made: FramePacket[] = [];
  try {
    packetizer.packetize(
      frame,
      (payload, marker, offset) => made.push({ payload, marker, offset }),
    );
    packets = made;
  } catch (err) {
    if (!(err instanceof ParseError)) throw err;
    packets = [];
  }
  packetsByFrame.set(frame, packets);
  return packets;
}

/** A frame on its way to a TCP player: its packets from `next` on. */
interface PendingFrame {
  readonly out: OutTrack;
  readonly packets: readonly FramePacket[];
  next: number;
  /** RTP timestamp of the frame. */
  readonly timestamp: number;
  /** RTP clock over the track's clock. */
  readonly clockRatio: number;
  /** The sender report to send first, after its 4 free bytes. */
  report?: Uint8Array;
}

/** Fills the interleaved header (`$`, channel, length) of the `length` bytes at `at`. */
function interleave(buf: Uint8Array, at: number, length: number, channel: number): void {
  const payloadLength = length - interleavedHeaderBytes;
  buf[at] = 0x24;
  buf[at + 1] = channel;
  buf[at + 2] = payloadLength >> 8;
  buf[at + 3] = payloadLength & 0xff;
}

function randomUint32(): number {
  return crypto.getRandomValues(new Uint32Array(1))[0];
}

/** The packetizer of a track's codec. */
function packetizerFor(stream: Stream, track: Track): Packetizer {
  const config = () => stream.tracks[track.id].config;
  switch (track.codec) {
    case "H264":
      return new H264Packetizer(() => {
        const c = config();
        return c?.codec === "H264" ? [...c.sps, ...c.pps] : [];
      });
    case "H265":
      return new H265Packetizer(() => {
        const c = config();
        return c?.codec === "H265" ? [...c.vps, ...c.sps, ...c.pps] : [];
      });
    case "VP8":
      return new Vp8Packetizer();
    case "AAC":
      return new AacPacketizer();
    default:
      return new FramePacketizer();
  }
}

/** An RTSP player of one stream. */
export class RtspPlay {
  readonly stream: Stream;
  readonly #conn: RtspServerConn;
  readonly #cname: string;
  readonly #tracks = new Map<number, OutTrack>();
  #reader: StreamReader | undefined;
  #first: MediaFrame | undefined;
  #sending: Promise<void> = Promise.resolve();
  /** Stream time (s) and NTP time (s) of the first frame sent: the sender reports' anchor. */
  #originPtsSec = NaN;
  #originNtpSec = 0;
  /** The buffer of a TCP player's writes (see #chunk). */
  readonly #scratch = new Uint8Array(tcpWriteBytes);

  /** `cname`: the canonical name of the session, in every sender report. */
  constructor(stream: Stream, conn: RtspServerConn, cname: string) {
    this.stream = stream;
    this.#conn = conn;
    this.#cname = cname;
  }

  /** Ids of the tracks set up. */
  get trackIds(): number[] {
    return [...this.#tracks.keys()];
  }

  /** True while frames are read and sent. */
  get playing(): boolean {
    return this.#reader !== undefined;
  }

  /** The interleaved channels in use by set-up tracks other than `trackId`. */
  channelsInUse(trackId: number): Set<number> {
    const used = new Set<number>();
    for (const t of this.#tracks.values()) {
      if (t.track.id === trackId || t.transport.protocol !== "tcp") continue;
      used.add(t.transport.interleaved[0]).add(t.transport.interleaved[1]);
    }
    return used;
  }

  /** Sets a track up (again); returns its SSRC. */
  async setup(track: Track, transport: RtspTrackTransport, url: string): Promise<number> {
    const old = this.#tracks.get(track.id);
    if (old?.transport.protocol === "udp") await old.transport.pair.close();
    const ssrc = old?.ssrc ?? randomUint32();
    this.#tracks.set(track.id, {
      track,
      transport,
      packetizer: packetizerFor(this.stream, track),
      payloadType: trackPayloadType(track),
      rtpClock: trackRtpClock(track),
      ssrc,
      timestampBase: old?.timestampBase ?? randomUint32(),
      url,
      sequenceNumber: old?.sequenceNumber ?? randomUint32() & 0xffff,
      packets: old?.packets ?? 0,
      octets: old?.octets ?? 0,
      lastReportMs: -Infinity,
    });
    return ssrc;
  }

  /**
   * Starts reading at the stream's last keyframe; returns the RTP-Info value: per track its
   * URL, the sequence number of its next packet and, when the first frame is already known,
   * the RTP time of the start.
   */
  play(): string {
    if (!this.#reader) {
      this.#reader = this.stream.reader(undefined, "rtsp");
      // The first frame fixes the start's RTP times; the pump sends it first.
      this.#first = this.#reader.poll(() => {});
    }
    const startSec = this.#first
      ? this.#first.pts / this.stream.tracks[this.#first.trackId].clockRate
      : undefined;
    const entries = [...this.#tracks.values()].map((t) => {
      let entry = `url=${t.url};seq=${t.sequenceNumber}`;
      if (startSec !== undefined) {
        entry += `;rtptime=${(t.timestampBase + Math.round(startSec * t.rtpClock)) >>> 0}`;
      }
      return entry;
    });
    return entries.join(",");
  }

  /** Starts sending; call after the PLAY answer is written. */
  start(): void {
    const reader = this.#reader;
    if (!reader) return;
    this.#sending = this.#pump(reader).catch(() => this.#conn.close());
  }

  /** Stops reading (PAUSE): the next PLAY starts again at a keyframe. */
  async pause(): Promise<void> {
    this.#reader?.close();
    this.#reader = undefined;
    this.#first = undefined;
    await this.#sending;
  }

  /** Stops and frees the UDP sockets. */
  async close(): Promise<void> {
    await this.pause();
    await Promise.all(
      [...this.#tracks.values()].map((t) =>
        t.transport.protocol === "udp" ? t.transport.pair.close() : undefined
      ),
    );
  }

  /**
   * Sends the reader's frames until it is drained; over TCP in writes of at most
   * `tcpWriteBytes`, each waited for, so a slow client's reader fills and drops instead of
   * the socket's queue growing.
   */
  #pump(reader: StreamReader): Promise<void> {
    const { promise, resolve, reject } = Promise.withResolvers<void>();
    let frame = this.#first;
    this.#first = undefined;
    let pending: PendingFrame | undefined;
    const pump = (): void => {
      try {
        for (;;) {
          if (reader !== this.#reader) return resolve();
          if (pending) {
            const chunk = this.#chunk(pending);
            if (pending.next === pending.packets.length) pending = undefined;
            this.#conn.write(chunk).then(pump, reject);
            return;
          }
          frame ??= reader.poll(pump);
          if (frame === undefined) {
            if (reader.drained) {
              resolve();
              // The stream ended: the client learns it from the connection's end.
              if (this.stream.ended) this.#conn.close();
            }
            return;
          }
          pending = this.#begin(frame);
          frame = undefined;
        }
      } catch (err) {
        reject(err);
      }
    };
    pump();
    return promise;
  }

  /**
   * Starts a frame: its sender report when one is due, then its packets, sent at once over
   * UDP, or returned to be written in chunks over TCP.
   */
  #begin(frame: MediaFrame): PendingFrame | undefined {
    const out = this.#tracks.get(frame.trackId);
    if (!out) return undefined;
    const packets = framePackets(frame, out.packetizer);
    if (packets.length === 0) return undefined;
    const ptsSec = frame.pts / out.track.clockRate;
    if (Number.isNaN(this.#originPtsSec)) {
      this.#originPtsSec = ptsSec;
      this.#originNtpSec = Date.now() / 1000 + ntpUnixOffsetSec;
    }
    const pending: PendingFrame = {
      out,
      packets,
      next: 0,
      timestamp: (out.timestampBase + Math.round(ptsSec * out.rtpClock)) >>> 0,
      clockRatio: out.rtpClock / out.track.clockRate,
    };
    const nowMs = performance.now();
    if (nowMs - out.lastReportMs >= senderReportIntervalMs) {
      // Before the first packet too, so a client aligns the tracks from the start.
      out.lastReportMs = nowMs;
      pending.report = writeSenderReport({
        ssrc: out.ssrc,
        ntpSec: this.#originNtpSec + (ptsSec - this.#originPtsSec),
        rtpTimestamp: pending.timestamp,
        packets: out.packets,
        octets: out.octets,
        cname: this.#cname,
      }, interleavedHeaderBytes);
    }
    const transport = out.transport;
    if (transport.protocol === "tcp") return pending;
    if (pending.report) {
      transport.pair.send(
        pending.report.subarray(interleavedHeaderBytes),
        true,
        transport.clientPorts[1],
        transport.address,
      );
    }
    for (const p of packets) {
      const packet = new Uint8Array(rtpHeaderBytes + p.payload.length);
      this.#writePacket(pending, p, packet, 0);
      transport.pair.send(packet, false, transport.clientPorts[0], transport.address);
    }
    return undefined;
  }

  /**
   * The next interleaved bytes of a TCP frame: its report and as many packets as fit in the
   * player's buffer. The buffer is reused: the pump writes again only once the connection
   * took the last bytes, and a buffer per frame and player was most of a player's memory.
   */
  #chunk(pending: PendingFrame): Uint8Array {
    const { out, packets } = pending;
    const transport = out.transport as { interleaved: [number, number] };
    const buf = this.#scratch;
    let at = 0;
    if (pending.report) {
      const report = pending.report;
      pending.report = undefined;
      buf.set(report);
      interleave(buf, 0, report.length, transport.interleaved[1]);
      at = report.length;
    }
    while (pending.next < packets.length) {
      const p = packets[pending.next];
      const length = interleavedHeaderBytes + rtpHeaderBytes + p.payload.length;
      if (at + length > buf.length) break;
      this.#writePacket(pending, p, buf, at + interleavedHeaderBytes);
      interleave(buf, at, length, transport.interleaved[0]);
      at += length;
      pending.next++;
    }
    return buf.subarray(0, at);
  }

  /** Writes the RTP packet of `p` at `at` of `buf` and counts it. */
  #writePacket(pending: PendingFrame, p: FramePacket, buf: Uint8Array, at: number): void {
    const out = pending.out;
    writeRtpHeader(buf, at, {
      marker: p.marker,
      payloadType: out.payloadType,
      sequenceNumber: out.sequenceNumber,
      timestamp: (pending.timestamp + Math.round(p.offset * pending.clockRatio)) >>> 0,
      ssrc: out.ssrc,
    });
    buf.set(p.payload, at + rtpHeaderBytes);
    out.sequenceNumber = (out.sequenceNumber + 1) & 0xffff;
    out.packets++;
    out.octets += p.payload.length;
  }
}
