/**
 * How a WebRTC stream reaches its Web SDK client: status updates (which signaling also turns
 * into StreamStatusEvent hooks) and stream events. Media code calls it; signaling builds it.
 */

/** Statuses a WebRTC stream reports. */
export type StreamStatus = "PUBLISHING" | "PLAYING" | "UNPUBLISHED" | "STOPPED" | "FAILED";

/** The client side of one published or played stream. */
export interface StreamClient {
  /** Reports a status; `fields` (audioState, videoState, ...) are added to the status object. */
  status(status: StreamStatus, info: string, fields?: Record<string, unknown>): void;
  /** Delivers a stream event (`notifyStreamEvent`); its mediaSessionId is set by the client. */
  event(event: Record<string, unknown>): void;
}

/** The final status of a stream ended with `info`: FAILED for failures, else `stopped`. */
export function finalStatus(info: string, stopped: "UNPUBLISHED" | "STOPPED"): StreamStatus {
  return info.startsWith("Failed") ? "FAILED" : stopped;
}
