/**
 * Stream events (the Web SDK's STREAM_EVENT: mute events a publisher sends, `data` events,
 * those of `/stream/event/send`) to every Web SDK player of a stream: the players forwarding a
 * WebRTC publisher's RTP get them through it, the players made from frames (renditions of any
 * stream, RTMP, RTSP, VOD) from the registry. A mute event also sets the stream's mute state,
 * so later status events (players joining late) and records show it.
 */
import type { RegisteredStream } from "../stream_record.ts";
import { WebRtcPublisher } from "../providers/webrtc_publisher.ts";
import type { Stream } from "../stream.ts";
import { WebRtcFramePlayer } from "./webrtc_frame_player.ts";

/**
 * Delivers an event of `type` to every Web SDK player of `stream` among `registered` (the
 * streams of the registry); returns how many got it. Mute events carry `payload.streamName`.
 */
export function deliverStreamEvent(
  stream: Stream,
  registered: Iterable<RegisteredStream>,
  type: string,
  payload: unknown,
): number {
  const mute = stream.applyMuteEvent(type);
  const body = mute ? { ...(isObject(payload) ? payload : {}), streamName: stream.name } : payload;
  const event = { type, payload: body, streamName: stream.name, name: stream.name };
  let delivered = stream instanceof WebRtcPublisher ? stream.sendEvent(event) : 0;
  for (const player of registered) {
    if (player instanceof WebRtcFramePlayer && player.source === stream) {
      player.event(event);
      delivered++;
    }
  }
  return delivered;
}

function isObject(value: unknown): value is Record<string, unknown> {
  return typeof value === "object" && value !== null && !Array.isArray(value);
}
