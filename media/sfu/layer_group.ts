/**
 * SFU forwarding on the send engine with one engine group per published layer: the layer's
 * packets go to the engine once, whatever the number of subscribers forwarding it, and the
 * Workers give each subscriber its own SSRC, payload type, sequence numbers and timestamps
 * (offsets fixed when it joined the layer). A subscriber switching layers (simulcast) waits
 * for a keyframe of the new layer and moves to that layer's group just before the keyframe is
 * published, with offsets that continue its numbering where the old layer left it: its
 * decoder sees one stream, as with SimulcastSwitch (which rewrites each packet per subscriber
 * on the main thread; still used for VP8, whose picture ids are rewritten too, and off the
 * engine).
 */
import { Buffer } from "node:buffer";
import { RtpHeader, RtpPacket } from "werift";
import type { EngineGroup, EngineSendPath } from "../protocols/webrtc/engine_send_path.ts";
import { h264FrameType, vp8FrameType } from "../protocols/webrtc/video_payload.ts";
import { allTemporalLayers, defaultFrameTicks, originSegments } from "../rtp/simulcast_switch.ts";
import { readVp8, shiftVp8, type Vp8Fields, vp8Fields } from "../rtp/vp8_descriptor.ts";

/** Where a sent packet came from: the layer and its sequence number there. */
export interface LayerOrigin {
  layer: number;
  sequenceNumber: number;
}

/**
 * A ring of sequence-number segments: from each start (an outgoing number) on, until the next
 * one, outgoing = incoming + offset (mod 2^16). One per change of offset.
 */
class Segments {
  readonly #starts = new Int32Array(originSegments);
  readonly #offsets = new Int32Array(originSegments);
  readonly #tags: unknown[] = new Array(originSegments);
  #count = 0;

  /** Notes that from `start` on, `offset` holds (for `tag`). */
  note(start: number, offset: number, tag: unknown): void {
    const last = (this.#count - 1) % originSegments;
    if (this.#count > 0 && this.#offsets[last] === offset && this.#tags[last] === tag) return;
    const at = this.#count % originSegments;
    this.#starts[at] = start;
    this.#offsets[at] = offset;
    this.#tags[at] = tag;
    this.#count++;
  }

  /** The segment holding `sequence` (at most `last`, the latest sent), or -1. */
  find(sequence: number, last: number): number {
    if (this.#count === 0 || ((last - sequence) & 0xffff) >= 0x8000) return -1;
    const kept = Math.min(this.#count, originSegments);
    for (let i = 1; i <= kept; i++) {
      const at = (this.#count - i) % originSegments;
      const start = this.#starts[at];
      if (((sequence - start) & 0xffff) >= 0x8000) continue;
      if (((last - start) & 0xffff) < ((sequence - start) & 0xffff)) continue;
      return at;
    }
    return -1;
  }

  offset(at: number): number {
    return this.#offsets[at];
  }

  tag(at: number): unknown {
    return this.#tags[at];
  }
}

/**
 * One layer of a published track as an engine group, shared by the subscribers forwarding it.
 * A simulcast layer closes up the gaps padding-only packets (bandwidth probes, not forwarded)
 * would leave: its group numbers its packets without them. A VP8 layer's group may forward
 * only the temporal layers up to a cap (`changeTid`): it drops the frames above, numbering
 * packets and picture IDs without them, so subscribers with the same cap share it.
 */
export class LayerGroup {
  /** Subscribers receiving the layer from this group now. */
  readonly members = new Set<SharedForward>();
  /** Subscribers that chose the layer and wait for its keyframe. */
  readonly waiting = new Set<SharedForward>();
  /** Members that chose another temporal cap, moving at a frame that allows it. */
  readonly movers = new Set<SharedForward>();
  /** VP8: the group's picture ID (-1 before one), its size in bits, and TL0PICIDX, last sent. */
  lastPicId = -1;
  lastPicIdBits = 7;
  lastTl0 = -1;
  /** VP8: subtracted from picture IDs for the frames dropped (mod 2^15). */
  #picIdOffset = 0;
  /** VP8: timestamp of the frame being dropped, -1 when none is. */
  #dropTs = -1;
  readonly #fields = vp8Fields();
  #scratch = new Uint8Array(1500);
  /** Smoothed frame interval of the layer, in RTP ticks. */
  frameTicks = defaultFrameTicks;
  /** The group's sequence number, timestamp and time (ms) of the latest packet published. */
  lastSequence = 0;
  lastTimestamp = 0;
  lastAtMs = 0;
  /** A packet was published since the group had members. */
  sent = false;
  /** Added to the layer's sequence numbers (padding closed up). */
  #sequenceOffset = 0;
  #frameTs = -1;
  readonly #segments = new Segments();
  readonly #out = new RtpPacket(new RtpHeader(), Buffer.alloc(0));

  constructor(
    readonly layer: number,
    readonly group: EngineGroup,
    readonly engine: EngineSendPath["engine"],
    readonly clockRate: number,
    /** Close up padding gaps (a simulcast layer); else sequence numbers pass unchanged. */
    readonly closesGaps: boolean,
    /** The track is VP8: picture IDs are tracked (and renumbered under a temporal cap). */
    readonly vp8 = false,
    /** VP8: the highest temporal layer forwarded. */
    readonly tidCap = allTemporalLayers,
    /** The group's key in its track (for releasing it). */
    readonly key = "",
  ) {}

  /** The group's picture ID for a frame of the layer (read into `f`). */
  picIdOf(f: Vp8Fields): number {
    return (f.picId + this.#picIdOffset) & ((1 << f.picIdBits) - 1);
  }

  /** VP8: added (mod 2^15) to the layer's picture IDs in what the group publishes. */
  get picIdOffset(): number {
    return this.#picIdOffset;
  }

  /** The group's sequence number for a layer packet's. */
  sequenceOf(layerSequence: number): number {
    return (layerSequence + this.#sequenceOffset) & 0xffff;
  }

  /** The layer sequence number of a packet published as `sequence`, if still known. */
  layerSequenceOf(sequence: number): number | undefined {
    if (!this.closesGaps) return sequence;
    const at = this.#segments.find(sequence, this.lastSequence);
    return at < 0 ? undefined : (sequence - this.#segments.offset(at)) & 0xffff;
  }

  /** Publishes a layer packet to the members, numbered by the group. */
  publish(packet: RtpPacket, nowMs: number): void {
    const { sequenceNumber, timestamp } = packet.header;
    let payload: Uint8Array = packet.payload;
    if (this.vp8) {
      const f = readVp8(payload, 0, payload.length, this.#fields);
      if (f.starts) this.#dropTs = f.tid > this.tidCap ? timestamp : -1;
      if (this.#dropTs >= 0 && timestamp === this.#dropTs) {
        // Not sent, and no gap left: later packets and pictures move down by one.
        this.#sequenceOffset = (this.#sequenceOffset - 1) & 0xffff;
        if (f.starts && f.picIdAt >= 0) this.#picIdOffset = (this.#picIdOffset - 1) & 0x7fff;
        return;
      }
      if (f.starts && f.picIdAt >= 0) {
        this.lastPicId = this.picIdOf(f);
        this.lastPicIdBits = f.picIdBits;
      }
      if (f.starts && f.tl0At >= 0) this.lastTl0 = f.tl0;
      if (this.#picIdOffset !== 0 && f.picIdAt >= 0) {
        // The publisher's payload is shared with other groups: renumber a copy.
        if (this.#scratch.length < payload.length) {
          this.#scratch = new Uint8Array(payload.length);
        }
        const copy = this.#scratch.subarray(0, payload.length);
        copy.set(payload);
        shiftVp8(copy, f, this.#picIdOffset, 0);
        payload = copy;
      }
    }
    const sequence = this.sequenceOf(sequenceNumber);
    if (timestamp !== this.#frameTs) {
      const ticks = (timestamp - this.#frameTs) >>> 0;
      if (this.#frameTs >= 0 && ticks > 0 && ticks < this.clockRate) {
        this.frameTicks += (ticks - this.frameTicks) / 8;
      }
      if (ticks < 0x80000000) this.#frameTs = timestamp;
    }
    if (!this.sent || ((sequence - this.lastSequence) & 0xffff) < 0x8000) {
      this.lastSequence = sequence;
      this.lastTimestamp = timestamp;
      this.lastAtMs = nowMs;
    }
    this.sent = true;
    if (this.closesGaps) this.#segments.note(sequence, this.#sequenceOffset, undefined);
    let out = packet;
    if (sequence !== sequenceNumber || payload !== packet.payload) {
      out = this.#out;
      out.header.sequenceNumber = sequence;
      out.header.timestamp = timestamp;
      out.header.marker = packet.header.marker;
      out.header.payloadType = packet.header.payloadType;
      out.header.ssrc = packet.header.ssrc;
      // rtpBytes copies the payload at once: a view of the scratch buffer will do.
      out.payload = payload === packet.payload
        ? packet.payload
        : Buffer.from(payload.buffer, payload.byteOffset, payload.length);
    }
    this.group.publish(this.engine, out);
  }

  /** A padding-only packet of the layer: later packets move down by one (no gap). */
  skip(layerSequence: number): void {
    if (!this.closesGaps || !this.sent) return;
    const ahead = (this.sequenceOf(layerSequence) - this.lastSequence) & 0xffff;
    if (ahead === 0 || ahead >= 0x8000) return;
    this.#sequenceOffset = (this.#sequenceOffset - 1) & 0xffff;
  }
}

/**
 * The header extensions stamped into a subscriber's packets, by negotiated id (undefined:
 * none): subscribers share a layer's group only with the same ones.
 */
export interface LayerStamps {
  readonly absSendTimeId?: number;
  readonly transportCcId?: number;
}

/** What a SharedForward needs from its published track. */
export interface LayerSource {
  /**
   * The group of `layer` on `engine` for subscribers whose packets carry the extensions of
   * `stamps` under those ids (made on first use).
   */
  layerGroup(
    layer: number,
    stamps: LayerStamps,
    engine: EngineSendPath["engine"],
    tidCap: number,
  ): LayerGroup;
  /** Forgets a group without members or waiters. */
  releaseGroup(group: LayerGroup): void;
  requestKeyframe(layer: number): void;
}

/** A packet to resend to one subscriber (its NACK), as it was sent. */
export interface Resend {
  layer: number;
  layerSequence: number;
  sequenceNumber: number;
  timestampOffset: number;
  /** VP8: added to the cached packet's picture ID (mod 2^15) and TL0PICIDX (mod 2^8). */
  picIdOffset: number;
  tl0Offset: number;
}

/**
 * One subscriber's forwarding of a published track through layer groups: the layer it
 * receives, the one it chose, and its offsets. Works for a track without layers too (one
 * group, no offsets, joined at once).
 */
export class SharedForward {
  /** Layer switches done (the first layer is not counted). */
  switches = 0;
  /** Keyframe requests made. */
  keyframeRequests = 0;
  readonly path: EngineSendPath;
  readonly #source: LayerSource;
  readonly #codec: string;
  readonly #simulcast: boolean;
  readonly #requestIntervalMs: number;
  #group?: LayerGroup;
  #waitingIn?: LayerGroup;
  #current = -1;
  #target = -1;
  #paused = false;
  #requestedAtMs = -Infinity;
  /** Added to the group's sequence numbers (mod 2^16) and the layer's timestamps (mod 2^32). */
  #sequenceOffset = 0;
  #timestampOffset = 0;
  /** The latest packet sent to the subscriber, as of when it left its group. */
  #sent = false;
  #lastSequence = 0;
  #lastTimestamp = 0;
  #lastAtMs = 0;
  #frameTicks = defaultFrameTicks;
  /** VP8: the temporal cap chosen (changeTid); its group's is the one in force. */
  #tidTarget = allTemporalLayers;
  /** VP8: added to the group's picture IDs (mod 2^15) and TL0PICIDX (mod 2^8). */
  #picIdOffset = 0;
  #tl0Offset = 0;
  /** VP8: the picture ID (-1 before one) and TL0PICIDX the subscriber got last. */
  #lastPicId = -1;
  #lastTl0 = -1;
  readonly #fields = vp8Fields();
  /** Outgoing → group sequence numbers, tagged with the group. */
  readonly #segments = new Segments();

  /**
   * `simulcast`: the track has layers to switch between (else its one layer is joined at once
   * and passes unchanged). `requestIntervalMs`: shortest time between two keyframe requests.
   */
  constructor(
    path: EngineSendPath,
    source: LayerSource,
    codec: string,
    simulcast: boolean,
    requestIntervalMs: number,
  ) {
    this.path = path;
    this.#source = source;
    this.#codec = codec;
    this.#simulcast = simulcast;
    this.#requestIntervalMs = requestIntervalMs;
    if (!simulcast) this.#join();
  }

  /** Layer forwarded now, -1 before the first keyframe of the chosen one or while paused. */
  get layer(): number {
    return this.#current;
  }

  /** Layer chosen last. */
  get targetLayer(): number {
    return this.#target;
  }

  /** Added (mod 2^32) to the forwarded layer's timestamps: maps its sender reports. */
  get timestampOffset(): number {
    return this.#timestampOffset;
  }

  /** VP8: the temporal cap chosen. */
  get temporalTarget(): number {
    return this.#tidTarget;
  }

  /**
   * VP8: caps the temporal layers at `tid` (0 = base only). The subscriber moves to the group
   * of its layer with that cap at a frame that allows it: the next one when lowering, one
   * decodable without the frames dropped so far (layer sync or keyframe) when raising.
   */
  selectTemporal(tid: number): void {
    if (!this.#simulcast || this.#codec !== "VP8") return;
    this.#tidTarget = Math.max(0, Math.min(allTemporalLayers, tid));
    const group = this.#group;
    if (group) {
      if (group.tidCap !== this.#tidTarget) group.movers.add(this);
      else group.movers.delete(this);
    }
    if (this.#waitingIn) this.#wait(this.#target);
  }

  /**
   * VP8: moves the subscriber to `group` (its layer, another temporal cap) just before
   * `packet`, which starts a frame: numbering goes on from the last packet and picture it got.
   */
  moveAt(group: LayerGroup, packet: RtpPacket): void {
    const sequence = group.sequenceOf(packet.header.sequenceNumber);
    this.#leave();
    this.#sequenceOffset = (this.#lastSequence + 1 - sequence) & 0xffff;
    const f = readVp8(packet.payload, 0, packet.payload.length, this.#fields);
    if (f.picIdAt >= 0 && this.#lastPicId >= 0) {
      this.#picIdOffset = (this.#lastPicId + 1 - group.picIdOf(f)) & 0x7fff;
    }
    this.#enter(group, sequence);
  }

  /** Chooses the layer to forward; a new one starts at its next keyframe, asked for now. */
  select(layer: number, nowMs: number): void {
    if (!this.#simulcast || layer === this.#target) return;
    this.#target = layer;
    this.#wait(layer === this.#current ? undefined : layer);
    this.#requestedAtMs = -Infinity;
    this.maybeRequest(nowMs);
  }

  /**
   * Stops (pause) or resumes forwarding. A simulcast subscriber resumes at a keyframe of its
   * layer, asked for now, numbered on from what it got last; a track without layers at once.
   */
  setPaused(paused: boolean, nowMs: number): void {
    if (paused === this.#paused) return;
    this.#paused = paused;
    if (paused) {
      this.#leave();
      this.#wait(undefined);
      return;
    }
    if (!this.#simulcast) {
      this.#join();
      return;
    }
    if (this.#target < 0) return;
    this.#wait(this.#target);
    this.#requestedAtMs = -Infinity;
    this.maybeRequest(nowMs);
  }

  /** Asks for a keyframe of the layer forwarded (or awaited), throttled. */
  keyframeNeeded(nowMs: number): void {
    const layer = this.#current !== this.#target ? this.#target : this.#current;
    if (layer < 0 || nowMs - this.#requestedAtMs < this.#requestIntervalMs) return;
    this.#requestedAtMs = nowMs;
    this.keyframeRequests++;
    this.#source.requestKeyframe(layer);
  }

  /** Asks for the awaited layer's keyframe when one is awaited and the last ask is old. */
  maybeRequest(nowMs: number): void {
    if (this.#target < 0 || this.#target === this.#current || this.#paused) return;
    if (nowMs - this.#requestedAtMs < this.#requestIntervalMs) return;
    this.#requestedAtMs = nowMs;
    this.keyframeRequests++;
    this.#source.requestKeyframe(this.#target);
  }

  /** Whether `payload` starts a keyframe, which a waiting subscriber may switch at. */
  startsKeyframe(payload: Uint8Array): boolean {
    return (this.#codec === "H264" ? h264FrameType(payload) : vp8FrameType(payload)) === "key";
  }

  /**
   * Moves the subscriber into `group` just before its keyframe (`packet`, not yet published)
   * is: sequence numbers go on from the last one it got, timestamps by one frame or the time
   * that passed.
   */
  switchAt(group: LayerGroup, packet: RtpPacket, nowMs: number): void {
    const { sequenceNumber, timestamp } = packet.header;
    const sequence = group.sequenceOf(sequenceNumber);
    // Leaving the old layer's group notes the last packet it got there.
    this.#leave();
    if (this.#sent) {
      this.switches++;
      this.#sequenceOffset = (this.#lastSequence + 1 - sequence) & 0xffff;
      const elapsedTicks = Math.round((nowMs - this.#lastAtMs) * group.clockRate / 1000);
      const gap = Math.max(Math.round(this.#frameTicks), elapsedTicks);
      this.#timestampOffset = (this.#lastTimestamp + gap - timestamp) >>> 0;
      if (group.vp8) {
        const f = readVp8(packet.payload, 0, packet.payload.length, this.#fields);
        if (f.picIdAt >= 0 && this.#lastPicId >= 0) {
          this.#picIdOffset = (this.#lastPicId + 1 - group.picIdOf(f)) & 0x7fff;
        }
        if (f.tl0At >= 0 && this.#lastTl0 >= 0) {
          this.#tl0Offset = (this.#lastTl0 + 1 - f.tl0) & 0xff;
        }
      }
    }
    this.#waitingIn?.waiting.delete(this);
    this.#waitingIn = undefined;
    this.#enter(group, sequence);
  }

  /** Joins `group` with the offsets set, from its packet numbered `sequence` on. */
  #enter(group: LayerGroup, sequence: number): void {
    this.#group = group;
    group.members.add(this);
    if (group.tidCap !== this.#tidTarget) group.movers.add(this);
    this.#current = group.layer;
    this.#sent = true;
    this.#segments.note((sequence + this.#sequenceOffset) & 0xffff, this.#sequenceOffset, group);
    this.path.joinShared(group.group, {
      sequenceOffset: this.#sequenceOffset,
      timestampOffset: this.#timestampOffset,
      startSequence: sequence,
      ...(group.vp8
        ? { vp8PictureIdOffset: this.#picIdOffset, vp8Tl0PicIdxOffset: this.#tl0Offset }
        : {}),
    });
  }

  /**
   * Where a packet the subscriber reported lost (`sequenceNumber` as sent) came from, when it
   * is of the layer forwarded now; undefined otherwise or when no longer known.
   */
  resend(sequenceNumber: number): Resend | undefined {
    const group = this.#group;
    if (!group || !this.#sent) return undefined;
    const last = (group.lastSequence + this.#sequenceOffset) & 0xffff;
    const at = this.#segments.find(sequenceNumber, last);
    if (at < 0 || this.#segments.tag(at) !== group) return undefined;
    const layerSequence = group.layerSequenceOf(
      (sequenceNumber - this.#segments.offset(at)) & 0xffff,
    );
    if (layerSequence === undefined) return undefined;
    return {
      layer: group.layer,
      layerSequence,
      sequenceNumber,
      timestampOffset: this.#timestampOffset,
      picIdOffset: (group.picIdOffset + this.#picIdOffset) & 0x7fff,
      tl0Offset: this.#tl0Offset,
    };
  }

  /** Leaves every group (the subscription ended). */
  close(): void {
    this.#leave();
    this.#wait(undefined);
  }

  /** Records what the subscriber got last from its group, which it may be about to leave. */
  #snapshot(): void {
    const group = this.#group;
    if (!group?.sent) return;
    this.#lastSequence = (group.lastSequence + this.#sequenceOffset) & 0xffff;
    this.#lastTimestamp = (group.lastTimestamp + this.#timestampOffset) >>> 0;
    this.#lastAtMs = group.lastAtMs;
    this.#frameTicks = group.frameTicks;
    if (group.lastPicId >= 0) {
      this.#lastPicId = (group.lastPicId + this.#picIdOffset) & ((1 << group.lastPicIdBits) - 1);
    }
    if (group.lastTl0 >= 0) this.#lastTl0 = (group.lastTl0 + this.#tl0Offset) & 0xff;
  }

  /** Joins the one layer of a track without simulcast, unchanged. */
  #join(): void {
    const group = this.#source.layerGroup(
      0,
      this.path.group,
      this.path.engine,
      allTemporalLayers,
    );
    this.#group = group;
    group.members.add(this);
    this.#current = 0;
    this.#sent = true;
    this.path.joinShared(group.group, { sequenceOffset: 0, timestampOffset: 0 });
  }

  #leave(): void {
    const group = this.#group;
    if (!group) return;
    this.#snapshot();
    this.#group = undefined;
    this.#current = -1;
    group.members.delete(this);
    group.movers.delete(this);
    this.path.leaveShared();
    if (group.members.size === 0 && group.waiting.size === 0) this.#source.releaseGroup(group);
  }

  /** Waits for a keyframe of `layer` (undefined: waits for none). */
  #wait(layer: number | undefined): void {
    const before = this.#waitingIn;
    if (before) {
      before.waiting.delete(this);
      this.#waitingIn = undefined;
      if (before.members.size === 0 && before.waiting.size === 0) {
        this.#source.releaseGroup(before);
      }
    }
    if (layer === undefined || this.#paused) return;
    const group = this.#source.layerGroup(
      layer,
      this.path.group,
      this.path.engine,
      this.#tidTarget,
    );
    group.waiting.add(this);
    this.#waitingIn = group;
  }
}
