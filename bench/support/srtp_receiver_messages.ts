/** Messages between the WebRTC bench's receiver pool and its Workers. */
import type { SrtpProfile } from "../../media/rtp/srtp/srtp_profile.ts";

/** Main thread → Worker. */
export type ReceiverRequest =
  /** Where the send-time stamp sits in each payload (after the RTP header). */
  | { type: "init"; stampOffset: number }
  /** A subscriber's socket to wait on (it gets keys later). */
  | { type: "add"; fd: number }
  /** The subscriber's SRTP keys for what the server sends (werift's remote keys). */
  | {
    type: "keys";
    fd: number;
    profile: SrtpProfile;
    masterKey: Uint8Array;
    masterSalt: Uint8Array;
  }
  | { type: "remove"; fd: number }
  | { type: "stats"; id: number }
  | { type: "stop" };

/** Monotonic counts of a Worker, and the latency samples since the last stats. */
export interface ReceiverCounts {
  /** SRTP packets that passed authentication. */
  received: number;
  /** SRTP packets that failed authentication (each counts as lost). */
  failed: number;
  /** Sequence numbers skipped (packets that never arrived). */
  gaps: number;
  /** SRTP packets that came before their subscriber's keys (not counted either way). */
  waiting: number;
  /** Subscribers with keys that received nothing since the previous stats. */
  silent: number;
  /** Publisher → subscriber latencies of sampled packets, in ms. */
  latencies: number[];
}

/** Worker → main thread. */
export type ReceiverReply =
  /** A non-SRTP datagram (STUN, DTLS, SRTCP) for werift. */
  | { type: "datagram"; fd: number; data: Uint8Array; address: string; port: number }
  | ({ type: "stats"; id: number } & ReceiverCounts)
  | { type: "stopped" };
