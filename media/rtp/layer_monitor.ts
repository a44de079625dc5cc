/**
 * Which simulcast layers of a publisher are alive, and what each carries: a layer is alive
 * while its packets keep coming (a browser stops sending its top layers when its uplink or
 * CPU is short); rates and picture size come from the per-track meter the WebRTC publisher
 * already uses (bitrate, fps, SPS or VP8 keyframe size).
 */
import type { RtpPacket } from "werift";
import type { Codec } from "../frame.ts";
import { TrackMeter } from "../protocols/webrtc/track_meter.ts";
import { vp8TemporalLayer } from "./simulcast_switch.ts";

/** A layer without a packet for this long is dead, in ms. */
export const layerAliveWindowMs = 1000;

/** What is known of one layer. */
export interface LayerReport {
  /** Index of the layer, 0 the lowest. */
  layer: number;
  alive: boolean;
  kbps: number;
  fps: number;
  /** Picture size from the last keyframe, 0 before one. */
  width: number;
  height: number;
  packets: number;
  /** Temporal layers seen (VP8 TIDs 0..n-1); 1 when the stream has none. */
  temporalLayers: number;
}

/** Liveness and rates of the layers of one simulcast track. */
export class LayerMonitor {
  readonly #meters: TrackMeter[];
  readonly #aliveWindowMs: number;
  readonly #vp8: boolean;
  /** Highest VP8 TID seen per layer. */
  readonly #maxTid: number[];
  #reported: boolean[] | undefined;

  /** `layers`: how many layers the publisher announced (lowest first). */
  constructor(
    codec: Codec,
    payloadType: number,
    layers: number,
    aliveWindowMs = layerAliveWindowMs,
  ) {
    this.#meters = Array.from({ length: layers }, () => new TrackMeter(codec, payloadType));
    this.#aliveWindowMs = aliveWindowMs;
    this.#vp8 = codec === "VP8";
    this.#maxTid = new Array(layers).fill(0);
  }

  /** Number of layers. */
  get layers(): number {
    return this.#meters.length;
  }

  /** Counts a packet of `layer`; returns true when it starts a keyframe. */
  add(layer: number, packet: RtpPacket, nowMs: number): boolean {
    const meter = this.#meters[layer];
    if (!meter) return false;
    if (this.#vp8) {
      const tid = vp8TemporalLayer(packet.payload);
      if (tid > this.#maxTid[layer]) this.#maxTid[layer] = tid;
    }
    return meter.add(packet, nowMs);
  }

  /** True when `layer` had a packet within the alive window. */
  alive(layer: number, nowMs: number): boolean {
    const meter = this.#meters[layer];
    return meter !== undefined && meter.lastPacketMs > 0 &&
      nowMs - meter.lastPacketMs <= this.#aliveWindowMs;
  }

  /** Liveness of every layer, lowest first. */
  aliveLayers(nowMs: number): boolean[] {
    return this.#meters.map((_, layer) => this.alive(layer, nowMs));
  }

  /** Measured bitrate of every layer, in kbit/s (0 when dead or not measured yet). */
  bitratesKbps(nowMs: number): number[] {
    return this.#meters.map((meter) => {
      meter.refresh(nowMs);
      return meter.kbps;
    });
  }

  /** Everything known of every layer, lowest first. */
  report(nowMs: number): LayerReport[] {
    return this.#meters.map((meter, layer) => {
      meter.refresh(nowMs);
      const alive = this.alive(layer, nowMs);
      return {
        layer,
        alive,
        kbps: alive ? meter.kbps : 0,
        fps: alive ? meter.fps : 0,
        width: meter.width,
        height: meter.height,
        packets: meter.packets,
        temporalLayers: this.#maxTid[layer] + 1,
      };
    });
  }

  /**
   * The liveness of every layer when it changed since the last call (the first call reports
   * it), else undefined: what a TRACK_QUALITY_STATE event is sent for.
   */
  changes(nowMs: number): boolean[] | undefined {
    const now = this.aliveLayers(nowMs);
    const before = this.#reported;
    if (before && before.every((alive, layer) => alive === now[layer])) return undefined;
    this.#reported = now;
    return now;
  }
}
