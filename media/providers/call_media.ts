/**
 * The RTP session of a SIP call: G.711, G.722 or Opus audio (with RFC 4733 DTMF) and optional
 * H.264 video,
 * each on an RTP/RTCP port pair of the SIP media range.
 *
 * Receiving: packets pass a small reorder buffer and become frames for the call's Stream
 * (pts continuous across SSRC changes, as when sipp switches pcaps mid-call); telephone-event
 * packets become DTMF keys, each reported once. Sending: the audio of a stream (converted to
 * the call's codec; Opus of a browser passes as it is), sounds and DTMF tones, paced in 20 ms
 * packets; H.264 of the stream when
 * video was negotiated. Symmetric RTP: once the far end's RTP arrives, media goes back to
 * where it came from (a phone behind NAT), before that to the address of its SDP. RTCP
 * reports go out every few seconds; the far end's are read for loss, jitter and round trip.
 */
import {
  BadRequestError,
  ConflictError,
  NotFoundError,
  ParseError,
  ServiceUnavailableError,
} from "../../core/errors.ts";
import type { Logger } from "../../core/log.ts";
import { dtmfTone } from "../codecs/dtmf_tone.ts";
import { g711Decode, g711Encode } from "../codecs/g711.ts";
import { findH264ParameterSets, parseH264Sps } from "../codecs/h264.ts";
import { codecArgs, convertedAudio, targetTrack } from "../engine/audio_conversion.ts";
import { TsDemuxer } from "../formats/mpegts/demuxer.ts";
import type { CodecEngine } from "../engine/engine.ts";
import type { MediaFrame, Track } from "../frame.ts";
import type {
  CallAudioCodec,
  MediaDirection,
  NegotiatedAudio,
  NegotiatedMedia,
  NegotiatedVideo,
} from "../protocols/sip/call_sdp.ts";
import type { Depacketizer } from "../rtp/depacketizer.ts";
import { FrameDepacketizer } from "../rtp/frame_depacketizer.ts";
import { H264Depacketizer } from "../rtp/h264_depacketizer.ts";
import { H264Packetizer } from "../rtp/h264_packetizer.ts";
import { parseRtpPacket, rtpHeaderBytes, type RtpPacket } from "../rtp/packet.ts";
import {
  ntpMiddle,
  parseReportBlocks,
  ReceptionStats,
  writeReceiverReport,
} from "../rtp/receiver_report.ts";
import { RtpReorderBuffer } from "../rtp/reorder.ts";
import { parseSenderReports } from "../rtp/rtcp.ts";
import { writeRtpHeader } from "../rtp/rtp_writer.ts";
import { ntpUnixOffsetSec, writeSenderReport } from "../rtp/sender_report.ts";
import {
  dtmfEventCode,
  TelephoneEventReceiver,
  telephoneEventSchedule,
} from "../rtp/telephone_event.ts";
import { RtpPortPair, type UdpEndpoint } from "../rtp/rtp_port_pair.ts";
import type { Stream, StreamReader } from "../stream.ts";
import type { PortPool } from "./port_pool.ts";
import { CallAudioPacer, packetMs } from "./call_audio_pacer.ts";

/** Interval between our RTCP reports, in milliseconds (RFC 3550's 5 s minimum). */
export const rtcpIntervalMs = 5000;
/** Longest a packet waits behind a missing one before the gap is given up, in milliseconds. */
export const jitterWaitMs = 60;
/** Length of an in-band DTMF tone, and of a key sent as an RFC 4733 event, in milliseconds. */
export const dtmfToneMs = 100;
/** Silence between two DTMF keys, in milliseconds. */
export const dtmfGapMs = 50;
/** Clock of G.711 audio, in Hz. */
const audioClockRate = 8000;
/** Sample rate G.722 codes, in Hz. */
const g722SampleRate = 16000;
/** Clock of Opus audio (RFC 7587), in Hz. */
const opusClockRate = 48000;
/** Channels Opus is signalled with (RFC 7587 §7: always stereo). */
const opusChannels = 2;
/** Clock of telephone-event when the SDP gives none, in Hz. */
const defaultEventClockRate = 8000;
/** Clock of video, in Hz. */
const videoClockRate = 90000;
/** Gap put between the video of two sources sent one after the other, in clock units. */
const videoSourceGap = 3000;
/** Track ids of what the call receives. */
const audioTrackId = 0;
const videoTrackId = 1;

/** How a call's media is set up. */
export interface CallMediaOptions {
  /** Address the sockets bind. */
  hostname: string;
  /** Address written in our SDP (default: `hostname`), e.g. a public IP in front of NAT. */
  announcedAddress?: string;
  /** The SIP media port range; RTP takes an even port, RTCP the next. */
  ports: PortPool;
  /** Open a video pair too (offer H.264). */
  video: boolean;
  engine: CodecEngine;
  log: Logger;
  /** Interval between our RTCP reports, in milliseconds (default `rtcpIntervalMs`). */
  rtcpIntervalMs?: number;
  /**
   * Send G.711 silence whenever there is nothing else to send, from `start` on, as a phone
   * does: a far end with a jitter buffer plays out the last RFC 2833 event only when later
   * packets push it through, and one latching symmetric RTP waits for ours. Default false.
   */
  idleSilence?: boolean;
}

/** Counters of a call's media. */
export interface CallMediaStats {
  /** RTP packets received (audio, events and video). */
  packetsReceived: number;
  /** RTP packets sent. */
  packetsSent: number;
  /** Received packets that never came (all sources). */
  packetsLost: number;
  /** Interarrival jitter of the received audio, in milliseconds. */
  jitterMs: number;
  /** DTMF keys received as RFC 4733 events. */
  dtmfReceived: number;
  /** Packets the far end reports lost of our audio (its RTCP), when it reported. */
  remotePacketsLost?: number;
  /** Jitter the far end reports of our audio, in milliseconds, when it reported. */
  remoteJitterMs?: number;
  /** Round trip from the far end's reports of our sender reports, in milliseconds. */
  roundTripMs?: number;
}

/** Sending side of one RTP session. */
interface Outbound {
  ssrc: number;
  sequence: number;
  packets: number;
  octets: number;
  /** Last RTP timestamp sent (for sender reports). */
  timestamp: number;
  /** Where RTP goes: the SDP's address, or the source of the far end's RTP once it came. */
  rtpTo?: UdpEndpoint;
  rtcpTo?: UdpEndpoint;
}

/** Receiving side of one RTP session. */
interface Inbound {
  stats?: ReceptionStats;
  /** Loss counted of earlier sources. */
  lostBefore: number;
  reorder: RtpReorderBuffer;
  depacketizer?: Depacketizer;
  flushTimer?: ReturnType<typeof setTimeout>;
  /** Last RTP timestamp of the media (not events) and where it landed on the timeline. */
  lastTimestamp?: number;
  unwrapped: number;
  lastArrivalMs: number;
}

/** One RTP session of the call (audio or video). */
interface Leg {
  kind: "audio" | "video";
  ports: RtpPortPair;
  clockRate: number;
  out: Outbound;
  in: Inbound;
}

function randomUint32(): number {
  return crypto.getRandomValues(new Uint32Array(1))[0];
}

function newLeg(kind: Leg["kind"], ports: RtpPortPair, emit: (p: RtpPacket) => void): Leg {
  return {
    kind,
    ports,
    clockRate: kind === "audio" ? audioClockRate : videoClockRate,
    out: {
      ssrc: randomUint32(),
      sequence: randomUint32() & 0xffff,
      packets: 0,
      octets: 0,
      timestamp: 0,
    },
    in: {
      lostBefore: 0,
      reorder: new RtpReorderBuffer((p) => emit(p)),
      unwrapped: 0,
      lastArrivalMs: 0,
    },
  };
}

function sends(direction: MediaDirection): boolean {
  return direction === "sendrecv" || direction === "sendonly";
}

function receives(direction: MediaDirection): boolean {
  return direction === "sendrecv" || direction === "recvonly";
}

function sameEndpoint(a: UdpEndpoint | undefined, b: UdpEndpoint | undefined): boolean {
  return a?.host === b?.host && a?.port === b?.port;
}

/** The track a call receives audio of `codec` in. */
function audioTrack(codec: CallAudioCodec): Track {
  if (codec !== "OPUS") {
    return {
      id: audioTrackId,
      kind: "audio",
      codec,
      clockRate: audioClockRate,
      // G.722 codes 16 kHz under its 8 kHz RTP clock (RFC 3551 §4.5.2).
      sampleRate: codec === "G722" ? g722SampleRate : audioClockRate,
      channels: 1,
    };
  }
  return {
    id: audioTrackId,
    kind: "audio",
    codec,
    clockRate: opusClockRate,
    sampleRate: opusClockRate,
    channels: opusChannels,
    config: { codec: "OPUS" },
  };
}

/** The RTP session of one call. */
export class CallMedia {
  /** Address to announce in SDP. */
  readonly address: string;
  readonly audioPort: number;
  readonly videoPort?: number;
  /** Tracks of what the call receives (audio id 0, H.264 id 1 when video), set by `start`. */
  readonly tracks: Track[] = [];
  /** Receives each DTMF key the far end sends as an RFC 4733 event. */
  onDtmf?: (digit: string) => void;
  readonly #stats = {
    packetsReceived: 0,
    packetsSent: 0,
    dtmfReceived: 0,
    remotePacketsLost: undefined as number | undefined,
    remoteJitterMs: undefined as number | undefined,
    roundTripMs: undefined as number | undefined,
  };
  #audio: Leg;
  #video: Leg | undefined;
  #engine: CodecEngine;
  #log: Logger;
  #cname = crypto.randomUUID();
  #media: NegotiatedMedia = {};
  #sink: ((frame: MediaFrame) => void) | undefined;
  #events = new TelephoneEventReceiver((key) => {
    this.#stats.dtmfReceived++;
    this.onDtmf?.(key);
  });
  #pacer: CallAudioPacer;
  #videoPacketizer: H264Packetizer | undefined;
  #source: Stream | undefined;
  #reader: StreamReader | undefined;
  #converted: Stream | undefined;
  #sending: Promise<void> | undefined;
  /** Ends of the conversions this call was the last reader of (awaited by close). */
  #conversionsEnding: Promise<void>[] = [];
  /** Video timestamp = pts + offset for the current source (continuous across sources). */
  #videoOffset: number | undefined;
  #rtcpTimer: ReturnType<typeof setInterval> | undefined;
  #dtmfChain: Promise<void> = Promise.resolve();
  #sleeps = new Set<{ timer: ReturnType<typeof setTimeout>; resolve: () => void }>();
  #closing: Promise<void> | undefined;
  #rtcpIntervalMs: number;
  #idleSilence: boolean;

  private constructor(o: CallMediaOptions, audio: RtpPortPair, video: RtpPortPair | undefined) {
    this.address = o.announcedAddress ?? o.hostname;
    this.audioPort = audio.rtpPort;
    this.videoPort = video?.rtpPort;
    this.#engine = o.engine;
    this.#log = o.log;
    this.#rtcpIntervalMs = o.rtcpIntervalMs ?? rtcpIntervalMs;
    this.#idleSilence = o.idleSilence ?? false;
    this.#audio = newLeg("audio", audio, (p) => this.#onAudioPacket(p));
    this.#video = video && newLeg("video", video, (p) => this.#onVideoPacket(p));
    for (const leg of [this.#audio, this.#video]) {
      if (!leg) continue;
      leg.ports.onRtp = (data, source) => this.#onRtp(leg, data, source);
      leg.ports.onRtcp = (data, source) => this.#onRtcp(leg, data, source);
    }
    this.#pacer = new CallAudioPacer(
      (payload, timestamp, marker) => this.#sendAudio(payload, timestamp, marker),
      "PCMU",
    );
  }

  /**
   * Binds the RTP/RTCP pairs (audio, and video when asked); a ServiceUnavailableError when
   * the port range has no free pair.
   */
  static async open(o: CallMediaOptions): Promise<CallMedia> {
    const audio = await RtpPortPair.open(o.hostname, o.ports);
    const video = audio && o.video ? await RtpPortPair.open(o.hostname, o.ports) : undefined;
    if (!audio || (o.video && !video)) {
      await audio?.close();
      throw new ServiceUnavailableError(
        `no free RTP/RTCP port pair in the SIP media range ${o.ports.min}-${o.ports.max}`,
      );
    }
    return new CallMedia(o, audio, video);
  }

  /** Counters of the call's media. */
  get stats(): CallMediaStats {
    const legs = [this.#audio, this.#video].filter((l) => l !== undefined);
    return {
      ...this.#stats,
      packetsLost: legs.reduce(
        (n, l) => n + l.in.lostBefore + Math.max(0, l.in.stats?.lost ?? 0),
        0,
      ),
      jitterMs: (this.#audio.in.stats?.jitter ?? 0) / (this.#audio.clockRate / 1000),
    };
  }

  /** The negotiated media in use. */
  get media(): NegotiatedMedia {
    return this.#media;
  }

  /**
   * Starts receiving into `sink` and sending to the far end of `media` (the RTCP reports
   * start too). Call once; later changes go through `update`.
   */
  start(media: NegotiatedMedia, sink: (frame: MediaFrame) => void): void {
    if (this.#sink) throw new ConflictError("call media started already");
    if (!media.audio) throw new BadRequestError("sdp", "no audio negotiated");
    this.#sink = sink;
    this.tracks.push(audioTrack(media.audio.codec));
    if (media.video && this.#video) {
      this.tracks.push({
        id: videoTrackId,
        kind: "video",
        codec: "H264",
        clockRate: videoClockRate,
      });
    }
    this.update(media);
    // A stream given to `send` before the codec was known starts now.
    if (this.#source) this.send(this.#source);
    this.#pacer.idleSilence = this.#idleSilence;
    this.#rtcpTimer = setInterval(() => this.#sendReports(), this.#rtcpIntervalMs);
  }

  /** Applies a new offer/answer (re-INVITE): remote address, direction, codec. */
  update(media: NegotiatedMedia): void {
    if (!media.audio) throw new BadRequestError("sdp", "no audio negotiated");
    const before = this.#media;
    this.#media = { audio: media.audio, video: this.#video && media.video };
    this.#retarget(this.#audio, before.audio, media.audio);
    if (this.#video) this.#retarget(this.#video, before.video, this.#media.video);
    const codec = media.audio.codec;
    if (before.audio?.codec !== codec) {
      this.#audio.in.depacketizer = new FrameDepacketizer(audioTrackId, codec);
      this.#audio.clockRate = codec === "OPUS" ? opusClockRate : audioClockRate;
      if (this.tracks[audioTrackId]) Object.assign(this.tracks[audioTrackId], audioTrack(codec));
      this.#pacer.codec = codec;
      // The stream being sent is converted to the new codec from now on.
      if (before.audio && this.#source) this.send(this.#source);
    }
    // Video added by a re-INVITE has no track to receive into; it is only sent.
    if (this.#video && media.video && this.tracks[videoTrackId] && !this.#video.in.depacketizer) {
      this.#video.in.depacketizer = new H264Depacketizer(videoTrackId);
    }
  }

  /**
   * Sends the audio of `source` (converted to the call's codec) and its H.264 video when
   * negotiated, until `stopSending` or another `send`; undefined stops sending the stream.
   * Before `start`, the stream waits for it.
   */
  send(source: Stream | undefined): void {
    this.stopSending();
    if (!source || this.#closing) return;
    const codec = this.#media.audio?.codec;
    if (!codec) {
      this.#source = source; // sent from `start`
      return;
    }
    const audio = source.tracks.find((t) => t.kind === "audio");
    // Opus into an Opus call passes as it is (a browser's); G.711 of the other law is
    // converted here; anything else by the engine.
    const g711 = (c: string | undefined) => c === "PCMU" || c === "PCMA";
    const passes = audio?.codec === codec || (g711(codec) && g711(audio?.codec));
    const converted = audio && !passes
      ? convertedAudio(source, codec, this.#engine, this.#log)
      : source;
    const reader = converted.reader(undefined, "other");
    this.#source = source;
    this.#converted = converted;
    this.#reader = reader;
    this.#videoOffset = undefined;
    this.#pacer.live = audio !== undefined;
    this.#sending = this.#sendLoop(reader, converted.tracks);
  }

  /** Stops sending the stream given to `send` (sounds and DTMF still play). */
  stopSending(): void {
    this.#reader?.close();
    const converted = this.#converted;
    // A conversion stops with its last reader; close waits for its ffmpeg to end.
    if (converted && converted !== this.#source && converted.readerCount === 0) {
      this.#conversionsEnding.push(converted.done);
    }
    this.#reader = undefined;
    this.#converted = undefined;
    this.#source = undefined;
    this.#pacer.live = false;
  }

  /**
   * Sends `digits` (0-9, *, #, A-D): as RFC 4733 events on the negotiated telephone-event
   * payload type (a BadRequestError when the far end offered none), or INBAND as tones in the
   * call's codec over the sent audio (G.722 and Opus tones are encoded by the engine). Each
   * key lasts `dtmfToneMs`, then `dtmfGapMs` of silence; resolves when all were sent. Calls
   * queue one after the other.
   */
  sendDtmf(digits: string, mode: "RFC2833" | "INBAND"): Promise<void> {
    const audio = this.#media.audio;
    if (!audio) return Promise.reject(new ConflictError("call media not started"));
    if (digits.length === 0 || [...digits].some((d) => dtmfEventCode(d) === undefined)) {
      return Promise.reject(
        new BadRequestError(
          "dtmf",
          `DTMF digits must be 0-9, *, #, A-D: ${JSON.stringify(digits)}`,
        ),
      );
    }
    if (mode === "RFC2833" && audio.telephoneEventPt === undefined) {
      return Promise.reject(
        new BadRequestError("type", "the far end did not offer telephone-event (RFC 2833)"),
      );
    }
    const run = mode === "RFC2833"
      ? () => this.#sendEvents(digits)
      : async () => this.#pacer.playTones(await this.#tones(digits, audio.codec));
    const done = this.#dtmfChain.then(run);
    this.#dtmfChain = done.catch(() => {});
    return done;
  }

  /**
   * Plays a sound file (anything ffmpeg reads) into the call over the sent audio, in real
   * time; resolves when played. A missing file is a NotFoundError.
   */
  async injectSound(path: string): Promise<void> {
    const codec = this.#media.audio?.codec;
    if (!codec) throw new ConflictError("call media not started");
    let file: Uint8Array;
    try {
      file = await Deno.readFile(path);
    } catch (err) {
      if (err instanceof Deno.errors.NotFound) throw new NotFoundError(`no sound file ${path}`);
      throw err;
    }
    await this.#pacer.playSound(await this.#encode(codec, [], file));
  }

  /**
   * `input` (read with `inputArgs`) in `codec`: G.711 or G.722 bytes, or 20 ms Opus packets (ffmpeg
   * writes them in MPEG-TS, one PES each, as the live conversions do).
   */
  async #encode(
    codec: CallAudioCodec,
    inputArgs: string[],
    input: Uint8Array,
  ): Promise<Uint8Array | Uint8Array[]> {
    const opus = codec === "OPUS";
    const format = opus
      ? "mpegts"
      : codec === "PCMU"
      ? "mulaw"
      : codec === "PCMA"
      ? "alaw"
      : "g722";
    const out = await this.#engine.run({
      inputArgs,
      input,
      live: true, // the caller hears it now: not a background job a busy server may starve
      outputArgs: [...codecArgs(targetTrack(audioTrack(codec), codec, this.#engine)), "-f", format],
    });
    if (!opus) return out;
    const demuxer = new TsDemuxer();
    return [...demuxer.push(out), ...demuxer.flush()]
      .filter((f) => f.codec === "OPUS")
      .map((f) => f.data);
  }

  /** Stops everything and frees the ports. Idempotent. */
  close(): Promise<void> {
    this.#closing ??= (async () => {
      this.stopSending();
      this.#pacer.close();
      if (this.#rtcpTimer !== undefined) clearInterval(this.#rtcpTimer);
      for (const sleep of this.#sleeps) {
        clearTimeout(sleep.timer);
        sleep.resolve();
      }
      this.#sleeps.clear();
      for (const leg of [this.#audio, this.#video]) {
        if (leg?.in.flushTimer !== undefined) clearTimeout(leg.in.flushTimer);
      }
      await this.#sending;
      await Promise.all(this.#conversionsEnding);
      await this.#dtmfChain;
      await Promise.all([this.#audio.ports.close(), this.#video?.ports.close()]);
    })();
    return this.#closing;
  }

  // Receiving.

  #negotiated(leg: Leg): NegotiatedAudio | NegotiatedVideo | undefined {
    return leg.kind === "audio" ? this.#media.audio : this.#media.video;
  }

  #onRtp(leg: Leg, data: Uint8Array, source: UdpEndpoint): void {
    const negotiated = this.#negotiated(leg);
    if (!negotiated || this.#closing) return;
    let packet: RtpPacket;
    try {
      packet = parseRtpPacket(data);
    } catch {
      return; // not RTP: noise on the port
    }
    const pt = packet.payloadType;
    const event = leg.kind === "audio" && pt === this.#media.audio?.telephoneEventPt;
    if (pt !== negotiated.payloadType && !event) return;
    this.#stats.packetsReceived++;
    // Symmetric RTP: answer where the far end's media really comes from.
    if (!sameEndpoint(leg.out.rtpTo, source)) {
      this.#log.debug("call media latched", {
        kind: leg.kind,
        host: source.host,
        port: source.port,
      });
      leg.out.rtpTo = source;
    }
    // We hold it (it is recvonly) or media is inactive: what it still sends is dropped.
    if (!sends(negotiated.direction)) return;
    const nowMs = performance.now();
    const inbound = leg.in;
    if (event && inbound.stats && inbound.stats.ssrc !== packet.ssrc) {
      // Events under an SSRC of their own, beside the audio: they skip the audio's order.
      this.#onEvent(packet);
      return;
    }
    if (inbound.stats?.ssrc !== packet.ssrc) this.#newSource(leg, packet.ssrc, nowMs);
    inbound.stats!.update(packet.sequenceNumber, packet.timestamp, nowMs);
    inbound.lastArrivalMs = nowMs;
    inbound.reorder.push(packet);
    if (inbound.reorder.held > 0 && inbound.flushTimer === undefined) {
      inbound.flushTimer = setTimeout(() => {
        inbound.flushTimer = undefined;
        inbound.reorder.flush();
      }, jitterWaitMs);
    } else if (inbound.reorder.held === 0 && inbound.flushTimer !== undefined) {
      clearTimeout(inbound.flushTimer);
      inbound.flushTimer = undefined;
    }
  }

  /** Another SSRC: what the old one left is delivered, its timeline carries on. */
  #newSource(leg: Leg, ssrc: number, nowMs: number): void {
    const inbound = leg.in;
    if (inbound.stats) {
      inbound.reorder.flush();
      inbound.lostBefore += Math.max(0, inbound.stats.lost);
      // The new source's first media lands where the wall clock says (one packet at least).
      const elapsed = Math.round((nowMs - inbound.lastArrivalMs) * leg.clockRate / 1000);
      if (inbound.lastTimestamp !== undefined) {
        inbound.unwrapped += Math.max(
          elapsed,
          leg.kind === "audio" ? leg.clockRate * packetMs / 1000 : 1,
        );
      }
      inbound.lastTimestamp = undefined;
      inbound.reorder.reset();
      inbound.depacketizer?.reset();
    }
    inbound.stats = new ReceptionStats(ssrc, leg.clockRate);
  }

  /** Position of a media timestamp on the receive timeline, in clock units from the first. */
  #unwrap(inbound: Inbound, timestamp: number): number {
    if (inbound.lastTimestamp !== undefined) {
      inbound.unwrapped += (timestamp - inbound.lastTimestamp) | 0;
    }
    inbound.lastTimestamp = timestamp;
    return inbound.unwrapped;
  }

  #onAudioPacket(packet: RtpPacket): void {
    if (packet.payloadType === this.#media.audio?.telephoneEventPt) this.#onEvent(packet);
    else this.#depacketize(this.#audio, packet);
  }

  #onEvent(packet: RtpPacket): void {
    try {
      this.#events.push(packet);
    } catch (err) {
      if (!(err instanceof ParseError)) throw err;
    }
  }

  #onVideoPacket(packet: RtpPacket): void {
    this.#depacketize(this.#video!, packet);
  }

  #depacketize(leg: Leg, packet: RtpPacket): void {
    const depacketizer = leg.in.depacketizer;
    if (!depacketizer || !this.#sink) return;
    const position = this.#unwrap(leg.in, packet.timestamp);
    try {
      depacketizer.push(packet, (frame) => {
        // H.264 emits a unit at the next one's first packet: placed by its own timestamp.
        const at = position - ((packet.timestamp - frame.pts) | 0);
        if (frame.codec === "H264" && frame.keyframe) this.#keepParameterSets(frame);
        this.#sink!({ ...frame, pts: at, dts: at });
      });
    } catch (err) {
      if (!(err instanceof ParseError)) throw err;
    }
  }

  /** Keeps the in-band SPS/PPS on the video track, for readers that need the config. */
  #keepParameterSets(frame: MediaFrame): void {
    const { sps, pps } = findH264ParameterSets(frame.data);
    const track = this.tracks[videoTrackId];
    if (track && sps.length > 0 && pps.length > 0) {
      track.config = {
        codec: "H264",
        sps: sps.map((n) => n.slice()),
        pps: pps.map((n) => n.slice()),
      };
      // The picture size goes with it: records and players read it from the track.
      const { width, height } = parseH264Sps(sps[0]);
      track.width = width;
      track.height = height;
    }
  }

  #onRtcp(leg: Leg, data: Uint8Array, source: UdpEndpoint): void {
    if (!this.#negotiated(leg) || this.#closing) return;
    const nowMs = performance.now();
    try {
      const reports = parseSenderReports(data);
      const blocks = parseReportBlocks(data);
      if (!sameEndpoint(leg.out.rtcpTo, source)) leg.out.rtcpTo = source;
      for (const report of reports) {
        if (report.ssrc === leg.in.stats?.ssrc) leg.in.stats.senderReport(report.ntpMs, nowMs);
      }
      const ours = blocks.find((b) => b.ssrc === leg.out.ssrc);
      if (ours && leg.kind === "audio") {
        this.#stats.remotePacketsLost = ours.cumulativeLost;
        this.#stats.remoteJitterMs = ours.jitter / (this.#audio.clockRate / 1000);
        if (ours.lastSenderReport !== 0) {
          // RFC 3550 §6.4.1: now - LSR - DLSR, all in 1/65536 s.
          const now = ntpMiddle(Date.now() + ntpUnixOffsetSec * 1000);
          const rtt = (now - ours.lastSenderReport - ours.delaySinceLastSenderReport) >>> 0;
          if (rtt < 0x80000000) this.#stats.roundTripMs = rtt / 65.536;
        }
      }
    } catch (err) {
      if (!(err instanceof ParseError)) throw err;
    }
  }

  // Sending.

  /** A new remote (re-INVITE): sending starts again toward its SDP address. */
  #retarget(
    leg: Leg,
    before: NegotiatedAudio | NegotiatedVideo | undefined,
    now: NegotiatedAudio | NegotiatedVideo | undefined,
  ): void {
    if (!now) return;
    const remote = now.remote;
    if (before && before.remote.host === remote.host && before.remote.port === remote.port) return;
    leg.out.rtpTo = { host: remote.host, port: remote.port };
    leg.out.rtcpTo = { host: remote.host, port: remote.rtcpPort ?? remote.port + 1 };
  }

  /** True when the far end takes media on this leg now. */
  #canSend(leg: Leg): boolean {
    const negotiated = this.#negotiated(leg);
    const to = leg.out.rtpTo;
    return negotiated !== undefined && receives(negotiated.direction) && to !== undefined &&
      to.port !== 0 && to.host !== "0.0.0.0" && to.host !== "::";
  }

  #sendRtp(leg: Leg, pt: number, marker: boolean, timestamp: number, payload: Uint8Array): void {
    if (!this.#canSend(leg)) return;
    const out = leg.out;
    const packet = new Uint8Array(rtpHeaderBytes + payload.length);
    writeRtpHeader(packet, 0, {
      marker,
      payloadType: pt,
      sequenceNumber: out.sequence,
      timestamp,
      ssrc: out.ssrc,
    });
    packet.set(payload, rtpHeaderBytes);
    out.sequence = (out.sequence + 1) & 0xffff;
    out.packets++;
    out.octets += payload.length;
    out.timestamp = timestamp;
    this.#stats.packetsSent++;
    leg.ports.send(packet, false, out.rtpTo!);
  }

  #sendAudio(payload: Uint8Array, timestamp: number, marker: boolean): void {
    const audio = this.#media.audio;
    if (audio) this.#sendRtp(this.#audio, audio.payloadType, marker, timestamp, payload);
  }

  async #sendLoop(reader: StreamReader, tracks: readonly Track[]): Promise<void> {
    const audio = tracks.find((t) => t.kind === "audio");
    const video = tracks.find((t) => t.kind === "video" && t.codec === "H264");
    const packetizer = video &&
      new H264Packetizer(() => {
        const config = video.config;
        return config?.codec === "H264" ? [...config.sps, ...config.pps] : [];
      });
    for (;;) {
      const frame = await reader.next();
      if (frame === undefined) return;
      if (frame.trackId === audio?.id) this.#pacer.pushLive(this.#inCallCodec(frame));
      else if (frame.trackId === video?.id && packetizer) this.#sendVideoFrame(frame, packetizer);
    }
  }

  /**
   * The bytes of an audio frame in the call's codec: G.711 (the other law is recoded) or an
   * Opus packet.
   */
  #inCallCodec(frame: MediaFrame): Uint8Array {
    const codec = this.#media.audio!.codec;
    if (frame.codec === codec) return frame.data;
    const callG711 = codec === "PCMU" || codec === "PCMA";
    if (callG711 && (frame.codec === "PCMU" || frame.codec === "PCMA")) {
      return g711Encode(codec, g711Decode(frame.codec, frame.data));
    }
    return new Uint8Array(0); // a conversion still starting gives nothing else
  }

  #sendVideoFrame(frame: MediaFrame, packetizer: H264Packetizer): void {
    const video = this.#media.video;
    const leg = this.#video;
    if (!video || !leg || !this.#canSend(leg)) return;
    this.#videoOffset ??=
      (leg.out.packets > 0 ? leg.out.timestamp + videoSourceGap : randomUint32()) -
      frame.pts;
    const timestamp = (frame.pts + this.#videoOffset) >>> 0;
    try {
      packetizer.packetize(frame, (payload, marker) => {
        this.#sendRtp(leg, video.payloadType, marker, timestamp, payload);
      });
    } catch (err) {
      if (!(err instanceof ParseError)) throw err;
    }
  }

  async #sendEvents(digits: string): Promise<void> {
    for (const digit of digits) {
      if (this.#closing) return;
      const pt = this.#media.audio?.telephoneEventPt;
      if (pt === undefined) return; // a re-INVITE took it away
      const clockRate = this.#media.audio?.telephoneEventClockRate ?? defaultEventClockRate;
      const timestamp = this.#pacer.timestampNow();
      const startMs = performance.now();
      this.#pacer.muted = true;
      try {
        for (const packet of telephoneEventSchedule(digit, dtmfToneMs, undefined, clockRate)) {
          await this.#sleep(startMs + packet.atMs - performance.now());
          if (this.#closing) return;
          this.#sendRtp(this.#audio, pt, packet.marker, timestamp, packet.payload);
        }
      } finally {
        this.#pacer.muted = false;
      }
      await this.#sleep(dtmfGapMs);
    }
  }

  /** In-band tones of `digits` in `codec`, each followed by its gap of silence. */
  #tones(digits: string, codec: CallAudioCodec): Promise<Uint8Array | Uint8Array[]> {
    const gap = new Int16Array(Math.round(dtmfGapMs * audioClockRate / 1000));
    const parts = [...digits].flatMap((d) => [dtmfTone(d, dtmfToneMs, audioClockRate), gap]);
    const pcm = new Int16Array(parts.reduce((n, p) => n + p.length, 0));
    let at = 0;
    for (const part of parts) {
      pcm.set(part, at);
      at += part.length;
    }
    if (codec === "PCMU" || codec === "PCMA") return Promise.resolve(g711Encode(codec, pcm));
    const raw = new Uint8Array(pcm.buffer, pcm.byteOffset, pcm.byteLength);
    const rawArgs = ["-f", "s16le", "-ar", String(audioClockRate), "-ac", "1"];
    return this.#encode(codec, rawArgs, raw);
  }

  /** Waits `ms` (at once when closing: close ends every wait). */
  #sleep(ms: number): Promise<void> {
    if (ms <= 0 || this.#closing) return Promise.resolve();
    return new Promise((resolve) => {
      const sleep = {
        timer: setTimeout(() => {
          this.#sleeps.delete(sleep);
          resolve();
        }, ms),
        resolve,
      };
      this.#sleeps.add(sleep);
    });
  }

  /** RTCP of each leg: SR (+ RR block) when we send, else RR; with our CNAME. */
  #sendReports(): void {
    const nowMs = performance.now();
    for (const leg of [this.#audio, this.#video]) {
      if (!leg || !leg.out.rtcpTo || !this.#negotiated(leg)) continue;
      const blocks = leg.in.stats ? [leg.in.stats.block(nowMs)] : [];
      let packet: Uint8Array;
      if (leg.out.packets > 0) {
        const sr = writeSenderReport({
          ssrc: leg.out.ssrc,
          ntpSec: Date.now() / 1000 + ntpUnixOffsetSec,
          rtpTimestamp: leg.kind === "audio" ? this.#pacer.timestampNow() : leg.out.timestamp,
          packets: leg.out.packets,
          octets: leg.out.octets,
          cname: this.#cname,
        });
        const rr = blocks.length > 0 ? writeReceiverReport(leg.out.ssrc, blocks) : new Uint8Array();
        packet = new Uint8Array(sr.length + rr.length);
        packet.set(sr);
        packet.set(rr, sr.length);
      } else {
        packet = writeReceiverReport(leg.out.ssrc, blocks, this.#cname);
      }
      leg.ports.send(packet, true, leg.out.rtcpTo);
    }
  }
}
