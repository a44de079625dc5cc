/**
 * Messages between the SendEngine (main thread) and its Workers. Control messages and packet
 * batches share one postMessage channel, so a Worker sees them in the order they were made
 * (a subscriber removed after a publish still gets that packet, and nothing after).
 */
import type { SrtpBackend } from "../rtp/srtp/srtp_protector.ts";
import type { SrtpProfile } from "../rtp/srtp/srtp_profile.ts";

/** One fan-out group a subscriber receives, with the rewrite its copies get. */
export interface GroupMembership {
  /** Group number (the engine numbers group names). */
  group: number;
  /** SSRC written into this subscriber's copies (default: the publisher's). */
  ssrc?: number;
  /** Payload type written into this subscriber's copies (default: the publisher's). */
  payloadType?: number;
  /**
   * Added (mod 2^16) to the sequence number of this subscriber's copies: an SFU subscriber
   * sharing a simulcast layer's group keeps its own continuous numbering (default 0).
   */
  sequenceOffset?: number;
  /** Added (mod 2^32) to the RTP timestamp of this subscriber's copies (default 0). */
  timestampOffset?: number;
  /**
   * The group's sequence number (before the offset) of the first packet this subscriber gets
   * there (the keyframe it joined at): a late packet from before it is not sent to it, whose
   * offset would give it a number it already had from its previous layer.
   */
  startSequence?: number;
  /**
   * Added to the VP8 picture ID (mod 2^7 or 2^15) and TL0PICIDX (mod 2^8) of this
   * subscriber's copies (RFC 7741 §4.2), which its decoder checks for gaps across a layer
   * switch (default 0: the payload is not read).
   */
  vp8PictureIdOffset?: number;
  vp8Tl0PicIdxOffset?: number;
}

/**
 * Transport-wide sequence numbers (transport-cc) of a subscriber: the negotiated extension id,
 * whose element packets carry first in their extension block (rtpBytes writes it so), and the
 * transport's TransportCcLog memory, shared by every subscriber of that transport.
 */
export interface TransportCcStamp {
  id: number;
  log: SharedArrayBuffer;
}

/** A subscriber as a Worker gets it. */
export interface WorkerSubscriber {
  handle: number;
  host: string;
  port: number;
  profile: SrtpProfile;
  masterKey: Uint8Array;
  masterSalt: Uint8Array;
  groups: GroupMembership[];
  /** Stamp a transport-wide sequence number on each copy (absent: none). */
  transportCc?: TransportCcStamp;
}

/** Start-up settings of a Worker. */
export interface WorkerSettings {
  bindHost: string;
  srtpBackend: SrtpBackend | "auto";
  gso: boolean;
  /** A socket to send on instead of opening one (SendEngineOptions.socketFd). */
  fd?: number;
}

/** Main thread → Worker. */
export type ToWorker =
  | { type: "start"; settings: WorkerSettings }
  | { type: "add"; subscriber: WorkerSubscriber }
  | { type: "remove"; handle: number }
  | { type: "join"; handle: number; membership: GroupMembership }
  | { type: "leave"; handle: number; group: number }
  | { type: "batch"; buffer: ArrayBuffer }
  | { type: "stats"; request: number }
  | { type: "close" };

/** Counters of one subscriber: [handle, sent, dropped] triples, flattened. */
export type StatsTriples = number[];

/** Worker → main thread. */
export type FromWorker =
  | { type: "ready"; port: number; family: number; srtpBackend: SrtpBackend; gso: boolean }
  | { type: "failed"; error: string }
  | { type: "stats"; request: number; stats: StatsTriples }
  | { type: "error"; handle: number; error: string }
  | { type: "closed" };
