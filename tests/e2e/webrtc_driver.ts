/**
 * The harness side of webrtc_page.html: calls of its driver functions and the shapes of what
 * they answer, shared by the browser scenario files that drive the Web SDK through it.
 */

/** A played stream's native inbound-rtp getStats figures (webrtc_page.html `inboundStats`). */
export interface InboundStats {
  framesDecoded: number;
  frameWidth: number;
  frameHeight: number;
  /** NACKs the player sent for the video track (inbound-rtp nackCount). */
  videoNacks: number;
  audioPackets: number;
  audioSamples: number;
  /** The level now (0-1): a moment, which may fall in a pause of the sound. */
  audioLevel: number;
  /** totalAudioEnergy: with `audioDurationSec`, the mean level over any span. */
  audioEnergy: number;
  /** totalSamplesDuration, in seconds. */
  audioDurationSec: number;
  audioMime: string;
}

/** A published stream's native outbound figures (webrtc_page.html `outboundStats`). */
export interface OutboundStats {
  /** The stats' timestamp, in ms. */
  timestampMs: number;
  videoBytesSent: number;
  frameWidth: number;
  frameHeight: number;
  framesPerSecond: number;
  /** Why the encoder holds back: "none", "bandwidth", "cpu", ... */
  qualityLimitationReason: string;
  /** The browser's send-side estimate (nominated candidate pair), in bit/s. */
  availableOutgoingBitrate: number;
}

/** One end of a candidate pair (webrtc_page.html `selectedPair`). */
export interface CandidateEnd {
  /** "udp" or "tcp". */
  protocol: string;
  /** On TCP: "active", "passive" or "so". */
  tcpType: string;
  address: string;
  port: number;
}

/** A stream's selected candidate pair from native getStats (webrtc_page.html `selectedPair`). */
export interface SelectedPair {
  state: string;
  local: CandidateEnd;
  remote: CandidateEnd;
}

/** What a stream's `<video>` element shows (webrtc_page.html `videoStats`). */
export interface VideoStats {
  found: boolean;
  width: number;
  height: number;
  paused: boolean;
  /** getVideoPlaybackQuality().totalVideoFrames */
  totalFrames: number;
  droppedFrames: number;
  /** Frames requestVideoFrameCallback saw presented since the first call. */
  presentedFrames: number;
}

/** Calls a driver function of webrtc_page.html (bounded, see `browser.ts`). */
export { call } from "./browser.ts";
