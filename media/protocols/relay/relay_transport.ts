/**
 * What the relay needs of the channel between two nodes, so the WebSocket is one choice
 * among others (WebRTC or SRT for lossy long-haul links, as WCS offers with cdn_transport):
 * ordered, reliable, message-framed, with a measure of what is queued for backpressure.
 */

/** A message channel between an origin and an edge, open once handed over. */
export interface RelayTransport {
  /** Queues one message; does nothing once the transport is closed. */
  send(message: Uint8Array): void;
  /** Bytes queued by `send` and not yet handed to the network: the sender's backpressure. */
  readonly bufferedBytes: number;
  /** Calls `handler` for every message received from now on (one handler). */
  onMessage(handler: (message: Uint8Array) => void): void;
  /** Settles once, when the transport has closed (either side), with why. */
  readonly closed: Promise<string>;
  /** Closes the transport, telling the peer `reason`; idempotent. */
  close(reason: string): void;
}

/** What one end of a relay counts (live, for metrics and logs). */
export interface RelayCounters {
  /** Frames sent (origin) or received (edge). */
  frames: number;
  /** Payload bytes of those frames. */
  bytes: number;
  /** Frames the origin skipped under backpressure (the edge learns them from `dropped`). */
  drops: number;
}
