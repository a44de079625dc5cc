/**
 * Measures one received RTP track for the stream record and its metrics: rates, loss from
 * sequence gaps, and for video frames per second, frame types, GOP size and picture size.
 * Counters only on the per-packet path; windows close when a record is read.
 */
import type { RtpPacket } from "werift";
import type { Codec } from "../../frame.ts";
import {
  type FrameType,
  h264FrameType,
  h264PictureSize,
  vp8FrameType,
  vp8PictureSize,
  vp8StartsFrame,
} from "./video_payload.ts";

/** Span over which rates are measured, in milliseconds. */
export const meterWindowMs = 1000;

/** Counters of one RTP track. */
export class TrackMeter {
  readonly codec: Codec;
  /** RTP payload type the publisher uses. */
  readonly payloadType: number;
  packets = 0;
  bytes = 0;
  /** Packets missing from the sequence, as the receiver sees them (RFC 3550 A.3). */
  lost = 0;
  /** NACK requests received from players. */
  nacks = 0;
  /** Packets resent from the cache in answer to NACKs. */
  retransmitted = 0;
  /** Keyframe requests (PLI/FIR) sent to the publisher. */
  plis = 0;
  keyFrames = 0;
  pFrames = 0;
  bFrames = 0;
  /** Frames between the last two keyframes. */
  gopSize = 0;
  width = 0;
  height = 0;
  /** Rates of the last complete window. */
  kbps = 0;
  fps = 0;
  /** performance.now() of the last packet, 0 before the first. */
  lastPacketMs = 0;

  #firstSeq = -1;
  #highestSeq = 0;
  #cycles = 0;
  #lastTimestamp = -1;
  #framesSinceKey = 0;
  #windowStartMs = performance.now();
  #windowBytes = 0;
  #windowFrames = 0;

  constructor(codec: Codec, payloadType: number) {
    this.codec = codec;
    this.payloadType = payloadType;
  }

  /** Counts one packet; returns true when it starts a video keyframe. */
  add(packet: RtpPacket, nowMs: number): boolean {
    const { header, payload } = packet;
    this.#roll(nowMs);
    this.packets++;
    this.bytes += payload.length;
    this.#windowBytes += payload.length;
    this.lastPacketMs = nowMs;
    this.#sequence(header.sequenceNumber);
    if (this.codec !== "H264" && this.codec !== "VP8") return false;
    if (header.timestamp === this.#lastTimestamp) return false;
    const type = this.#frameType(payload);
    if (type === "unknown") return false;
    this.#lastTimestamp = header.timestamp;
    this.#windowFrames++;
    if (type === "key") {
      if (this.keyFrames > 0) this.gopSize = this.#framesSinceKey;
      this.keyFrames++;
      this.#framesSinceKey = 0;
      const size = this.codec === "H264" ? h264PictureSize(payload) : vp8PictureSize(payload);
      if (size) {
        this.width = size.width;
        this.height = size.height;
      }
    } else if (type === "b") this.bFrames++;
    else this.pFrames++;
    this.#framesSinceKey++;
    return type === "key";
  }

  /** Closes the rate window when it is complete; an idle track reads as zero. */
  #roll(nowMs: number): void {
    const elapsed = nowMs - this.#windowStartMs;
    if (elapsed < meterWindowMs) return;
    const stale = elapsed >= 2 * meterWindowMs;
    this.kbps = stale ? 0 : Math.round(this.#windowBytes * 8 / elapsed);
    this.fps = stale ? 0 : Math.round(this.#windowFrames * 1000 / elapsed);
    this.#windowStartMs = nowMs;
    this.#windowBytes = 0;
    this.#windowFrames = 0;
  }

  /** Brings the rates up to `nowMs` (called before reading them). */
  refresh(nowMs: number): void {
    this.#roll(nowMs);
  }

  #frameType(payload: Uint8Array): FrameType {
    if (this.codec === "H264") return h264FrameType(payload);
    return vp8StartsFrame(payload) ? vp8FrameType(payload) : "unknown";
  }

  #sequence(seq: number): void {
    if (this.#firstSeq < 0) {
      this.#firstSeq = seq;
      this.#highestSeq = seq;
      return;
    }
    const delta = (seq - this.#highestSeq + 0x10000) & 0xffff;
    if (delta > 0 && delta < 0x8000) {
      if (seq < this.#highestSeq) this.#cycles += 0x10000;
      this.#highestSeq = seq;
    }
    const expected = this.#cycles + this.#highestSeq - this.#firstSeq + 1;
    this.lost = Math.max(0, expected - this.packets);
  }
}
