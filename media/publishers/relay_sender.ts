/**
 * The origin's side of a relay: one stream's frames to one edge, with keyframe-aligned
 * dropping when the link cannot keep up.
 */
import { ParseError } from "../../core/errors.ts";
import type { Logger } from "../../core/log.ts";
import {
  decodeRelayMessage,
  encodeDropped,
  encodeEnd,
  encodeFrame,
  encodeHello,
  maxRelayTracks,
} from "../protocols/relay/relay_message.ts";
import type { RelayCounters, RelayTransport } from "../protocols/relay/relay_transport.ts";
import { openWebSocketTransport } from "../protocols/relay/websocket_transport.ts";
import { readerQueueFrames, type Stream } from "../stream.ts";

/**
 * Bytes queued in user space above which the sender drops until the next keyframe: 1 MiB,
 * about 4 s of a 2 Mbit/s stream (1 s at 8 Mbit/s). It counts only what the kernel's socket
 * buffer (often several MB itself) could not take, so by then the edge is already late;
 * more would only add latency a live viewer cannot use, less would drop on a single large
 * keyframe.
 */
export const defaultMaxBufferedBytes = 1024 * 1024;

/** How a relay is served. */
export interface RelaySendOptions {
  log: Logger;
  /** Backpressure threshold, in bytes (default `defaultMaxBufferedBytes`). */
  maxBufferedBytes?: number;
  /** Aborting ends the relay: the edge gets `end` with the signal's reason when a string. */
  signal?: AbortSignal;
  /** Updated as frames are sent or dropped. */
  counters?: RelayCounters;
}

/**
 * Sends `source` to the edge on `socket` (a socket from `Deno.upgradeWebSocket`, open or
 * opening, or any RelayTransport): hello (with the first frame when a video track's config
 * is not known yet), then every frame of a reader, then `end`. When the
 * transport holds more than `maxBufferedBytes`, frames are dropped and video resumes at the
 * next keyframe (one is requested from the source once the backlog clears); the edge is told
 * how many frames it missed. Resolves with the reason the relay ended: "source ended", the
 * abort reason, or why the connection closed. The reader is closed on every path.
 */
export async function serveRelay(
  socket: WebSocket | RelayTransport,
  source: Stream,
  options: RelaySendOptions,
): Promise<string> {
  const transport = socket instanceof WebSocket ? await openWebSocketTransport(socket) : socket;
  const log = options.log.child({ relay: source.name });
  const maxBufferedBytes = options.maxBufferedBytes ?? defaultMaxBufferedBytes;
  const counters = options.counters ?? { frames: 0, bytes: 0, drops: 0 };
  if (source.tracks.length > maxRelayTracks) {
    const reason =
      `the stream has ${source.tracks.length} tracks, a relay carries ${maxRelayTracks}`;
    transport.send(encodeEnd(reason));
    transport.close(reason);
    return reason;
  }
  const video = source.tracks.map((t) => t.kind === "video");
  const hasVideo = video.includes(true);
  const reader = source.reader(readerQueueFrames, "relay");
  let reason: string | undefined;
  const stop = (why: string) => {
    reason ??= why;
    reader.close();
  };
  transport.onMessage((bytes) => {
    try {
      if (decodeRelayMessage(bytes).type === "keyframe") source.requestKeyframe();
    } catch (err) {
      if (!(err instanceof ParseError)) throw err;
      log.warn("relay: bad message from the edge", { error: err.message });
      stop(`protocol error: ${err.message}`);
    }
  });
  void transport.closed.then((why) => stop(`edge: ${why}`));
  const signal = options.signal;
  const onAbort = () => stop(typeof signal?.reason === "string" ? signal.reason : "relay stopped");
  signal?.addEventListener("abort", onAbort, { once: true });
  if (signal?.aborted) onAbort();

  // An encoder's output learns its SPS/PPS (the track's config) only with its first
  // keyframe, and the edge needs them in the hello: it waits for the first frame then.
  let helloSent = false;
  const sendHello = () => {
    if (helloSent) return;
    helloSent = true;
    transport.send(encodeHello(source.name, source.tracks));
  };
  const configPending = source.tracks.some((t) =>
    (t.codec === "H264" || t.codec === "H265") && !t.config
  );
  if (!configPending) sendHello();
  log.info("relay started", { maxBufferedBytes });
  let congested = false;
  let waitKeyframe = false;
  let skipped = 0;
  try {
    for (let frame = await reader.next(); frame; frame = await reader.next()) {
      const isVideo = video[frame.trackId];
      if (transport.bufferedBytes > maxBufferedBytes) {
        if (!congested) log.info("relay congested: dropping to the next keyframe");
        congested = true;
        waitKeyframe = hasVideo;
        skipped++;
        counters.drops++;
        continue;
      }
      if (congested) {
        congested = false;
        // The keyframe the edge needs is the next one after the backlog cleared.
        if (waitKeyframe) source.requestKeyframe();
      }
      if (waitKeyframe && isVideo) {
        if (!frame.keyframe) {
          skipped++;
          counters.drops++;
          continue;
        }
        waitKeyframe = false;
      }
      if (skipped > 0) {
        transport.send(encodeDropped(skipped));
        skipped = 0;
      }
      sendHello();
      transport.send(encodeFrame(frame));
      counters.frames++;
      counters.bytes += frame.data.length;
    }
    reason ??= "source ended";
    sendHello();
    transport.send(encodeEnd(reason));
    transport.close(reason);
  } finally {
    reader.close();
    signal?.removeEventListener("abort", onAbort);
  }
  log.info("relay ended", { reason, ...counters });
  return reason;
}
