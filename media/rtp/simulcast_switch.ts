/**
 * One subscriber's view of a simulcast publisher: packets of every layer come in, those of
 * the selected layer go out under the subscriber's SSRC, as one continuous stream. A switch
 * waits for a keyframe of the new layer (asking the publisher for one, throttled), then
 * shifts sequence numbers and timestamps so they follow the last packet sent, and for VP8
 * also the picture ID and TL0PICIDX (RFC 7741 §4.2), which decoders check for gaps. VP8
 * temporal layers (the descriptor's TID) above a cap are dropped, for `changeTid`.
 */
import { h264FrameType, vp8FrameType } from "../protocols/webrtc/video_payload.ts";
import { readVp8, shiftVp8, type Vp8Fields, vp8Fields } from "./vp8_descriptor.ts";
import { lateWindowPackets } from "./late_window.ts";

/** Video codecs the switch can find keyframes of. */
export type SwitchCodec = "H264" | "VP8";

/** What the switch reads of an incoming packet (werift's RtpPacket has this shape). */
export interface SourcePacket {
  header: { sequenceNumber: number; timestamp: number; marker: boolean };
  payload: Uint8Array;
}

/**
 * A packet to send to the subscriber. One object is reused for every packet, and `payload`
 * may be a view into a buffer the next `forward` call overwrites: send it before then.
 */
export interface ForwardedPacket {
  ssrc: number;
  sequenceNumber: number;
  timestamp: number;
  marker: boolean;
  payload: Uint8Array;
}

/** Shortest time between two keyframe requests for one pending switch, in ms. */
export const keyframeRequestIntervalMs = 1000;
/** Frame interval assumed until the stream shows one, in RTP ticks (30 fps at 90 kHz). */
export const defaultFrameTicks = 3000;
/** Temporal layer cap meaning "all layers". */
export const allTemporalLayers = 3;
/**
 * Sequence mappings kept for `origin` (one per switch or dropped temporal frame), enough for
 * the seconds NACKs come back within.
 */
export const originSegments = 128;

/** Where a packet sent to the subscriber came from: the layer and its sequence number. */
export interface PacketOrigin {
  layer: number;
  sequenceNumber: number;
}

/** Settings of one subscriber's switch. */
export interface SimulcastSwitchOptions {
  codec: SwitchCodec;
  /** SSRC of the subscriber's outgoing track. */
  ssrc: number;
  /** Asks the publisher for a keyframe of a layer (a PLI to that layer's SSRC). */
  requestKeyframe: (layer: number) => void;
  /** RTP clock, in Hz (90000 for video). */
  clockRate?: number;
  /** Shortest time between two keyframe requests, in ms. */
  requestIntervalMs?: number;
}

/** Forwards one layer of a simulcast publisher to one subscriber. */
export class SimulcastSwitch {
  /** SSRC of the subscriber's outgoing track. */
  readonly ssrc: number;
  /** Layer switches done (the first layer chosen is not counted). */
  switches = 0;
  /** Keyframe requests made. */
  keyframeRequests = 0;
  /** Packets dropped for VP8 temporal layers above the cap. */
  temporalDrops = 0;

  readonly #codec: SwitchCodec;
  readonly #clockRate: number;
  readonly #requestIntervalMs: number;
  readonly #requestKeyframe: (layer: number) => void;
  #current = -1;
  #target = -1;
  #requestedAtMs = -Infinity;
  /** Added to incoming sequence numbers (mod 2^16) and timestamps (mod 2^32). */
  #seqOffset = 0;
  #tsOffset = 0;
  /** Incoming sequence number of the current layer's first forwarded packet. */
  #switchSeq = 0;
  #lastOutSeq = 0;
  #lastOutTs = 0;
  #lastOutAtMs = 0;
  #sent = false;
  /** Incoming timestamp of the current layer's latest frame, -1 before one. */
  #frameTs = -1;
  #frameTicks = defaultFrameTicks;
  // VP8 state: offsets of picture ID and TL0PICIDX, the last values sent, the temporal cap.
  #picIdOffset = 0;
  #tl0Offset = 0;
  #lastPicId = -1;
  #lastTl0 = -1;
  #tidCap = allTemporalLayers;
  #tidTarget = allTemporalLayers;
  #dropTs = -1;
  #scratch = new Uint8Array(1500);
  readonly #vp8: Vp8Fields = vp8Fields();
  readonly #out: ForwardedPacket;
  /** Ring of [first outgoing sequence, layer, offset] since which a mapping held. */
  readonly #segments = new Int32Array(originSegments * 3);
  #segmentCount = 0;

  constructor(options: SimulcastSwitchOptions) {
    this.ssrc = options.ssrc;
    this.#codec = options.codec;
    this.#clockRate = options.clockRate ?? 90000;
    this.#requestIntervalMs = options.requestIntervalMs ?? keyframeRequestIntervalMs;
    this.#requestKeyframe = options.requestKeyframe;
    this.#out = {
      ssrc: options.ssrc,
      sequenceNumber: 0,
      timestamp: 0,
      marker: false,
      payload: new Uint8Array(0),
    };
  }

  /** Layer being forwarded, -1 before the first keyframe of the chosen one. */
  get layer(): number {
    return this.#current;
  }

  /** Layer chosen last (forwarded once its keyframe came). */
  get targetLayer(): number {
    return this.#target;
  }

  /** True while a chosen layer waits for its keyframe. */
  get pending(): boolean {
    return this.#target !== this.#current;
  }

  /** Current VP8 temporal layer cap (highest TID forwarded). */
  get temporalLayer(): number {
    return this.#tidCap;
  }

  /** Added (mod 2^32) to the forwarded layer's timestamps: maps its sender reports. */
  get timestampOffset(): number {
    return this.#tsOffset;
  }

  /** Chooses the layer to forward; a new one starts at its next keyframe, asked for now. */
  select(layer: number, nowMs: number): void {
    if (layer === this.#target) return;
    this.#target = layer;
    this.#requestedAtMs = -Infinity;
    this.#maybeRequest(nowMs);
  }

  /**
   * Forwards nothing more until the next keyframe of the chosen layer, asked for now: the
   * subscriber missed packets (it paused the track), which its decoder must not reference.
   */
  restart(nowMs: number): void {
    if (this.#target < 0) return;
    this.#current = -1;
    this.#requestedAtMs = -Infinity;
    this.#maybeRequest(nowMs);
  }

  /**
   * Caps VP8 temporal layers at `tid` (0 = base only). Lowering applies at the next frame;
   * raising waits for a frame that may be decoded without the dropped ones (layer sync or
   * keyframe).
   */
  selectTemporal(tid: number): void {
    this.#tidTarget = Math.max(0, Math.min(allTemporalLayers, tid));
  }

  /** Asks for a keyframe of the forwarded layer (the subscriber sent a PLI), throttled. */
  keyframeNeeded(nowMs: number): void {
    const layer = this.pending ? this.#target : this.#current;
    if (layer < 0 || nowMs - this.#requestedAtMs < this.#requestIntervalMs) return;
    this.#requestedAtMs = nowMs;
    this.keyframeRequests++;
    this.#requestKeyframe(layer);
  }

  /**
   * Takes one packet of `layer`; returns it rewritten for the subscriber, or undefined when
   * it is not to be sent (another layer, or the chosen one before its keyframe).
   */
  forward(layer: number, packet: SourcePacket, nowMs: number): ForwardedPacket | undefined {
    const { sequenceNumber, timestamp } = packet.header;
    if (layer !== this.#current) {
      if (layer !== this.#target) return undefined;
      if (!this.#startsKeyframe(packet.payload)) {
        this.#maybeRequest(nowMs);
        return undefined;
      }
      this.#switchTo(layer, packet, nowMs);
    } else if (this.#target !== this.#current) {
      this.#maybeRequest(nowMs);
    }
    // Late packets of the layer from before its keyframe belong to a frame not sent.
    const sinceSwitch = (sequenceNumber - this.#switchSeq) & 0xffff;
    if (sinceSwitch >= 0x8000) return undefined;
    // The guard trails the layer: left at the keyframe, it would take every packet from
    // 32,768 on for a late one and drop them until the sequence numbers wrapped.
    if (sinceSwitch > lateWindowPackets) {
      this.#switchSeq = (sequenceNumber - lateWindowPackets) & 0xffff;
    }
    if (timestamp !== this.#frameTs) {
      const ticks = (timestamp - this.#frameTs) >>> 0;
      if (this.#frameTs >= 0 && ticks > 0 && ticks < this.#clockRate) {
        // Smoothed, so one late frame does not set the gap put at the next switch.
        this.#frameTicks += (ticks - this.#frameTicks) / 8;
      }
      if (ticks < 0x80000000) this.#frameTs = timestamp;
    }
    let payload = packet.payload;
    if (this.#codec === "VP8") {
      const rewritten = this.#vp8Rewrite(payload, timestamp);
      if (!rewritten) return undefined;
      payload = rewritten;
    }
    const out = this.#out;
    out.sequenceNumber = (sequenceNumber + this.#seqOffset) & 0xffff;
    out.timestamp = (timestamp + this.#tsOffset) >>> 0;
    out.marker = packet.header.marker;
    out.payload = payload;
    if (!this.#sent || ((out.sequenceNumber - this.#lastOutSeq) & 0xffff) < 0x8000) {
      this.#lastOutSeq = out.sequenceNumber;
      this.#lastOutTs = out.timestamp;
      this.#lastOutAtMs = nowMs;
    }
    this.#sent = true;
    this.#noteSegment(out.sequenceNumber);
    return out;
  }

  /**
   * A packet of `layer` that is not forwarded (a padding-only bandwidth probe, which a
   * browser sends on its media SSRCs when it has no RTX): later packets of the forwarded
   * layer move down by one, so the subscriber sees no gap (it would count one as loss).
   */
  skip(layer: number, sequenceNumber: number): void {
    if (layer !== this.#current || !this.#sent) return;
    // Only a packet after the last one sent: a late one left no gap behind what was sent.
    const ahead = ((sequenceNumber + this.#seqOffset) - this.#lastOutSeq) & 0xffff;
    if (ahead === 0 || ahead >= 0x8000) return;
    this.#seqOffset = (this.#seqOffset - 1) & 0xffff;
  }

  /**
   * The layer and incoming sequence number of a packet sent as `sequenceNumber` (what a
   * subscriber's NACK names), or undefined when it is older than the mappings kept.
   */
  origin(sequenceNumber: number): PacketOrigin | undefined {
    if (!this.#sent || ((this.#lastOutSeq - sequenceNumber) & 0xffff) >= 0x8000) return undefined;
    const kept = Math.min(this.#segmentCount, originSegments);
    for (let i = 1; i <= kept; i++) {
      const at = ((this.#segmentCount - i) % originSegments) * 3;
      const start = this.#segments[at];
      // A segment holds the packets from its start up to the next segment's start.
      if (((sequenceNumber - start) & 0xffff) >= 0x8000) continue;
      if (((this.#lastOutSeq - start) & 0xffff) < ((sequenceNumber - start) & 0xffff)) continue;
      return {
        layer: this.#segments[at + 1],
        sequenceNumber: (sequenceNumber - this.#segments[at + 2]) & 0xffff,
      };
    }
    return undefined;
  }

  /**
   * A packet the subscriber reported lost (its NACK names `sequenceNumber`), rewritten as it
   * was sent; undefined when it came from a layer no longer forwarded (its timestamps moved
   * since) or `packetOf` (the publisher's packet of a layer by its sequence number) lost it.
   */
  retransmission(
    sequenceNumber: number,
    packetOf: (layer: number, sequenceNumber: number) => SourcePacket | undefined,
  ): ForwardedPacket | undefined {
    const from = this.origin(sequenceNumber);
    if (!from || from.layer !== this.#current) return undefined;
    const packet = packetOf(from.layer, from.sequenceNumber);
    if (!packet) return undefined;
    let payload = packet.payload;
    if (this.#codec === "VP8") {
      const f = readVp8(payload, 0, payload.length, scratchFields);
      payload = this.#vp8Write(payload, f);
    }
    const out = this.#out;
    out.sequenceNumber = sequenceNumber & 0xffff;
    out.timestamp = (packet.header.timestamp + this.#tsOffset) >>> 0;
    out.marker = packet.header.marker;
    out.payload = payload;
    return out;
  }

  #noteSegment(outSeq: number): void {
    const last = ((this.#segmentCount - 1) % originSegments) * 3;
    if (
      this.#segmentCount > 0 && this.#segments[last + 1] === this.#current &&
      this.#segments[last + 2] === this.#seqOffset
    ) return;
    const at = (this.#segmentCount % originSegments) * 3;
    this.#segments[at] = outSeq;
    this.#segments[at + 1] = this.#current;
    this.#segments[at + 2] = this.#seqOffset;
    this.#segmentCount++;
  }

  #maybeRequest(nowMs: number): void {
    if (this.#target < 0 || this.#target === this.#current) return;
    if (nowMs - this.#requestedAtMs < this.#requestIntervalMs) return;
    this.#requestedAtMs = nowMs;
    this.keyframeRequests++;
    this.#requestKeyframe(this.#target);
  }

  #startsKeyframe(payload: Uint8Array): boolean {
    return (this.#codec === "H264" ? h264FrameType(payload) : vp8FrameType(payload)) === "key";
  }

  #switchTo(layer: number, packet: SourcePacket, nowMs: number): void {
    const { sequenceNumber, timestamp } = packet.header;
    if (this.#sent) {
      this.switches++;
      this.#seqOffset = (this.#lastOutSeq + 1 - sequenceNumber) & 0xffff;
      // The gap is one frame, or the time that really passed when the keyframe came later.
      const elapsedTicks = Math.round((nowMs - this.#lastOutAtMs) * this.#clockRate / 1000);
      const gap = Math.max(Math.round(this.#frameTicks), elapsedTicks);
      this.#tsOffset = (this.#lastOutTs + gap - timestamp) >>> 0;
    }
    this.#current = layer;
    this.#switchSeq = sequenceNumber;
    this.#frameTs = -1;
    if (this.#codec === "VP8") {
      const f = readVp8(packet.payload, 0, packet.payload.length, this.#vp8);
      if (f.picIdAt >= 0 && this.#lastPicId >= 0) {
        this.#picIdOffset = (this.#lastPicId + 1 - f.picId) & ((1 << f.picIdBits) - 1);
      }
      if (f.tl0At >= 0 && this.#lastTl0 >= 0) {
        this.#tl0Offset = (this.#lastTl0 + 1 - f.tl0) & 0xff;
      }
    }
  }

  /** The payload to send with VP8 fields rewritten, or undefined to drop the packet. */
  #vp8Rewrite(payload: Uint8Array, timestamp: number): Uint8Array | undefined {
    const f = readVp8(payload, 0, payload.length, this.#vp8);
    if (f.starts) {
      if (this.#tidTarget < this.#tidCap) this.#tidCap = this.#tidTarget;
      else if (
        this.#tidTarget > this.#tidCap &&
        (vp8FrameType(payload) === "key" || (f.tid > this.#tidCap && f.sync))
      ) {
        this.#tidCap = this.#tidTarget;
      }
      this.#dropTs = f.tid > this.#tidCap ? timestamp : -1;
    }
    if (this.#dropTs >= 0 && timestamp === this.#dropTs) {
      // What is not sent must not leave a gap: later packets and pictures move down by one.
      this.temporalDrops++;
      this.#seqOffset = (this.#seqOffset - 1) & 0xffff;
      if (f.starts && f.picIdAt >= 0) {
        this.#picIdOffset = (this.#picIdOffset - 1) & ((1 << f.picIdBits) - 1);
      }
      return undefined;
    }
    if (f.starts) {
      if (f.picIdAt >= 0) {
        this.#lastPicId = (f.picId + this.#picIdOffset) & ((1 << f.picIdBits) - 1);
      }
      if (f.tl0At >= 0) this.#lastTl0 = (f.tl0 + this.#tl0Offset) & 0xff;
    }
    return this.#vp8Write(payload, f);
  }

  /** `payload` with its picture ID and TL0PICIDX moved by the current offsets (a copy if so). */
  #vp8Write(payload: Uint8Array, f: Vp8Fields): Uint8Array {
    const picIdMask = (1 << f.picIdBits) - 1;
    const picIdMoves = f.picIdAt >= 0 && (this.#picIdOffset & picIdMask) !== 0;
    const tl0Moves = f.tl0At >= 0 && (this.#tl0Offset & 0xff) !== 0;
    if (!picIdMoves && !tl0Moves) return payload;
    // The publisher's payload is shared by every subscriber: rewrite a copy.
    if (this.#scratch.length < payload.length) this.#scratch = new Uint8Array(payload.length);
    const copy = this.#scratch.subarray(0, payload.length);
    copy.set(payload);
    shiftVp8(copy, f, this.#picIdOffset, this.#tl0Offset);
    return copy;
  }
}

const scratchFields = vp8Fields();

/** The temporal layer (TID) of a VP8 packet, -1 when its descriptor has none. */
export function vp8TemporalLayer(payload: Uint8Array): number {
  return readVp8(payload, 0, payload.length, scratchFields).tid;
}
