/**
 * The RTSP players of one stream, fed from one shared ring of RTP packets (as one "shared
 * media" of gst-rtsp-server). The stream is read once; each frame is packetized once per
 * track (H.264, H.265, VP8, AAC as RFC 3640 AAC-hbr, Opus, G.711 as they are) under the
 * track's one SSRC, sequence numbers and timestamp base, framed once for TCP interleaving
 * (`$`, channel, length) with the track's sender report (SR + CNAME) in front every
 * `senderReportIntervalMs`, and appended to a bounded ring; audio is held back (up to
 * `audioHoldMaxMs`) and goes in one bundle with the next video frame, so a player writes a
 * few times fewer. Every player holds only its position: a TCP player writes the ring's very
 * bytes (a copy per other channel layout, made once per bundle), a UDP player sends the
 * packets in them. A player more than
 * `playerLagMaxBundles` behind skips to the newest keyframe without slowing the others; one
 * that stops reading is dropped by its connection's write timeout.
 */
import { ParseError } from "../../core/errors.ts";
import type { MediaFrame, Track } from "../frame.ts";
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
import { readerQueueFrames, type Stream, type StreamReader } from "../stream.ts";
import { countFanoutPlayers, FanoutRing, waitingForKey } from "./fanout_ring.ts";

/** Time between two sender reports of a track, in milliseconds. */
export const senderReportIntervalMs = 2000;
/**
 * Bundles a player may lag behind the newest before it skips to a keyframe; bundles are at
 * most frames, so this is at least the frame queue a reader of its own had.
 */
export const playerLagMaxBundles = readerQueueFrames;
/**
 * Longest span of audio held back for the next video frame, in milliseconds: bounds the audio
 * delay when pictures are sparse or stop.
 */
export const audioHoldMaxMs = 100;
/** Bytes of the interleaved frame header (`$`, channel, 16-bit length). */
export const interleavedHeaderBytes = 4;

/** One frame of a bundle. */
export interface RtspBundlePart {
  readonly trackId: number;
  /** Its track's sender report comes first. */
  readonly hasReport: boolean;
  /** RTP timestamp and stream time (s) of the frame. */
  readonly timestamp: number;
  readonly ptsSec: number;
  /** Sequence number of the frame's first packet. */
  readonly firstSeq: number;
  /** Packets and payload bytes of the track before this frame, for a report at it. */
  readonly packetsBefore: number;
  readonly octetsBefore: number;
}

/** The packets of one or more frames (held audio, then a video frame), as every player gets them. */
export interface RtspBundle {
  readonly parts: readonly RtspBundlePart[];
  /**
   * The frames' RTP packets (a track's sender report before its frame when one was due),
   * each after its interleaved header on its track's default channels (`channel`).
   */
  readonly bytes: Uint8Array;
  /** The bytes on other channel layouts (`RtspLayout.key`), made on first use. */
  others?: Map<string, Uint8Array>;
}

/**
 * A player's interleaved channels: for each default channel (`RtspFanout.channel`) the
 * player's, or `unmapped` for a track it gets another way or not at all.
 */
export interface RtspLayout {
  /** Names the layout; the same key, the same map. */
  readonly key: string;
  readonly map: Uint8Array;
}

/** A default channel whose packets a layout leaves out. */
export const unmapped = 0xff;

/** A player of the fan-out: its position and how it sends. */
export interface RtspFanoutPlayer {
  /** Sequence number of the next bundle to send, or `waitingForKey`. */
  next: number;
  /** A write is in flight; `RtspFanout.feed` is called when it is done. */
  writing: boolean;
  /** False between PLAY's answer being made and written: the player holds its place only. */
  started: boolean;
  /**
   * Sends a bundle; true when it is gone at once (UDP, or no track of the player), false
   * when a write is in flight.
   */
  send(bundle: RtspBundle): boolean;
  /** The stream has ended and every bundle was sent. */
  finished(): void;
}

/** Shared send state of one track. */
interface OutTrack {
  readonly track: Track;
  readonly packetizer: Packetizer;
  readonly payloadType: number;
  readonly rtpClock: number;
  /** RTP clock over the track's clock. */
  readonly clockRatio: number;
  readonly ssrc: number;
  /** Random start of the RTP timestamps (RFC 3550 §5.1). */
  readonly timestampBase: number;
  /** RTP channel the bundles are framed with (its RTCP on the next one). */
  readonly channel: number;
  sequenceNumber: number;
  packets: number;
  octets: number;
  lastReportMs: number;
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

/** Fills the interleaved header (`$`, channel, length) of the `length` bytes at `at`. */
function interleave(buf: Uint8Array, at: number, length: number, channel: number): void {
  const payloadLength = length - interleavedHeaderBytes;
  buf[at] = 0x24;
  buf[at + 1] = channel;
  buf[at + 2] = payloadLength >> 8;
  buf[at + 3] = payloadLength & 0xff;
}

/** The RTSP players of one stream and the ring of bundles they send. */
export class RtspFanout {
  readonly stream: Stream;
  readonly #cname: string;
  readonly #tracks = new Map<number, OutTrack>();
  readonly #videoTrackId: number | undefined;
  #ring = new FanoutRing<RtspBundle>(playerLagMaxBundles);
  #reader: StreamReader | undefined;
  #players = new Set<RtspFanoutPlayer>();
  #countedPlayers = 0;
  #ended = false;
  /** Stream time (s) and NTP time (s) of the first frame: the sender reports' anchor. */
  #originPtsSec = NaN;
  #originNtpSec = 0;
  /** The frames held back for the next video frame: their parts and bytes. */
  #heldParts: RtspBundlePart[] = [];
  #heldBytes: Uint8Array[] = [];
  /** Frames and media bytes read since the last bundle. */
  #pendingFrames = 0;
  #pendingBytes = 0;
  /** The layout of a player of every track on its default channels. */
  readonly defaultKey: string;
  /** The packets of the frame being bundled (reused). */
  readonly #payloads: Uint8Array[] = [];
  readonly #markers: boolean[] = [];
  readonly #offsets: number[] = [];

  static #byStream = new WeakMap<Stream, RtspFanout>();

  /**
   * The fan-out of `stream`'s RTSP players; it lives as long as the stream, so SSRCs and
   * sequence numbers given at SETUP hold. `cname` names the session in sender reports.
   */
  static of(stream: Stream, cname: string): RtspFanout {
    let fanout = RtspFanout.#byStream.get(stream);
    if (!fanout) {
      fanout = new RtspFanout(stream, cname);
      RtspFanout.#byStream.set(stream, fanout);
    }
    return fanout;
  }

  private constructor(stream: Stream, cname: string) {
    this.stream = stream;
    this.#cname = cname;
    this.#videoTrackId = stream.tracks.find((t) => t.kind === "video")?.id;
    this.defaultKey = stream.tracks.map((t, i) => `${t.id}:${2 * i}-${2 * i + 1}`).join(",");
  }

  /** The track's shared state, made on first use. */
  #out(trackId: number): OutTrack | undefined {
    let out = this.#tracks.get(trackId);
    const track = this.stream.tracks[trackId];
    if (out || !track) return out;
    const rtpClock = trackRtpClock(track);
    out = {
      track,
      packetizer: packetizerFor(this.stream, track),
      payloadType: trackPayloadType(track),
      rtpClock,
      clockRatio: rtpClock / track.clockRate,
      ssrc: randomUint32(),
      timestampBase: randomUint32(),
      channel: 2 * this.stream.tracks.indexOf(track),
      sequenceNumber: randomUint32() & 0xffff,
      packets: 0,
      octets: 0,
      lastReportMs: -Infinity,
    };
    this.#tracks.set(trackId, out);
    return out;
  }

  /** The SSRC of a track, for SETUP's answer. */
  ssrc(trackId: number): number {
    return this.#out(trackId)?.ssrc ?? 0;
  }

  /** The RTP channel bundles of `trackId` are framed with (its RTCP on the next). */
  channel(trackId: number): number {
    return this.#out(trackId)?.channel ?? 0;
  }

  /**
   * Adds a player, placed at the newest cached keyframe (the stream is read from now on if
   * it was not), not sending until `started`; returns the RTP-Info entry values per track
   * id: the sequence number of the player's first packet and the RTP time of its start,
   * when known.
   */
  add(player: RtspFanoutPlayer, trackIds: number[]): Map<number, string> {
    this.#players.add(player);
    if (!this.#reader && !this.#ended) this.#startReader();
    player.next = this.#ring.start;
    this.#countPlayers();
    const info = new Map<number, string>();
    const start = player.next === waitingForKey ? undefined : this.#ring.at(player.next);
    for (const id of trackIds) {
      const out = this.#out(id);
      if (!out || !start) continue;
      let seq = out.sequenceNumber;
      search: for (let at = player.next; at < this.#ring.head; at++) {
        for (const part of this.#ring.at(at).parts) {
          if (part.trackId !== id) continue;
          seq = part.firstSeq;
          break search;
        }
      }
      // The start is the time of the bundle's video frame (its last).
      const startSec = start.parts[start.parts.length - 1].ptsSec;
      const rtptime = (out.timestampBase + Math.round(startSec * out.rtpClock)) >>> 0;
      info.set(id, `seq=${seq};rtptime=${rtptime}`);
    }
    return info;
  }

  /** Takes a player out; the last one out stops reading the stream. */
  remove(player: RtspFanoutPlayer): void {
    if (!this.#players.delete(player)) return;
    this.#countPlayers();
    if (this.#players.size > 0 || this.#ended) return;
    // Nobody plays: stop reading so the stream may stop, and start afresh from the stream's
    // cached GOP with the next player.
    this.#reader?.close();
    this.#countPlayers();
    this.#reader = undefined;
    this.#countedPlayers = 0;
    this.#ring.clear();
    this.#heldParts = [];
    this.#heldBytes = [];
    this.#pendingFrames = 0;
    this.#pendingBytes = 0;
  }

  /** Sends the player what is due, until a write is in flight or it is up to date. */
  feed(player: RtspFanoutPlayer): void {
    if (!player.started || !this.#players.has(player)) return;
    const tally = this.#reader?.tally;
    while (!player.writing) {
      // Too slow for the stream: skip to the newest keyframe, else wait for the next one.
      const seq = this.#ring.catchUp(player.next, tally);
      player.next = seq;
      if (seq === waitingForKey || seq >= this.#ring.head) break;
      player.next = seq + 1;
      this.#ring.deliver(seq, tally);
      if (!player.send(this.#ring.at(seq))) player.writing = true;
    }
    const done = player.next === waitingForKey || player.next >= this.#ring.head;
    if (!player.writing && this.#ended && done) {
      this.#players.delete(player);
      this.#countPlayers();
      player.finished();
    }
  }

  /** The bytes of `bundle` on a player's channels (empty when it has none of its tracks). */
  bytesOn(bundle: RtspBundle, layout: RtspLayout): Uint8Array {
    if (layout.key === this.defaultKey) return bundle.bytes;
    let bytes = bundle.others?.get(layout.key);
    if (bytes) return bytes;
    const from = bundle.bytes;
    const { map } = layout;
    let size = 0;
    for (let at = 0; at < from.length;) {
      const end = at + interleavedHeaderBytes + ((from[at + 2] << 8) | from[at + 3]);
      if (map[from[at + 1]] !== unmapped) size += end - at;
      at = end;
    }
    bytes = new Uint8Array(size);
    let to = 0;
    for (let at = 0; at < from.length;) {
      const end = at + interleavedHeaderBytes + ((from[at + 2] << 8) | from[at + 3]);
      const channel = map[from[at + 1]];
      if (channel !== unmapped) {
        bytes.set(from.subarray(at, end), to);
        bytes[to + 1] = channel;
        to += end - at;
      }
      at = end;
    }
    (bundle.others ??= new Map()).set(layout.key, bytes);
    return bytes;
  }

  /**
   * A sender report of the bundle's track at the bundle, framed on the interleaved channel
   * `rtcp`: for a player whose first packets of a track come without one.
   */
  reportAt(part: RtspBundlePart, rtcp: number): Uint8Array {
    const out = this.#out(part.trackId)!;
    return this.#report(
      out,
      part.ptsSec,
      part.timestamp,
      part.packetsBefore,
      part.octetsBefore,
      rtcp,
    );
  }

  /** A sender report of `out` at `ptsSec`, framed on the interleaved channel `rtcp`. */
  #report(
    out: OutTrack,
    ptsSec: number,
    timestamp: number,
    packets: number,
    octets: number,
    rtcp: number,
  ): Uint8Array {
    const report = writeSenderReport({
      ssrc: out.ssrc,
      ntpSec: this.#originNtpSec + (ptsSec - this.#originPtsSec),
      rtpTimestamp: timestamp,
      packets,
      octets,
      cname: this.#cname,
    }, interleavedHeaderBytes);
    interleave(report, 0, report.length, rtcp);
    return report;
  }

  /** Starts the shared reader; the stream's cached GOP is bundled at once. */
  #startReader(): StreamReader {
    const reader = this.stream.reader(undefined, "rtsp");
    this.#reader = reader;
    const pump = (): void => {
      for (;;) {
        if (reader !== this.#reader) return;
        const frame = reader.poll(pump);
        if (frame === undefined) {
          if (reader.drained) this.#end();
          return;
        }
        this.#pendingFrames++;
        this.#pendingBytes += frame.data.length;
        this.#take(frame);
      }
    };
    pump();
    return reader;
  }

  /** Packetizes a frame; appends a bundle unless the frame is audio held back. */
  #take(frame: MediaFrame): void {
    const video = this.#videoTrackId;
    const made = this.#frameBytes(frame);
    if (made) {
      this.#heldParts.push(made.part);
      this.#heldBytes.push(made.bytes);
    }
    const held = this.#heldParts;
    if (held.length === 0) return;
    const isVideo = frame.trackId === video;
    const heldMs = (held[held.length - 1].ptsSec - held[0].ptsSec) * 1000;
    if (video !== undefined && !isVideo && heldMs < audioHoldMaxMs) return;
    this.#flush(video === undefined || (isVideo && frame.keyframe && made !== undefined));
  }

  /** Appends what is held as one bundle. */
  #flush(startable: boolean): void {
    const chunks = this.#heldBytes;
    let bytes = chunks[0];
    if (chunks.length > 1) {
      bytes = new Uint8Array(chunks.reduce((n, c) => n + c.length, 0));
      let at = 0;
      for (const c of chunks) {
        bytes.set(c, at);
        at += c.length;
      }
    }
    const bundle: RtspBundle = { parts: this.#heldParts, bytes };
    this.#heldParts = [];
    this.#heldBytes = [];
    this.#append(bundle, startable);
  }

  #append(bundle: RtspBundle, startable: boolean): void {
    const tally = this.#reader?.tally;
    const seq = this.#ring.append(
      bundle,
      this.#pendingFrames,
      this.#pendingBytes,
      startable,
      tally,
    );
    this.#pendingFrames = 0;
    this.#pendingBytes = 0;
    let floor = this.#ring.keyFloor;
    for (const player of this.#players) {
      if (player.next === waitingForKey && startable) player.next = seq;
      this.feed(player);
      if (player.next !== waitingForKey && player.next < floor) floor = player.next;
    }
    this.#ring.release(floor);
  }

  /** The packets of a frame, framed; none for a malformed frame or one of an unknown track. */
  #frameBytes(frame: MediaFrame): { part: RtspBundlePart; bytes: Uint8Array } | undefined {
    const out = this.#out(frame.trackId);
    if (!out) return undefined;
    const payloads = this.#payloads;
    const markers = this.#markers;
    const offsets = this.#offsets;
    payloads.length = markers.length = offsets.length = 0;
    try {
      out.packetizer.packetize(frame, (payload, marker, offset) => {
        payloads.push(payload);
        markers.push(marker);
        offsets.push(offset);
      });
    } catch (err) {
      if (!(err instanceof ParseError)) throw err;
      return undefined;
    }
    if (payloads.length === 0) return undefined;
    const ptsSec = frame.pts / out.track.clockRate;
    if (Number.isNaN(this.#originPtsSec)) {
      this.#originPtsSec = ptsSec;
      this.#originNtpSec = Date.now() / 1000 + ntpUnixOffsetSec;
    }
    const timestamp = (out.timestampBase + Math.round(ptsSec * out.rtpClock)) >>> 0;
    let report: Uint8Array | undefined;
    const nowMs = performance.now();
    if (nowMs - out.lastReportMs >= senderReportIntervalMs) {
      // Before the first packet too, so a client aligns the tracks from the start.
      out.lastReportMs = nowMs;
      report = this.#report(out, ptsSec, timestamp, out.packets, out.octets, out.channel + 1);
    }
    let size = report?.length ?? 0;
    for (const p of payloads) size += interleavedHeaderBytes + rtpHeaderBytes + p.length;
    const bytes = new Uint8Array(size);
    let at = 0;
    if (report) {
      bytes.set(report);
      at = report.length;
    }
    const part: RtspBundlePart = {
      trackId: frame.trackId,
      timestamp,
      ptsSec,
      hasReport: report !== undefined,
      firstSeq: out.sequenceNumber,
      packetsBefore: out.packets,
      octetsBefore: out.octets,
    };
    for (let i = 0; i < payloads.length; i++) {
      const payload = payloads[i];
      const length = interleavedHeaderBytes + rtpHeaderBytes + payload.length;
      interleave(bytes, at, length, out.channel);
      writeRtpHeader(bytes, at + interleavedHeaderBytes, {
        marker: markers[i],
        payloadType: out.payloadType,
        sequenceNumber: out.sequenceNumber,
        timestamp: (timestamp + Math.round(offsets[i] * out.clockRatio)) >>> 0,
        ssrc: out.ssrc,
      });
      bytes.set(payload, at + interleavedHeaderBytes + rtpHeaderBytes);
      at += length;
      out.sequenceNumber = (out.sequenceNumber + 1) & 0xffff;
      out.packets++;
      out.octets += payload.length;
    }
    return { part, bytes };
  }

  /** The stream ended: players finish once they sent the rest. */
  #end(): void {
    if (this.#ended) return;
    if (this.#heldParts.length > 0) this.#flush(false);
    this.#ended = true;
    this.#countPlayers();
    for (const player of [...this.#players]) this.feed(player);
  }

  /** Keeps the `rtsp` reader metrics counting players, not shared readers. */
  #countPlayers(): void {
    this.#countedPlayers = countFanoutPlayers(
      this.#reader?.tally,
      this.#players.size,
      this.#reader !== undefined && !this.#ended && !this.stream.ended,
      this.#countedPlayers,
    );
  }
}
